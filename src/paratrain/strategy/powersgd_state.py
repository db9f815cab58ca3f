"""torch's PowerSGD hook with a checkpointable state.

``powerSGD_hook.PowerSGDState`` keeps its memory per DDP *bucket index*: the error
feedback (a flat tensor per bucket), the warm-start P and Q matrices, the iteration
and a NumPy generator. Bucket indices are not stable: DDP builds buckets in
parameter order, and rebuilds them after the first iteration in the order gradients
become ready. A resumed run starts again with the first layout, so state saved under
one layout would be added to the wrong gradients in the other.

:class:`PowerSGDComm` therefore saves the state *per parameter name*, and hands it
back to torch's state for whatever buckets DDP forms: the hook records each bucket's
parameters, and when a bucket's parameters differ from those recorded for its index
(a rebuild), or after a restore, it redistributes the per-parameter pieces before
calling ``powerSGD_hook``. The compression itself is torch's, untouched.

Per element, PowerSGD's result does not depend on which bucket a gradient travels in
(every matrix is compressed on its own, all-reduces are element-wise), so with the
state restored this way a resumed run takes the same steps as an uninterrupted one.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd

from paratrain.errors import ConfigError

#: Compression starts at this iteration. DDP rebuilds its buckets after iteration 1, and
#: torch requires ≥ 2 with error feedback; later starts spend more slow fp32 steps.
START_ITER = 2


class PowerSGDComm:
    """The state handed to DDP's ``register_comm_hook`` for PowerSGD, with ``state_dict``.

    Args:
        module: the model inside DDP (parameter names key the saved state).
        rank: matrix approximation rank.
        process_group: DDP's group (``None``: the default group).
    """

    def __init__(self, module: torch.nn.Module, rank: int, process_group: Any = None):
        self.torch_state = torch_powersgd.PowerSGDState(
            process_group=process_group,
            matrix_approximation_rank=rank,
            start_powerSGD_iter=START_ITER,
            use_error_feedback=True,
            warm_start=True,
            random_seed=0,
            # torch logs compression statistics every N iterations; paratrain reports its own.
            compression_stats_logging_frequency=1 << 62,
        )
        trainable = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        self.names = {id(p): name for name, p in trainable}
        self.shapes = {name: p.shape for name, p in trainable}  # a gradient has its parameter's shape
        self.layout: dict[int, tuple[str, ...]] = {}  # bucket index → its parameters' names
        self.in_order = waits_per_bucket(dist.get_backend(process_group))
        self.pending: dict[str, dict[str, torch.Tensor]] = {"error": {}, "q": {}}  # per name, not yet in buckets

    # ---- the hook ----------------------------------------------------------------------------
    def before(self, bucket: dist.GradBucket) -> None:
        """Match torch's per-bucket memory to this bucket's parameters."""
        index = bucket.index()
        names = tuple(self.names[id(p)] for p in bucket.parameters())
        recorded = self.layout.get(index)
        layout_complete = sum(len(n) for n in self.layout.values()) == len(self.names)
        if (recorded is not None and recorded != names) or (recorded is None and layout_complete):
            self._move_to_pending()  # DDP rebuilt its buckets: regroup the memory under the new layout
            self.layout = {}
        self.layout[index] = names
        if self.pending["error"] or self.pending["q"]:
            self._fill_bucket(index, names, bucket.buffer())

    # ---- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's PowerSGD state per parameter name (the error feedback differs per rank)."""
        per_name = {kind: dict(tensors) for kind, tensors in self.pending.items()}
        for kind, tensors in self._split_buckets().items():
            per_name[kind].update(tensors)
        state = self.torch_state
        generator = state.rng.get_state()
        return {
            "iter": int(state.iter),
            "rank": int(state.matrix_approximation_rank),
            "rng": {
                "keys": torch.from_numpy(generator[1].astype(np.int64)),
                "pos": int(generator[2]),
                "has_gauss": int(generator[3]),
                "cached_gaussian": float(generator[4]),
            },
            "error": {name: t.detach().cpu().clone() for name, t in per_name["error"].items()},
            "q": {name: t.detach().cpu().clone() for name, t in per_name["q"].items()},
        }

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; it reaches the buckets at the next backward.

        Raises:
            ConfigError: the state was saved with another rank or for other parameters.
        """
        state = self.torch_state
        if int(saved["rank"]) != state.matrix_approximation_rank:
            raise ConfigError(
                f"the checkpoint's PowerSGD state has rank {saved['rank']}, this run uses "
                f"{state.matrix_approximation_rank}; resume with --grad-compression powersgd:{saved['rank']}"
            )
        unknown = sorted((set(saved["error"]) | set(saved["q"])) - set(self.names.values()))
        if unknown:
            raise ConfigError(f"the checkpoint's PowerSGD state is for other parameters ({', '.join(unknown[:3])})")
        state.iter = int(saved["iter"])
        rng = saved["rng"]
        state.rng.set_state(
            ("MT19937", rng["keys"].numpy().astype(np.uint32), rng["pos"], rng["has_gauss"], rng["cached_gaussian"])
        )
        state.error_dict.clear()
        state.p_memory_dict.clear()
        state.q_memory_dict.clear()
        self.layout = {}
        self.pending = {"error": dict(saved["error"]), "q": dict(saved["q"])}

    # ---- between buckets and names --------------------------------------------------------------
    def _pieces(self, names: tuple[str, ...]) -> tuple[list[tuple[str, int]], list[tuple[str, int]], int]:
        """How torch lays out one bucket: (name, numel) of every gradient in bucket order;
        (name, Q numel) in the order ``powerSGD_hook`` packs Q — compressed matrices grouped by
        shape (its ``shape_to_tensors``); and the P memory's length."""
        state = self.torch_state
        flat = [(name, self.shapes[name].numel()) for name in names]
        by_shape: dict[tuple[int, int], list[tuple[str, int]]] = defaultdict(list)
        p_numel = 0
        for name in names:
            rows = self.shapes[name][0]
            cols = self.shapes[name].numel() // rows
            rank = min(rows, cols, state.matrix_approximation_rank)
            if torch_powersgd._should_compress(rows, cols, rank, state.min_compression_rate)[0]:
                by_shape[(rows, cols)].append((name, cols * rank))
                p_numel += rows * rank
        q_order = [piece for group in by_shape.values() for piece in group]
        return flat, q_order, p_numel

    def _split_buckets(self) -> dict[str, dict[str, torch.Tensor]]:
        """torch's per-bucket error and Q memory, cut into per-name tensors."""
        state = self.torch_state
        out: dict[str, dict[str, torch.Tensor]] = {"error": {}, "q": {}}
        for index, names in self.layout.items():
            flat, q_order, _ = self._pieces(names)
            if index in state.error_dict:
                out["error"].update(_cut(state.error_dict[index], flat))
            if index in state.q_memory_dict:
                out["q"].update(_cut(state.q_memory_dict[index], q_order))
        return out

    def _move_to_pending(self) -> None:
        for kind, tensors in self._split_buckets().items():
            self.pending[kind].update(tensors)
        state = self.torch_state
        state.error_dict.clear()
        state.p_memory_dict.clear()
        state.q_memory_dict.clear()

    def _fill_bucket(self, index: int, names: tuple[str, ...], buffer: torch.Tensor) -> None:
        flat, q_order, p_numel = self._pieces(names)
        state = self.torch_state
        errors, qs = self.pending["error"], self.pending["q"]
        if all(name in errors for name, _ in flat):
            state.error_dict[index] = torch.cat([errors.pop(name).to(buffer).reshape(-1) for name, _ in flat])
        if q_order and all(name in qs for name, _ in q_order):
            state.q_memory_dict[index] = torch.cat([qs.pop(name).to(buffer).reshape(-1) for name, _ in q_order])
            # P is recomputed from Q before it is read; only its memory has to exist.
            state.p_memory_dict[index] = torch.empty(p_numel, device=buffer.device, dtype=buffer.dtype)


def waits_per_bucket(backend: str) -> bool:
    """Whether :func:`powersgd_hook` waits for each bucket's all-reduces on ``backend`` (gloo)."""
    return backend == "gloo"


def powersgd_hook(comm, bucket):  # unannotated: DDP checks hook annotations as objects, not strings
    """DDP communication hook: torch's ``powerSGD_hook`` on state kept per parameter name.

    On gloo it waits for the bucket's three all-reduces before returning. torch's hook
    issues the second and third from future callbacks, so with several buckets in
    flight two ranks can issue them in different orders; gloo then pairs mismatched
    collectives ("Received data size doesn't match expected size", or a hang).
    Waiting keeps every rank's collectives in bucket order.
    """
    comm.before(bucket)
    future = torch_powersgd.powerSGD_hook(comm.torch_state, bucket)
    if comm.in_order:
        future.wait()
    return future


def _cut(flat: torch.Tensor, pieces: list[tuple[str, int]]) -> dict[str, torch.Tensor]:
    out, start = {}, 0
    for name, numel in pieces:
        out[name] = flat[start : start + numel]
        start += numel
    return out
