"""Start and stop torch.distributed for one worker."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from paratrain import comm
from paratrain.env import ProcessInfo
from paratrain.env.torchelastic import GLOO_DRAIN_S, LINE_PREFIX_VAR, store_attempt
from paratrain.errors import DistributedError


def init_process_group(info: ProcessInfo, backend: str, device: torch.device, timeout_s: float) -> bool:
    """Join the job's process group; return True if this call created it.

    Does nothing for one process. A group the user made first
    (``dist.init_process_group("nccl")`` before ``pt.Runtime()``) is kept, and gets the
    same gloo control group as ours (:func:`ensure_control_group`). The device is already
    current (``Runtime`` calls :func:`paratrain.runtime.device.use_device` first).
    All ranks must call it together (it is the first collective).

    Raises:
        DistributedError: the rendezvous failed (names the master address and port).
    """
    if not info.distributed:
        return False
    if dist.is_initialized():
        ensure_control_group(timeout_s)
        return False
    # torchrun exports MASTER_ADDR/PORT; SLURM and MPI launches get them from us.
    if info.master_addr:
        os.environ.setdefault("MASTER_ADDR", info.master_addr)
    if info.master_port:
        os.environ.setdefault("MASTER_PORT", str(info.master_port))
    kwargs = {}
    if device.type == "cuda":
        kwargs["device_id"] = device  # eager NCCL init: errors surface here, not mid-step
    excepthook = sys.excepthook
    started = time.monotonic()
    try:
        dist.init_process_group(
            backend=backend,
            store=_generation_store(info, timeout_s),
            rank=info.rank,
            world_size=info.world_size,
            timeout=timedelta(seconds=timeout_s),
            **kwargs,
        )
    except Exception as exc:  # torch raises DistStoreError, RuntimeError, ValueError…
        error = DistributedError(_join_failure(info, exc, time.monotonic() - started))
        if os.environ.get("PARATRAIN_DEBUG"):
            raise error from exc
        raise error from None  # one line: torch's chained C++ frames say nothing more to a user
    if os.environ.get(LINE_PREFIX_VAR):
        # The launcher already tags every line with its rank; torch's excepthook would tag the
        # traceback again ("[rank0]:[rank0]: Traceback ..."), so keep the hook we had.
        sys.excepthook = excepthook
    ensure_control_group(timeout_s)
    return True


def _join_failure(info: ProcessInfo, exc: BaseException, waited_s: float) -> str:
    """Why this rank could not join, told from its own side: rank 0 hosts the rendezvous and waits
    for the others; any other rank waits for rank 0. States the time actually waited."""
    where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
    head = (f"rank {info.rank} could not join the process group at {where} after waiting {waited_s:.0f}s "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
    if info.rank == 0:
        return (f"{head}; rank 0 hosts the rendezvous there: check that {os.environ.get('MASTER_ADDR')} is an address "
                f"of this machine and that the other {info.world_size - 1} rank(s) run with the same "
                f"MASTER_ADDR/MASTER_PORT and WORLD_SIZE={info.world_size}, or start them all with `paratrain run`")
    return f"{head}; check that rank 0 runs there (same MASTER_ADDR/MASTER_PORT/WORLD_SIZE) and that the address is reachable"


def ensure_control_group(timeout_s: float) -> None:
    """Give paratrain's CPU collectives a gloo group when the job's group is not gloo.

    Barriers that name late ranks need gloo (``monitored_barrier``), and so do the
    collectives on CPU tensors (``comm.any_rank`` of the preemption poll, every step):
    NCCL would refuse them. Collective: all ranks of the job's group call it together.
    """
    if dist.get_backend() != "gloo":
        comm.set_control_group(dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s)))


#: The job's rendezvous store, kept for the life of the process, and how many groups it served.
_store: dist.Store | None = None
_generations = 0


def _generation_store(info: ProcessInfo, timeout_s: float) -> dist.Store:
    """The env:// rendezvous store, under a prefix of its own for each group this process makes.

    The store outlives a destroyed group (torchrun's agent hosts it), and so do the keys
    where the group's ranks published their addresses. A second group made through
    ``env://`` again would read those stale addresses and connect to closed ports; every
    rank makes its groups in the same order, so a per-process count names the same fresh
    prefix on all of them; the restart count of torch elastic separates attempts.
    """
    global _store, _generations
    if _store is None:
        _store, _, _ = next(dist.rendezvous("env://", info.rank, info.world_size, timeout=timedelta(seconds=timeout_s)))
    _generations += 1
    _store.set_timeout(timedelta(seconds=timeout_s))
    return dist.PrefixStore(f"paratrain/attempt{store_attempt(os.environ)}/group{_generations}", _store)




def destroy_process_group() -> None:
    """Leave the process group (idempotent; local, not a collective).

    Before leaving it sleeps :data:`GLOO_DRAIN_S` with the GIL released. A gloo worker
    thread drops each finished collective while holding its queue lock, and dropping one
    whose tensors have Python objects (``rt.gather``'s outputs, DDP's gradients) needs the
    GIL. If the group is freed in that instant by a thread holding the GIL — a DDP reducer
    collected when the user's function returns after ``rt.close()`` — its destructor waits
    for the queue lock forever: a worker that printed its last line and never exits.
    """
    comm.leaving()  # threads that still use a group (background checkpoint writes) finish first
    comm.set_control_group(None)
    if dist.is_available() and dist.is_initialized():
        time.sleep(GLOO_DRAIN_S)  # also for NCCL jobs: their control group is a gloo group
        dist.destroy_process_group()
