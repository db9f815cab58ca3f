"""DeepSpeed ZeRO stages 1-3 through the ``deepspeed`` package (``pip install 'paratrain[deepspeed]'``).

DeepSpeed owns the optimizer step, gradient clipping, loss scaling and gradient
accumulation inside its engine, so this strategy builds the engine's config from
paratrain's settings and forwards ``backward``/``step`` to it. ZeRO partitions
optimizer state (1), gradients (2) and parameters (3) over the ranks; the engine
broadcasts rank 0's weights when it is created.

Checkpoints hold whole tensors gathered through DeepSpeed's tensor-fragment API
(``deepspeed_state.py``): the fp32 master weights and the optimizer state by parameter
name, written by rank 0 like a ddp checkpoint, so they load at another world size or
ZeRO stage. On CPU DeepSpeed runs on gloo (its CPU accelerator).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from paratrain.arguments import option, option_field
from paratrain.errors import ConfigError, MissingDependencyError, require
from paratrain.strategy import register_strategy
from paratrain.strategy.api import NOT_STEPPED, StepResult, Strategy, StrategyOptions
from paratrain.strategy.deepspeed_state import ZeroStateAccess

_NEEDS = ("deepspeed", "deepspeed", "strategy 'deepspeed'")  # module, paratrain extra, what needs it


@register_strategy
class DeepSpeedStrategy(Strategy):
    """DeepSpeed's engine with :class:`DeepSpeedStrategy.Options` (``pt.DeepSpeed(zero_stage=3)``).

    Raises:
        MissingDependencyError: the deepspeed package is not installed.
    """

    name = "deepspeed"
    refuses_skipped_steps = "its engine owns the gradients"

    @dataclass(frozen=True)
    class Options(StrategyOptions):
        zero_stage: int = option_field(2, "ZeRO stage: 1 (optimizer state), 2 (+ gradients) or 3 (+ parameters) "
                                       "partitioned over the processes")
        #: the engine clips at this norm (None: no clipping, as with every other strategy); pt.fit
        #: sets it from clip_norm (:meth:`DeepSpeedStrategy.fit_options`)
        gradient_clipping: float | None = None
        #: a DeepSpeed config dict merged over the one built here
        config: Mapping[str, Any] | None = None

        def __post_init__(self) -> None:
            """Check each value against its annotation, the ZeRO stage, and that ``config`` leaves
            accumulation to the loop.

            Raises:
            ConfigError: a value of the wrong type; a bad ZeRO stage; accumulation set in ``config``.
            """
            super().__post_init__()
            if self.zero_stage not in (1, 2, 3):
                raise ConfigError(f"deepspeed {option('zero_stage')} must be 1, 2 or 3, got {self.zero_stage!r}")
            if (self.config or {}).get("gradient_accumulation_steps", 1) != 1:
                raise ConfigError(
                    "do not set gradient_accumulation_steps in the deepspeed config; "
                    "use rt.accumulate(model, steps=N), which drives the engine's accumulation boundary"
                )

    def connect(self, process, device, precision, sync_batchnorm=False, compile=False) -> DeepSpeedStrategy:
        self.deepspeed = require(*_NEEDS)
        return super().connect(process, device, precision, sync_batchnorm, compile)

    @classmethod
    def fit_options(cls, options: Mapping[str, Any], clip_norm: float | None) -> dict[str, Any]:
        """The engine clips: the fit loop's ``clip_norm`` becomes ``gradient_clipping``."""
        options = dict(options)
        if clip_norm is not None:
            options.setdefault("gradient_clipping", clip_norm)
        return options

    @classmethod
    def check(cls, world_size, options, sync_batchnorm=False, compile=False) -> None:
        """Whether this job can run DeepSpeed: installed, without sync-BN or compile (no process group needed).

        Raises:
        MissingDependencyError: deepspeed is not installed (found without importing it).
        ConfigError: ``sync_batchnorm``/``compile``.
        """
        if importlib.util.find_spec(_NEEDS[0]) is None:
            raise MissingDependencyError(*_NEEDS)
        if sync_batchnorm or compile:
            raise ConfigError(
                "sync_batchnorm and compile are not supported with strategy 'deepspeed'; "
                "use strategy='ddp' or 'fsdp' for them"
            )

    def engine_config(self, micro_batch_size: int = 1) -> dict[str, Any]:
        config: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": micro_batch_size,
            "gradient_accumulation_steps": 1,  # rt.accumulate() drives the boundary (see no_sync)
            "zero_optimization": {"stage": self.options.zero_stage},
            # The user's optimizer is any torch.optim class (seed recipes use SGD and AdamW);
            # without this flag DeepSpeed asserts on everything but its own Adam/Lamb.
            "zero_allow_untested_optimizer": True,
            # Always explicit: DeepSpeed's own default (1.0 in 0.19) would clip every run at
            # norm 1 unasked, and it leaves the path of ddp at the first larger gradient.
            "gradient_clipping": float(self.options.gradient_clipping or 0.0),
            **self.precision.deepspeed_config,
        }
        config.update(self.options.config or {})
        return config

    def engine_args(self) -> argparse.Namespace | None:
        """The engine's ``args``: on CUDA only ``device_rank``, this rank's GPU.

        Without it the engine calls ``set_device(LOCAL_RANK)`` itself (``DeepSpeedEngine.
        _set_distributed_vars``), which with one GPU per task (``srun --gpus-per-task=1``)
        names a GPU that local rank 1 does not have; the Runtime's device is the one to use.
        """
        return argparse.Namespace(device_rank=self.device.index) if self.device.type == "cuda" else None

    def setup(self, model: torch.nn.Module, *optimizers: torch.optim.Optimizer):
        """Create the DeepSpeed engine for ``model`` and its (single) optimizer. Collective.

        Raises:
            ConfigError: more than one optimizer, or none.
        """
        if len(optimizers) != 1:
            raise ConfigError(f"strategy 'deepspeed' needs exactly one optimizer in setup(model, optimizer), got {len(optimizers)}")
        return super().setup(model, *optimizers)

    def _prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        return model  # the engine places the model itself

    def wrap(self, module: torch.nn.Module, optimizers: list[torch.optim.Optimizer]) -> torch.nn.Module:
        # Which parameter is in which group: initialize() re-points the groups to flat partitions.
        names = {id(p): name for name, p in module.named_parameters()}
        if any(id(p) not in names for group in optimizers[0].param_groups for p in group["params"]):
            raise ConfigError("the optimizer given to setup() trains parameters that are not in the model; "
                              "build it from model.parameters()")
        self.group_names = [[names[id(p)] for p in group["params"]] for group in optimizers[0].param_groups]
        engine, engine_optimizer, _, _ = self.deepspeed.initialize(
            args=self.engine_args(), model=module, optimizer=optimizers[0], config=self.engine_config()
        )
        self.engine = engine
        # The engine's optimizer wraps the user's; the user keeps calling rt.step(optimizer).
        self.engine_optimizer = engine_optimizer
        return engine

    def backward(self, loss: torch.Tensor, model: torch.nn.Module | None = None) -> None:
        # The engine's own gradient_accumulation_steps stays 1; paratrain divides the loss.
        self.guard.check_backward()
        self.engine.backward(self.accumulation.scale_loss(loss))

    def step(self, optimizer, clip_norm: float | None = None, model=None):
        """``engine.step()``: the engine clips (``gradient_clipping``), steps and zeroes gradients.

        Raises:
            ConfigError: ``clip_norm`` differs from the engine's ``gradient_clipping``.
        """
        if clip_norm is not None and clip_norm != self.options.gradient_clipping:
            raise ConfigError(
                f"deepspeed clips inside its engine; pass gradient_clipping={clip_norm} to "
                "pt.Runtime(strategy='deepspeed', ...) instead of step(clip_norm=...)"
            )
        if not self.accumulation.should_step:
            return NOT_STEPPED
        self.guard.check_step(optimizer)
        self.accumulation.take_pending()  # the loss was divided in backward (the engine owns the gradients)
        self.engine.step()
        self.guard.stepped()
        norm = self.engine.get_global_grad_norm()  # the engine's, when its clipping computed one
        # was_step_applied() is False when the engine's fp16 loss scaler skipped the update on inf/NaN.
        return StepResult(stepped=True, updated=bool(self.engine.was_step_applied()),
                          grad_norm=None if norm is None else torch.as_tensor(norm))

    def accumulate(self, model: torch.nn.Module, steps: int | None = None, sync: bool | None = None):
        """One micro-step (see :meth:`Strategy.accumulate`).

        Raises:
            ConfigError: ``sync=`` without ``steps=``: the engine owns the gradients, so
                the loss is divided in ``backward`` by the cycle's length, known up front.
        """
        if sync is not None and steps is None:
            raise ConfigError(
                "strategy 'deepspeed' divides the loss before its engine's backward and needs the number of "
                "micro-steps up front: rt.accumulate(model, steps=N, sync=...) (or steps=N alone)"
            )
        return super().accumulate(model, steps=steps, sync=sync)

    @contextlib.contextmanager
    def no_sync(self, model: torch.nn.Module):
        # DeepSpeed's documented way to let client code decide the boundary: ZeRO
        # reduces gradients only in a backward whose boundary state is True.
        self.engine.set_gradient_accumulation_boundary(False)
        try:
            yield
        finally:
            self.engine.set_gradient_accumulation_boundary(True)

    def state_access(self):
        """:class:`ZeroStateAccess` of the engine (checkpoints of whole tensors).

        Raises:
            ConfigError: no engine yet (the Checkpointer was made before ``rt.setup``).
        """
        if getattr(self, "engine", None) is None:
            raise ConfigError("with strategy 'deepspeed', create the Checkpointer after rt.setup(model, optimizer)")
        return ZeroStateAccess(self.engine, self.group_names)

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Whole fp32 weights by name. Collective (ZeRO gathers the partitions)."""
        access = self.state_access()
        return access.model_state(access.module)

    def unwrap_wrapper(self, model: torch.nn.Module) -> torch.nn.Module:
        return getattr(model, "module", model) if model is getattr(self, "engine", None) else model
