"""``Runtime``: the one object a user's own training loop talks to.

It reads who this process is (``paratrain.env``), joins the process group, picks the
device, seeds, and hands model work to a *strategy* (how the model is wrapped) and
number work to a *precision* (autocast, scaling). It holds no strategy-specific
branches: those live behind the strategy interface.
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from paratrain import comm
from paratrain.env import ProcessInfo, detect
from paratrain.runtime.device import resolve_backend, resolve_device
from paratrain.runtime.process_group import destroy_process_group, init_process_group
from paratrain.runtime.seeding import rank_seed, seed_everything


class Runtime:
    """Process, device, strategy and precision for one worker.

    Args:
        strategy: ``"auto"``, ``"single"``, ``"dp"``, ``"ddp"``, ``"fsdp"``, ``"deepspeed"``.
        precision: ``"32-true"``, ``"bf16-mixed"``, ``"fp16-mixed"``.
        seed: seeds every generator identically on all ranks (same model init);
            data streams use per-rank seeds derived from it.
        backend: ``"auto"`` (nccl on CUDA, else gloo), ``"gloo"`` or ``"nccl"``.
        timeout: seconds any collective may wait before failing with the late ranks named.
        **strategy_options: passed to the strategy (e.g. ``find_unused_parameters=True``).

    Creating a Runtime in a multi-process job is collective: all ranks must do it.

    Raises:
        ConfigError: unknown strategy/precision/backend, or a bad combination.
        DistributedError: the process group could not be joined in time.
    """

    def __init__(
        self,
        strategy: str = "auto",
        precision: str = "32-true",
        seed: int | None = 0,
        backend: str = "auto",
        timeout: float = comm.DEFAULT_TIMEOUT_S,
        sync_batchnorm: bool = False,
        compile: bool = False,
        **strategy_options: Any,
    ):
        from paratrain.precision import create_precision
        from paratrain.strategy import create_strategy

        self.process: ProcessInfo = detect()
        self.backend = resolve_backend(backend)
        self.device = resolve_device(self.backend, self.process.local_rank)
        self.timeout = float(timeout)
        self.seed = seed
        # Validate names before any rendezvous so a typo fails fast on every rank.
        self.precision = create_precision(precision, self.device)
        self.strategy = create_strategy(
            strategy,
            runtime=self,
            sync_batchnorm=sync_batchnorm,
            compile=compile,
            **strategy_options,
        )
        self._owns_group = init_process_group(self.process, self.backend, self.device, self.timeout)
        if self._owns_group:
            atexit.register(self.close)
        if seed is not None:
            seed_everything(seed)

    # ---- who am I ---------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self.process.rank

    @property
    def local_rank(self) -> int:
        return self.process.local_rank

    @property
    def world_size(self) -> int:
        return self.process.world_size

    @property
    def is_main(self) -> bool:
        return self.process.rank == 0

    def data_seed(self, worker: int = 0) -> int:
        """Seed for this rank's (and loader worker's) data stream."""
        return rank_seed(self.seed or 0, self.rank, worker)

    # ---- model work: delegated to the strategy and the precision ---------------------
    def setup(self, model: torch.nn.Module, *optimizers: torch.optim.Optimizer):
        """Move, wrap and synchronise ``model`` (and adapt ``optimizers``) for the strategy.

        Returns ``model`` alone, or ``(model, *optimizers)``. Collective.
        """
        return self.strategy.setup(model, *optimizers)

    def backward(self, loss: torch.Tensor, model: torch.nn.Module | None = None) -> None:
        """``loss.backward()`` with the precision's scaling."""
        self.strategy.backward(loss, model)

    def step(self, optimizer: torch.optim.Optimizer, clip_norm: float | None = None, model=None):
        """Unscale → clip → step → scaler update → zero_grad. Returns the grad norm or None."""
        return self.strategy.step(optimizer, clip_norm=clip_norm, model=model)

    def accumulate(self, model: torch.nn.Module, sync: bool = True):
        """Context: no gradient all-reduce unless ``sync`` (the last micro-step)."""
        return self.strategy.accumulate(model, sync=sync)

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The user's module without DDP/DP/compile wrappers."""
        return self.strategy.unwrap(model)

    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast context of the precision (no-op for 32-true)."""
        return self.precision.autocast()

    # ---- collectives ------------------------------------------------------------------
    barrier = staticmethod(comm.barrier)
    all_reduce = staticmethod(comm.all_reduce)
    all_gather = staticmethod(comm.all_gather)
    broadcast_object = staticmethod(comm.broadcast_object)
    gather_object = staticmethod(comm.gather_object)
    all_gather_object = staticmethod(comm.all_gather_object)
    main_first = staticmethod(comm.main_first)
    print = staticmethod(comm.print)

    # ---- teardown ---------------------------------------------------------------------
    def close(self) -> None:
        """Leave the process group if this Runtime joined it (idempotent)."""
        if getattr(self, "_owns_group", False):
            self._owns_group = False
            destroy_process_group()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Runtime(rank={self.rank}/{self.world_size}, device={self.device}, backend={self.backend}, "
            f"strategy={self.strategy.name}, precision={self.precision.name})"
        )


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield
