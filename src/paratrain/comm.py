"""Collective helpers that are correct with and without a process group.

Without an initialised process group every collective returns the single-process
answer: ``all_reduce(x) == x``, ``all_gather(t) == [t]``. Who this process is —
``rank()``, ``world_size()``, ``is_main()``, and so ``print`` and ``get_logger`` —
comes from the group when there is one, else from the launcher's environment
(torchrun, SLURM, OpenMPI/PMI), so rank 0 alone prints also before a group is made
and after it is closed; a plain ``python script.py`` is rank 0 of 1. With a group,
the collectives must be called by **all ranks together, in the same order**, or the
job deadlocks until the timeout.

Every wait has a timeout. Barriers use gloo's ``monitored_barrier`` (on a side gloo
group when the main backend is NCCL), which names the ranks that did not arrive.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from paratrain.env import variables
from paratrain.env.torchelastic import LINE_PREFIX_VAR
from paratrain.errors import CollectiveTimeoutError, ConfigError

T = TypeVar("T")

DEFAULT_TIMEOUT_S = variables.seconds_or_default("PARATRAIN_TIMEOUT", 600.0)  # a malformed value: env/variables.check

_control_group: Any = None  # gloo group for barriers / object collectives when the backend is NCCL


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def _launcher() -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` as the launcher set them (RANK/WORLD_SIZE,
    SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/…), or a plain single process's."""
    from paratrain.env import detect_position

    return detect_position()


def rank() -> int:
    """Global rank: the process group's, or — before one exists and after it is closed —
    the launcher's (torchrun, SLURM, OpenMPI/PMI variables); 0 for a plain process."""
    return dist.get_rank() if is_initialized() else _launcher()[0]


def world_size() -> int:
    """Number of processes in the job: the process group's, or without one the launcher's; 1 for a plain process.

    Without a group the collectives below still give one-process answers: there is
    nobody to talk to, whatever the job's size.
    """
    return dist.get_world_size() if is_initialized() else _launcher()[1]


def local_rank() -> int:
    """Rank within this node (``LOCAL_RANK``/``SLURM_LOCALID``/…); 0 for one process."""
    return _launcher()[2]


def is_main() -> bool:
    """True on global rank 0 (and in a single process), with or without a process group."""
    return rank() == 0


def set_control_group(group: Any) -> None:
    """Install the gloo group used for barriers and object collectives (runtime only)."""
    global _control_group
    _control_group = group


def _control() -> Any:
    return _control_group


_before_leaving: list[Callable[[], Any]] = []  # weak references (WeakMethod): None once their object is gone


def before_leaving(callback: Callable[[], Any]) -> None:
    """Call ``callback()()`` (a weak reference to a function, e.g. ``weakref.WeakMethod``) when this process
    leaves its process group through paratrain, before the group is destroyed: work that still uses the
    group in a thread (a background checkpoint write) finishes first. Not collective."""
    _before_leaving.append(callback)


def leaving() -> None:
    """Run the :func:`before_leaving` callbacks whose objects are still alive, once. Not collective."""
    callbacks, _before_leaving[:] = list(_before_leaving), []
    for callback in callbacks:
        function = callback()
        if function is not None:
            function()


_LATE_RANKS = re.compile(r"[Rr]anks? ([\d, ]+) failed to pass monitoredBarrier")


def barrier(timeout: float | None = None, name: str = "barrier", group: Any = None) -> None:
    """Wait until every rank arrives. Collective (on ``group``, a gloo group of every rank, when given;
    else the control group).

    Raises:
        CollectiveTimeoutError: some rank did not arrive within ``timeout`` seconds
            (default ``PARATRAIN_TIMEOUT`` or 600); the error lists the late ranks.
    """
    if not is_initialized() or world_size() == 1:
        return
    timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
    group = group or _control()
    if group is None and dist.get_backend() != "gloo":
        dist.barrier()  # no gloo side group: fall back to the backend's own barrier
        return
    try:
        dist.monitored_barrier(group=group, timeout=timedelta(seconds=timeout), wait_all_ranks=True)
    except RuntimeError as exc:
        text = str(exc)
        match = _LATE_RANKS.search(text)
        late = [int(r) for r in re.findall(r"\d+", match.group(1))] if match else []
        who = f"rank(s) {', '.join(map(str, late))}" if late else "some rank"
        if rank() != 0 and not late:
            who = "rank 0 (or a rank it waited for)"
        raise CollectiveTimeoutError(
            f"{name}: {who} did not arrive within {timeout:g}s; look at that rank's log "
            f"(it crashed, hangs, or runs a different code path)",
            late_ranks=late,
        ) from exc


@contextlib.contextmanager
def main_first(timeout: float | None = None) -> Iterator[None]:
    """Run the body on rank 0 first, then on the others (downloads, caches). Collective."""
    if not is_main():
        barrier(timeout, name="main_first")
    yield
    if is_main():
        barrier(timeout, name="main_first")


_OPS = {
    "sum": dist.ReduceOp.SUM,
    "mean": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
}


def _collective_device() -> torch.device:
    if is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce(value: T, op: str = "mean") -> T:
    """Reduce a tensor or a Python number over all ranks. Collective.

    ``op`` is ``"mean"``, ``"sum"``, ``"max"`` or ``"min"``. A tensor comes back as a
    new tensor on its own device and dtype (means are computed in float); a number
    comes back as a float (or int for sum/max/min of ints).

    Raises:
        ConfigError: unknown ``op``.
    """
    if op not in _OPS:
        raise ConfigError(f"all_reduce op {op!r} is not one of {sorted(_OPS)}")
    is_tensor = isinstance(value, torch.Tensor)
    tensor = value.detach().clone() if is_tensor else torch.tensor(value)
    if op == "mean" and not tensor.is_floating_point():
        tensor = tensor.double()
    if is_initialized() and world_size() > 1:
        original_device = tensor.device
        work = tensor.to(_collective_device())
        dist.all_reduce(work, op=_OPS[op])
        tensor = work.to(original_device)
        if op == "mean":
            tensor = tensor / world_size()
    if is_tensor:
        return tensor  # type: ignore[return-value]
    return tensor.item()  # type: ignore[return-value]


def any_rank(flags: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum of a small CPU tensor over all ranks, on the CPU control group. Collective.

    For per-step decisions (stop, save now): under NCCL it runs on the gloo side group, so
    it never waits for the GPU stream.
    """
    flags = flags.detach().clone()
    if is_initialized() and world_size() > 1:
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=_control())
    return flags


def broadcast_object(obj: T, src: int = 0, group: Any = None) -> T:
    """Return rank ``src``'s ``obj`` on every rank (picklable objects); on ``group`` (a group of every
    rank) instead of the control group when given. Collective."""
    if not is_initialized() or world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src, group=group or _control())
    return box[0]


def all_gather_object(obj: T, group: Any = None) -> list[T]:
    """Every rank's ``obj``, in rank order, on every rank; on ``group`` (a group of every rank) instead
    of the control group when given. Collective."""
    if not is_initialized() or world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj, group=group or _control())
    return out


def gather_object(obj: T, dst: int = 0) -> list[T] | None:
    """Every rank's ``obj`` in rank order on rank ``dst``; ``None`` elsewhere. Collective."""
    if not is_initialized() or world_size() == 1:
        return [obj]
    out: list[Any] | None = [None] * world_size() if rank() == dst else None
    dist.gather_object(obj, out, dst=dst, group=_control())
    return out


def all_gather_rows(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's 1-D ``tensor`` as the rows of one tensor, in rank order: one collective, for tensors of the
    same length and dtype on every rank (:func:`all_gather` takes any first dimension, for one more). Collective."""
    if not is_initialized() or world_size() == 1:
        return tensor.reshape(1, -1)
    work = tensor.to(_collective_device())
    rows = [torch.empty_like(work) for _ in range(world_size())]
    dist.all_gather(rows, work)
    return torch.stack(rows).to(tensor.device)


def all_gather(tensor: torch.Tensor) -> list[torch.Tensor]:
    """All ranks' tensors, in rank order; first dimensions may differ per rank. Collective.

    Other dimensions and the dtype must match on every rank.

    Raises:
        DistributedError: ranks disagree on the trailing shape or dtype (names them).
    """
    if not is_initialized() or world_size() == 1:
        return [tensor]
    from paratrain.errors import DistributedError

    meta = all_gather_object((tuple(tensor.shape), str(tensor.dtype)))
    trailing = {(shape[1:], dtype) for shape, dtype in meta}
    if len(trailing) > 1:
        raise DistributedError(
            "all_gather: ranks disagree on trailing shape/dtype: "
            + ", ".join(f"rank {r}: {shape} {dtype}" for r, (shape, dtype) in enumerate(meta))
        )
    if tensor.dim() == 0:
        tensor = tensor.reshape(1)
        meta = [((1,), d) for _, d in meta]
    sizes = [shape[0] for shape, _ in meta]
    longest = max(sizes)
    device = _collective_device()
    padded = torch.zeros((longest, *tensor.shape[1:]), dtype=tensor.dtype, device=device)
    padded[: tensor.shape[0]] = tensor.to(device)
    buckets = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(buckets, padded)
    return [bucket[:size].to(tensor.device) for bucket, size in zip(buckets, sizes)]


# ---- rank-0 output -------------------------------------------------------------------


def print(*args: Any, **kwargs: Any) -> None:  # noqa: A001 - mirrors builtins.print on purpose
    """``print`` on rank 0 only (``all_ranks=True`` prints everywhere with a rank tag)."""
    if kwargs.pop("all_ranks", False):
        if _tagged_by_launcher():
            builtins.print(*args, **kwargs)
        else:
            builtins.print(f"[rank {rank()}]", *args, **kwargs)
    elif is_main():
        builtins.print(*args, **kwargs)


def _tagged_by_launcher() -> bool:
    """The launcher puts ``[rankN]:`` before every line of this process already (one tag per line)."""
    return bool(os.environ.get(LINE_PREFIX_VAR))


def _log_format() -> str:
    """``[time rank N LEVEL] message``, without the rank where the launcher tags the line."""
    return "[%(asctime)s" + ("" if _tagged_by_launcher() else " rank %(rank)s") + " %(levelname)s] %(message)s"


class _MainRankFilter(logging.Filter):
    """Lets records through on rank 0, and warnings and errors from every rank."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = rank()
        return is_main() or record.levelno >= logging.WARNING


def get_logger(name: str = "paratrain") -> logging.Logger:
    """A logger that writes INFO on rank 0 and WARNING+ on every rank, tagged with the rank."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, _MainRankFilter) for f in logger.filters):
        logger.addFilter(_MainRankFilter())
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(_log_format(), "%H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger
