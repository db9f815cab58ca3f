"""A finished method's figures, from its ranks' records and how long its process tree ran."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paratrain.bench.record import RankRecord, rank_file
from paratrain.errors import DataError

FINAL_LOSS_STEPS = 10  # "final train loss" is the mean over this many last steps


@dataclass(frozen=True)
class Figures:
    """Args:
        wall_s: the whole process tree, start-up included.
        first_step_s: from starting the launcher to the end of the first optimizer step (rank 0).
        samples_per_s: steady state: global samples per second after the warm-up steps.
        window_s: the steady state's length, the seconds ``samples_per_s`` was measured over.
        peak_memory_bytes: GPU: the largest max-allocated of any rank; CPU: peak RSS summed over ranks.
        memory_kind: ``"gpu max allocated per rank"`` or ``"cpu peak rss, all ranks"``.
        step_losses: the global batch's loss at every step (the mean of the ranks' equal shares).
        final_loss: mean of the last ``FINAL_LOSS_STEPS`` step losses.
        processes: ranks that trained.
    """

    wall_s: float
    first_step_s: float
    samples_per_s: float
    window_s: float
    peak_memory_bytes: int
    memory_kind: str
    step_losses: list[float]
    final_loss: float
    processes: int


def read_records(work_dir: Path, world_size: int) -> list[RankRecord]:
    """Every rank's record.

    Raises:
        DataError: a rank wrote none (names it) or they disagree on the world size.
    """
    records = []
    for rank in range(world_size):
        path = rank_file(work_dir, rank)
        if not path.is_file():
            raise DataError(f"rank {rank} of {world_size} wrote no results ({path.name})")
        records.append(RankRecord.read(path))
    sizes = {record.world_size for record in records}
    if sizes != {world_size}:
        raise DataError(f"the ranks report world sizes {sorted(sizes)}, expected {world_size}")
    return records


def compute_figures(records: list[RankRecord], started: float, wall_s: float, steps: int, warmup_steps: int) -> Figures:
    """One method's figures from its ranks' records: wall time, first step, steady-state samples/s after
    ``warmup_steps``, peak memory, the global batch's loss per step.

    Raises:
        DataError: a rank recorded another number of steps than ``steps``.
    """
    for record in records:
        if len(record.step_losses) != steps:
            raise DataError(f"rank {record.rank} recorded {len(record.step_losses)} optimizer steps, expected {steps}")
    main = records[0]
    ends = main.step_ends
    steady_steps = steps - warmup_steps
    steady_s = ends[-1] - ends[warmup_steps - 1]
    losses = [sum(record.step_losses[i] for record in records) / len(records) for i in range(steps)]
    on_gpu = main.device.startswith("cuda")
    tail = losses[-FINAL_LOSS_STEPS:]
    return Figures(
        wall_s=wall_s,
        first_step_s=ends[0] - started,
        samples_per_s=steady_steps * main.samples_per_step / steady_s if steady_s > 0 else float("inf"),
        window_s=steady_s,
        peak_memory_bytes=max(r.peak_gpu_bytes for r in records) if on_gpu else sum(r.peak_rss_bytes for r in records),
        memory_kind="gpu max allocated per rank" if on_gpu else "cpu peak rss, all ranks",
        step_losses=losses,
        final_loss=sum(tail) / len(tail),
        processes=len(records),
    )
