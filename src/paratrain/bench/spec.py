"""``BenchSpec``: what every method of one benchmark trains, written once as JSON for its processes."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

SPEC_FILE = "spec.json"


@dataclass(frozen=True)
class BenchSpec:
    """The shared recipe, plus the method-specific part (``method``, ``precision``, ``options``).

    Args:
        task: a built-in task name, ``module:attr`` or ``path/file.py:attr``.
        task_options: :class:`paratrain.tasks.api.TaskOptions` fields.
        steps: optimizer steps every method takes.
        global_batch: samples per optimizer step, over all processes.
        nproc: processes of a multi-process method.
        lr, weight_decay: the task's optimizer at a constant learning rate.
        seed: the initial weights' and the data order's seed.
        init_weights: the safetensors file of the initial weights every method loads.
        precision: this method's precision (``32-true``, ``bf16-mixed``, ``fp16-mixed``).
        options: this method's own settings (``strategy``, ``zero_stage``).
        work_dir: where the method's ranks write their records and final weights.
    """

    task: str
    steps: int
    global_batch: int
    nproc: int
    lr: float
    weight_decay: float
    seed: int
    init_weights: str
    task_options: dict[str, Any] = field(default_factory=dict)
    method: str = ""
    precision: str = "32-true"
    options: dict[str, Any] = field(default_factory=dict)
    work_dir: str = ""

    def for_method(self, method: str, precision: str, options: dict[str, Any], work_dir: Path) -> BenchSpec:
        return replace(self, method=method, precision=precision, options=dict(options), work_dir=str(work_dir))

    def batch_per_process(self, world_size: int) -> int:
        """Each process's share of the global batch (the bench checks it divides evenly)."""
        return self.global_batch // world_size

    def save(self, directory: Path) -> Path:
        path = Path(directory) / SPEC_FILE
        path.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> BenchSpec:
        return cls(**json.loads(Path(path).read_text(encoding="utf-8")))
