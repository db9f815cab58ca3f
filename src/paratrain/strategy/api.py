"""The strategy interface: how a model is placed, wrapped and synchronised.

One implementation per file (``single.py``, ``dp.py``, ``ddp.py``, ``fsdp.py``, ``hsdp.py``,
``deepspeed.py``), each registered by name with :func:`paratrain.strategy.register_strategy`.
Callers never test the concrete class: whatever they need to know is a method or attribute here.

A strategy owns its options: ``Options``, a frozen dataclass of its own whose fields carry their
help (:func:`paratrain.arguments.option_field`). The checks of ``pt.Runtime``, the entries of
``FitConfig.strategy_options`` and the flags of ``paratrain train`` are derived from it, so a new option is one
field in its strategy's file. A strategy is built in two steps, as Lightning Fabric's are: the
user's object holds the options (``pt.DDP(find_unused_parameters=True)``); the Runtime then
connects a copy of it (:meth:`~Strategy.connect`) to the process, device and precision it resolved.

``setup`` is the same recipe for every strategy::

    refuse a model set up before → barrier → SyncBN → move to device
    → wrap (strategy-specific; makes the weights identical on all ranks)
    → torch.compile (optional) → mark as set up

and the optimizer step is the same order everywhere::

    precision.unscale → strategy clip → precision.optimizer_step → zero_grad
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from paratrain import comm
from paratrain.env import ProcessInfo
from paratrain.errors import ConfigError
from paratrain.strategy.accumulation import GradientAccumulation
from paratrain.strategy.optimizers import check_trains_current_parameters
from paratrain.strategy.options import StrategyOptions
from paratrain.strategy.setup_guard import SetupGuard
from paratrain.strategy.sync_batchnorm import convert_sync_batchnorm
from paratrain.strategy.weights import check_same_weights, replicated_tensors

if TYPE_CHECKING:
    from paratrain.precision import Precision

#: Attribute set on a module once ``setup`` has prepared it (guards a second ``setup``).
SETUP_MARK = "_paratrain_strategy"


@dataclasses.dataclass(frozen=True)
class StepResult:
    """What one ``rt.step(optimizer)`` did; true exactly when the optimizer stepped.

    ``if rt.step(opt): step += 1`` counts optimizer steps whatever the accumulation.

    Attributes:
        stepped: this call ended an accumulation cycle: the optimizer step ran and the
            gradients were cleared, so the micro-batches of the cycle count as trained
            (a checkpoint's data position moves past them). False on a non-final micro-step,
            where nothing happens.
        updated: the weights changed. False when ``stepped`` is and fp16's GradScaler found
            inf/NaN gradients and skipped the update (it lowered the loss scale instead): the
            step still counts — its batches are consumed and replaying them would not give the
            same numbers, since the scale changed — as torch's ``scaler.step`` counts it.
        grad_norm: the gradient norm before clipping when ``clip_norm`` was given (and the
            optimizer stepped), else None.
    """

    stepped: bool
    updated: bool = False
    grad_norm: torch.Tensor | None = None

    def __bool__(self) -> bool:
        return self.stepped


#: ``rt.step`` on a non-final accumulation micro-step.
NOT_STEPPED = StepResult(stepped=False)


class Strategy(abc.ABC):
    """One way to run a model over the job's processes.

    Args:
        **options: the fields of this strategy's :attr:`Options`, checked here (an unknown name
            or a bad value is a :class:`ConfigError`).

    ``pt.Runtime`` takes such an object, or a registered name with the options as keywords,
    checks it for the job with no process group (:meth:`check`) and builds its own copy,
    connected (:meth:`connect`) to the process, the device and the precision: ``setup`` and
    the training step need a connected strategy.
    """

    name: ClassVar[str]
    #: This strategy's options: a frozen dataclass (subclass of :class:`StrategyOptions`).
    Options: ClassVar[type[StrategyOptions]] = StrategyOptions
    #: True when each rank holds only a shard of the state: checkpoints then go
    #: through ``torch.distributed.checkpoint`` (one file per rank), not rank 0 alone.
    sharded_state: ClassVar[bool] = False
    #: Why the fit loop may not drop a step's update (``on_nonfinite="skip"``) with this
    #: strategy, or None when it may (the gradients are the loop's to discard).
    refuses_skipped_steps: ClassVar[str | None] = None
    #: Why the fit loop (``pt.fit``, ``paratrain train``) cannot train with this strategy (it runs in an
    #: own loop only), or None when it can.
    refuses_fit_loop: ClassVar[str | None] = None
    #: True when the strategy takes part in the steps of torchft's replica groups (``paratrain run
    #: --fault-tolerance replicas``); any other is refused inside one (it would train each group alone).
    joins_replica_groups: ClassVar[bool] = False
    #: True when the wrapper moves the forward's inputs to the device itself (so inputs elsewhere are fine).
    moves_inputs: ClassVar[bool] = False

    def __init__(self, **options: Any):
        self.options = self.parse_options(options)
        #: what was given (``auto`` drops what only a job of several processes uses).
        self.given_options: dict[str, Any] = dict(options)
        self.accumulation = GradientAccumulation()
        self.guard = SetupGuard()

    def connect(self, process: ProcessInfo, device: torch.device, precision: Precision,
                sync_batchnorm: bool = False, compile: bool = False) -> Strategy:
        """Give the strategy where it runs; returns it. The Runtime calls it once, on its own copy.

        Args:
            process: where this process sits in the job (rank, world size, nodes).
            device: the device this process computes on.
            precision: the numbers: ``backward`` and the optimizer step go through it.
            sync_batchnorm: convert BatchNorm layers to synchronised ones in ``setup``.
            compile: ``torch.compile`` the wrapped model in ``setup``.
        """
        self.process = process
        self.device = torch.device(device)
        self.precision = precision
        self.sync_batchnorm = sync_batchnorm
        self.compile = compile
        return self

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The names of this strategy's options (the fields of :attr:`Options`)."""
        return tuple(field.name for field in dataclasses.fields(cls.Options))

    @classmethod
    def parse_options(cls, options: Mapping[str, Any]) -> StrategyOptions:
        """``options`` as this strategy's :attr:`Options`. Needs no process group.

        Raises:
            ConfigError: an option this strategy does not take (lists the accepted ones), or a bad value.
        """
        unknown = sorted(set(options) - set(cls.option_names()))
        if unknown:
            accepted = ", ".join(cls.option_names()) or "no options"
            raise ConfigError(f"strategy {cls.name!r} does not take {', '.join(unknown)}; it accepts: {accepted}")
        return cls.Options(**options)

    @classmethod
    def check(cls, world_size: int, options: StrategyOptions, sync_batchnorm: bool = False,
              compile: bool = False) -> None:
        """Refuse a number of processes, or a combination of settings, this strategy cannot run
        (its options are checked values already, :meth:`parse_options`). Needs no process group
        and no device (the launcher calls it too).

        Raises:
            ConfigError: (subclasses) a world size it cannot run, e.g. ``dp`` with more than one process.
            MissingDependencyError: (subclasses) a package the strategy needs is not installed.
        """

    @classmethod
    def fit_options(cls, options: Mapping[str, Any], clip_norm: float | None) -> dict[str, Any]:
        """The options to build this strategy with for a fit loop that clips gradients at
        ``clip_norm`` (None: no clipping). Most strategies clip in ``step`` and need nothing;
        one whose engine clips (deepspeed) needs the norm when it is built."""
        return dict(options)

    # ---- setup ---------------------------------------------------------------------------
    def setup(self, model: torch.nn.Module, *optimizers: torch.optim.Optimizer):
        """Move, wrap and synchronise ``model``; repoint ``optimizers`` if parameters changed.

        Returns the wrapped model, or ``(model, *optimizers)`` when optimizers are given.
        Collective: all ranks must call it together with the same model structure.

        Raises:
            ConfigError: the model was set up before, an argument is not a module/optimizer,
                or the strategy cannot wrap it.
            DistributedError: the ranks' weights still differ after wrapping.
            CollectiveTimeoutError: a rank did not reach ``setup`` in time (names it).
        """
        if not isinstance(model, torch.nn.Module):
            raise ConfigError(f"setup() takes a torch.nn.Module, got {type(model).__name__}")
        for position, optimizer in enumerate(optimizers, start=2):
            if not isinstance(optimizer, torch.optim.Optimizer):
                raise ConfigError(
                    f"setup(model, *optimizers): argument {position} is a {type(optimizer).__name__}, not a "
                    "torch.optim.Optimizer; setup takes the model, then its optimizers"
                )
        done = getattr(self.unwrap(model), SETUP_MARK, None)
        if done is not None:
            raise ConfigError(
                f"setup() was already called on this model (strategy {done!r}); call it once per model "
                "and keep using the model it returned"
            )
        comm.barrier(name="setup")
        module = self._prepare(model)
        wrapped = self.wrap(module, list(optimizers))
        setattr(module, SETUP_MARK, self.name)
        if self.compile:
            wrapped = torch.compile(wrapped)
        self.guard.add(wrapped, self.unwrap(wrapped), optimizers)
        return (wrapped, *optimizers) if optimizers else wrapped

    def _prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.sync_batchnorm:
            if self.process.world_size > 1:
                model = convert_sync_batchnorm(model, self.device)
            else:
                warnings.warn(
                    "sync_batchnorm=True has no effect with one process: BatchNorm already sees the whole batch",
                    stacklevel=4,
                )
        return model.to(self.device)

    @abc.abstractmethod
    def wrap(self, module: torch.nn.Module, optimizers: list[torch.optim.Optimizer]) -> torch.nn.Module:
        """Wrap ``module`` (already on the device) and return what the user will call.

        Must leave the weights identical on all ranks (broadcast from rank 0 where
        the wrapper does not), and keep ``optimizers`` pointing at the parameters
        the wrapped model trains. Collective for multi-process strategies.
        """

    # ---- training step -----------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, model: torch.nn.Module | None = None) -> None:
        """``loss.backward()`` through the precision (scaled for fp16). Inside ``accumulate``
        the gradients add up; ``step`` divides them by the micro-batches they hold.

        Raises:
            ConfigError: several processes, and the loss does not come from a model ``setup`` returned.
        """
        self.guard.check_backward()
        self.precision.backward(loss)

    def step(
        self, optimizer: torch.optim.Optimizer, clip_norm: float | None = None, model: torch.nn.Module | None = None
    ) -> StepResult:
        """Unscale → clip → step → scaler update → ``zero_grad``.

        Returns a :class:`StepResult`: true when the optimizer stepped, with the total gradient
        norm before clipping when ``clip_norm`` is given; false (and nothing happens) on a
        non-final accumulation micro-step.
        """
        if not self.accumulation.should_step:
            return NOT_STEPPED
        check_trains_current_parameters(optimizer)
        self.guard.check_step(optimizer)
        self.precision.unscale(optimizer)
        norm = None
        # The list of gradients is built only for what reads it: a plain step (one micro-batch, no
        # clipping) leaves the gradients to the optimizer, as a hand-written loop does.
        if clip_norm is not None or self.accumulation.pending > 1:
            params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            self.accumulation.average(params)  # k micro-batches: the mean gradient of one batch of k·b
            if clip_norm is not None:
                norm = self.clip_grad_norm(params, clip_norm)
        else:
            self.accumulation.take_pending()  # the count restarts, as average() does
        updated = self.precision.optimizer_step(optimizer)
        optimizer.zero_grad(set_to_none=True)
        self.guard.stepped()
        return StepResult(stepped=True, updated=updated, grad_norm=norm)

    def clip_grad_norm(self, parameters: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
        """Scale gradients so their global L2 norm is at most ``max_norm``; return the norm before.

        Collective for strategies whose gradients are sharded.
        """
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)

    @contextlib.contextmanager
    def accumulate(self, model: torch.nn.Module, steps: int | None = None, sync: bool | None = None) -> Iterator[None]:
        """One micro-step; gradients are all-reduced only on the last of ``steps``.

        ``sync`` overrides the count (True on the micro-step that must synchronise);
        the last batch of a training loader's pass always synchronises
        (see :mod:`paratrain.strategy.accumulation`).

        Raises:
            ConfigError: ``steps`` < 1, a ``sync`` that is not a bool, nested contexts, or
                (several processes) a model that ``setup`` did not return.
        """
        self.guard.check_model(model)
        sync_now = self.accumulation.enter(steps, sync)
        try:
            with contextlib.nullcontext() if sync_now else self.no_sync(model):
                yield
        finally:
            self.accumulation.exit()

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        """Context in which ``backward`` accumulates gradients locally without communication."""
        return contextlib.nullcontext()

    # ---- the user's module and its state ------------------------------------------------------
    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The user's module without ``torch.compile`` and strategy wrappers."""
        model = getattr(model, "_orig_mod", model)  # torch.compile's OptimizedModule
        return self.unwrap_wrapper(model)

    def unwrap_wrapper(self, model: torch.nn.Module) -> torch.nn.Module:
        """Remove this strategy's own wrapper (identity when it does not wrap)."""
        return model

    def check_same_weights(self, model: torch.nn.Module, step: int | None = None) -> None:
        """Check that all ranks hold identical parameters and buffers. Collective.

        BatchNorm statistics without SyncBatchNorm are left out: each rank updates them
        from its own batch (DDP re-broadcasts rank 0's before every forward).

        Raises:
            DistributedError: names the first differing tensor, the ranks and ``step``.
        """
        check_same_weights(replicated_tensors(self.unwrap(model)), step=step)

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The full (unsharded) state dict with the user's key names (no ``module.``).

        Collective for sharded strategies (every rank gets the full tensors on CPU).
        """
        return self.unwrap(model).state_dict()

    def state_access(self) -> Any:
        """How a Checkpointer reads and writes whole-tensor model and optimizer state, or
        ``None`` for torch's ``torch.distributed.checkpoint.state_dict`` (every torch wrapper).
        A strategy whose state torch cannot see (DeepSpeed's ZeRO partitions) returns its own."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """The strategy's own state for checkpoints (e.g. PowerSGD's error feedback); ``{}`` when
        it has none. It may differ per rank: the Checkpointer saves every rank's."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (this rank's)."""

    def layout(self) -> str:
        """How the processes hold the model, in words for the run's first line; ``""`` when the
        strategy's name says it all. Not collective (a connected strategy)."""
        return ""

    def training_loader(self, dataset: Any, batch_size: int, seed: int | None, options: dict[str, Any]) -> Any:
        """A training loader of the strategy's own for ``rt.loader``, or None for paratrain's
        distributed loader (every strategy but one whose data follows its own steps: ``ft-ddp``)."""
        return None

    def close(self) -> None:
        """Release what :meth:`connect` started (``rt.close()`` calls it); most strategies hold nothing."""

    def communication_report(self, step_seconds: float) -> str | None:
        """Communication vs compute for a measured optimizer step, in words; None when there is
        nothing to say (one process, or no link measured)."""
        return None

    def __repr__(self) -> str:
        given = ", ".join(f"{key}={value!r}" for key, value in self.given_options.items())
        return f"{type(self).__name__}({given})"
