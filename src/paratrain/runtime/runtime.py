"""``Runtime``: the one object a user's own training loop talks to.

It reads who this process is (``paratrain.env``), resolves its settings once
(``runtime/resolve.py``: strategy, precision, backend, device, TF32), joins the process
group, seeds, and hands model work to a *strategy* (how the model is wrapped) and number
work to a *precision* (autocast, scaling), both built with what they need (process, device,
precision). It holds no strategy-specific branches: those live behind the strategy interface.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import inspect
import os
from typing import TYPE_CHECKING, Any

import torch

from paratrain import comm
from paratrain.arguments import check_type, reject_objects, reject_unknown
from paratrain.diagnostics import watchdog as hang_watch
from paratrain.diagnostics.watchdog import mark as mark_progress
from paratrain.env import ProcessInfo, detect, variables
from paratrain.goodput import ledger
from paratrain.env.cpu_binding import bind_compute_threads, free_communication_threads, share_for, unbound_cpus
from paratrain.runtime.input_device import refuse_inputs_elsewhere
from paratrain.runtime.launcher_death import die_with_launcher
from paratrain.runtime import progress as rank0_progress
from paratrain.runtime.watches import RuntimeWatches
from paratrain.runtime.process_group import destroy_process_group, init_process_group
from paratrain.runtime import topology
from paratrain.runtime.tf32 import set_tf32
from paratrain.runtime.trained_batches import TrainedBatches
from paratrain.seeding import rank_seed, seed_everything
from paratrain.strategy.api import StepResult

if TYPE_CHECKING:
    from paratrain.precision import Precision
    from paratrain.strategy import Strategy

class Runtime:
    """Process, device, strategy and precision for one worker.

    Args:
        strategy: a registered name (``"auto"``, ``"single"``, ``"dp"``, ``"ddp"``, ``"fsdp"``,
            ``"hsdp"``, ``"deepspeed"``, see :mod:`paratrain.strategy`) with its options as keywords,
            or a strategy object that holds them: ``pt.DDP(find_unused_parameters=True)``.
        precision: a registered name (``"32-true"``, ``"bf16-mixed"``, ``"fp16-mixed"``) or an
            object: ``pt.BF16Mixed()``.
        seed: seeds every generator identically on all ranks (same model init);
            data streams use per-rank seeds derived from it.
        backend: ``"auto"`` (nccl on CUDA, else gloo), ``"gloo"`` or ``"nccl"``.
        timeout: seconds any collective may wait before failing with the late ranks named.
        sync_batchnorm: convert BatchNorm layers to SyncBatchNorm in ``setup``.
        compile: ``torch.compile`` the model in ``setup`` (single, ddp, fsdp).
        tf32: on CUDA, float32 matmuls and convolutions in TF32 (the default; False keeps
            full float32). Nothing changes on CPU.
        stall_timeout: seconds a rank may wait inside one collective before the job ends
            with the rank(s) not in it named (its hang watchdog); 0: no watchdog. Default:
            under ``paratrain run`` / ``pt.spawn``, ``--stall-timeout`` or ``timeout``;
            elsewhere none (see :mod:`paratrain.diagnostics.watchdog`).
        **strategy_options: the options of the strategy named (``find_unused_parameters=True``; its
            ``Options`` dataclass lists them).

    Creating a Runtime in a multi-process job is collective: all ranks must do it. On CPU,
    under ``paratrain run`` or ``pt.spawn`` with 2+ workers on the node, it binds the thread
    that creates it (and the OpenMP threads that thread starts later) to the CPUs the launcher
    gave this rank; threads started before it (gloo's) keep every CPU, and ``setup`` gives every
    CPU back to the gloo threads of groups the strategy made (DeepSpeed's) (``rt.cpu_share``;
    ``--cpu-binding none`` turns this off; see :mod:`paratrain.env.cpu_binding`).

    Raises:
        ConfigError: unknown strategy/precision/backend, an unknown argument (with the
            closest known name), a value of the wrong type, or a bad combination;
            a malformed ``PARATRAIN_*`` variable (see :mod:`paratrain.env.variables`).
        DistributedError: the process group could not be joined in time.
    """

    def __init__(
        self,
        strategy: str | Strategy = "auto",
        precision: str | Precision = "32-true",
        seed: int | None = 0,
        backend: str = "auto",
        timeout: float = comm.DEFAULT_TIMEOUT_S,
        sync_batchnorm: bool = False,
        compile: bool = False,
        tf32: bool = True,
        stall_timeout: float | None = None,
        **strategy_options: Any,
    ):
        from paratrain.precision import Precision
        from paratrain.env.no_restart import end_job_instead_of_restart
        from paratrain.errors import ParatrainError
        from paratrain.runtime.resolve import build_precision, build_strategy, resolve
        from paratrain.strategy import STRATEGIES, Strategy

        reject_objects("pt.Runtime()", "models and optimizers go to rt.setup(model, optimizer)",
                       seed=seed, backend=backend,
                       **{name: value for name, value, kind in (("strategy", strategy, Strategy),
                                                                ("precision", precision, Precision))
                          if not isinstance(value, kind)})
        check_type("pt.Runtime()", "seed", seed, "int", allow_none=True)  # resolve() checks the other settings
        check_type("pt.Runtime()", "timeout", timeout, "positive number")
        # A typo of a Runtime argument (precison=) is not a strategy option: name the right one.
        reject_unknown("pt.Runtime()", strategy_options,
                       [*RUNTIME_ARGUMENTS, *(o for cls in STRATEGIES.values() for o in cls.option_names())])
        variables.check()  # a malformed PARATRAIN_* variable: one line on every rank, before any rendezvous
        self.process: ProcessInfo = detect()
        # Every name and combination checked before any rendezvous, so a typo fails fast on every
        # rank; the device is made current first (NCCL and the bf16 check ask for "the current GPU").
        try:
            self.resolved = resolve(strategy, precision, backend, world_size=self.process.world_size,
                                    num_nodes=self.process.num_nodes,
                                    local_rank=self.process.local_rank, tf32=tf32, sync_batchnorm=sync_batchnorm,
                                    compile=compile, strategy_options=strategy_options, call="pt.Runtime()")
        except ParatrainError as exc:
            end_job_instead_of_restart(exc)  # under paratrain run: a restart (or a replica group's) would fail alike
            raise
        self.backend, self.device = self.resolved.backend, self.resolved.device
        set_tf32(self.device, self.resolved.tf32)
        self.timeout = float(timeout)
        self.seed = seed
        self.precision = build_precision(self.resolved)
        if self.process.distributed:
            die_with_launcher()  # a worker of paratrain run ends when its launcher is killed
        stall_s = hang_watch.runtime_stall_timeout(stall_timeout, self.timeout) if self.process.distributed else 0.0
        self._group_timeout = hang_watch.group_timeout_with_watchdog(self.timeout, stall_s)
        cpu_share = (share_for(os.environ, self.process.local_rank)
                     if self.process.distributed and self.device.type == "cpu" else None)
        self._owns_group = init_process_group(self.process, self.backend, self.device, self._group_timeout)
        if self._owns_group:
            atexit.register(self.close)
        # The job's shape from facts every rank agrees on, not from this rank's own numbers
        # (nodes may run different numbers of processes); the strategy gets the process placed in it.
        self.topology, self.process = topology.settle(self.process)
        self.strategy = build_strategy(self.resolved, self.process, self.precision)
        # Its own hang watchdog (names the rank the others wait for), and loaders every rank reads whole.
        self._watches = RuntimeWatches(stall_s, self.rank, self.world_size)
        self._trained = TrainedBatches()  # what rt.step trained, told to the training loaders
        # Now that gloo's and the watchdog's threads exist (they keep every core): this thread, and
        # the OpenMP pool it starts, on the CPUs the launcher gave this rank (env/cpu_binding.py).
        self._all_cpus = unbound_cpus()  # what gloo threads started later get back (see setup)
        self.cpu_share = bind_compute_threads(cpu_share)
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
        """Prepare ``model`` for this job and return what to train with.

        Converts BatchNorm to SyncBatchNorm (``sync_batchnorm=True``), moves the model
        to ``rt.device``, wraps it for the strategy (DDP, FSDP2, DataParallel, …),
        makes its weights identical on all ranks (rank 0's, whatever each rank's
        seed), and compiles it (``compile=True``). Calling the returned model with inputs
        none of which is on ``rt.device`` raises ConfigError in one line (batches from
        ``rt.loader`` are moved there). Optimizers created before
        ``setup`` and given to it keep working: if the strategy replaces parameters
        (FSDP shards them), their param groups are repointed in place. One created
        before and *not* given would train the replaced tensors: ``rt.step`` refuses it.
        With several processes, ``rt.backward``/``rt.step``/``rt.accumulate`` refuse a
        model or optimizer that ``setup`` did not return (the ranks would drift apart).

        Returns the wrapped model, or ``(model, *optimizers)`` when optimizers are given.
        Collective: all ranks must call it together.

        Raises:
            ConfigError: the model was set up before, has no parameters (fsdp), or an
                optimizer already has state for parameters being replaced.
            CollectiveTimeoutError: a rank did not reach ``setup`` in time (names it).
            DistributedError: the ranks differ in paratrain/torch version, strategy,
                precision or model structure (names the ranks and values).
        """
        from paratrain.diagnostics.desync import check_same_setup
        from paratrain.strategy.optimizer_kernels import hint_fusable

        if isinstance(model, torch.nn.Module):
            check_same_setup(self, model)
        hint_fusable(optimizers, self.device)
        prepared = self.strategy.setup(model, *optimizers)
        wrapped = prepared[0] if optimizers else prepared
        self._trained.watch(wrapped)
        if not self.strategy.moves_inputs:
            refuse_inputs_elsewhere(wrapped, self.device)  # a batch left on the CPU fails in one line
        if self.cpu_share is not None:
            free_communication_threads(self._all_cpus)  # groups the strategy made (DeepSpeed's) talk on every CPU
        return prepared

    def backward(self, loss: torch.Tensor, model: torch.nn.Module | None = None) -> None:
        """``loss.backward()`` with the precision's scaling (fp16). Inside ``accumulate``
        the gradients add up; ``step`` averages them over the micro-batches."""
        mark_progress("backward")
        self.strategy.backward(loss, model)

    def step(
        self, optimizer: torch.optim.Optimizer, clip_norm: float | None = None, model: torch.nn.Module | None = None
    ) -> StepResult:
        """Unscale → average accumulated gradients → clip → optimizer step (skipped on
        inf/NaN under fp16) → scaler update → zero_grad.

        Returns a :class:`~paratrain.strategy.api.StepResult`, true exactly when the
        optimizer stepped: false on a non-final accumulation micro-step (which does
        nothing), true at the end of a cycle — also when fp16's scaler skipped the update
        on inf/NaN gradients (``result.updated`` is then False; the step counts, its batches
        are consumed). ``result.grad_norm`` is the gradient norm before clipping when
        ``clip_norm`` is given. So ``if rt.step(opt): step += 1`` counts optimizer steps.

        A step that ran also moves the data position of this Runtime's training loaders past
        the batches it trained (see :meth:`loader`). Collective for sharded strategies (the
        norm spans all shards).

        Raises:
            ConfigError: the optimizer holds parameters that ``setup`` replaced (fsdp)
                because it was not passed to ``setup``.
        """
        self._watches.check_step()
        mark_progress("optimizer")
        result = self.strategy.step(optimizer, clip_norm=clip_norm, model=model)
        if result:
            self._trained.stepped()
            ledger.step_done()  # rank 0's goodput clock (nothing elsewhere)
        mark_progress("logging")  # between steps: what the loop does before its next batch
        return result

    def accumulate(self, model: torch.nn.Module, steps: int | None = None, sync: bool | None = None):
        """Context for one micro-step of gradient accumulation.

        ``k`` micro-batches of ``b`` train exactly like one batch of ``k·b``: gradients
        are all-reduced only on the micro-step that synchronises (DDP ``no_sync``,
        FSDP2 ``set_requires_gradient_sync``), ``rt.step`` only steps there and divides
        the summed gradients by the micro-batches they hold. Either count::

            for batch in loader:
                with rt.accumulate(model, steps=4):
                    rt.backward(model(batch).loss)
                    rt.step(optimizer)

        or decide with ``sync=True`` on the micro-step that must synchronise. The last
        batch of a pass over an ``rt.loader`` training loader always synchronises and
        steps (a short last cycle is averaged over its real size), and the count
        restarts every epoch: nothing pending crosses an epoch or a checkpoint
        (``Checkpointer.save`` refuses while gradients are pending), so resuming is
        bit-exact. ``model`` is the one ``setup`` returned.

        Raises:
            ConfigError: ``steps`` < 1, nested contexts, or an unwrapped model;
                with deepspeed, ``sync=`` without ``steps=``.
        """
        return self.strategy.accumulate(model, steps=steps, sync=sync)

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The user's module without DDP/DP/compile wrappers (state-dict keys without ``module.``)."""
        return self.strategy.unwrap(model)

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The model's whole weights as plain CPU tensors with the user's key names. Collective.

        No ``module.``/``_orig_mod.`` prefixes, no DTensor shards, no ZeRO partitions
        (deepspeed gives its fp32 master weights): what ``paratrain ckpt export`` writes.
        Rank 0 gets the dict, other ranks ``{}``. All ranks must call it together —
        sharded strategies (fsdp, deepspeed) gather the shards — so never under
        ``if rt.is_main:``. The role of Accelerate's ``get_state_dict``.
        """
        state = self.strategy.model_state_dict(model)
        if not self.is_main:
            return {}
        # A snapshot, not views of the live parameters (fsdp/deepspeed already copied to CPU).
        return {
            key: value.detach().cpu() if value.device.type != "cpu" else value.detach().clone()
            for key, value in state.items()
            if isinstance(value, torch.Tensor)
        }

    def save_weights(self, model: torch.nn.Module, path: Any):
        """Write the model's whole weights to one safetensors file from rank 0; return its path. Collective.

        The file is :meth:`full_state_dict` — the same as ``paratrain ckpt export`` makes
        from a checkpoint — and loads with plain PyTorch:
        ``module.load_state_dict(safetensors.torch.load_file(path))``. It replaces
        ``path`` atomically. The role of Accelerate's ``save_model``.

        Raises:
            CheckpointError: on every rank, when rank 0 cannot write ``path``.
        """
        from paratrain.checkpoint.export import save_weights

        return save_weights(self.full_state_dict(model), path)

    def check_same_weights(self, model: torch.nn.Module, step: int | None = None) -> None:
        """Check that every rank holds bit-identical weights (exact checksums). Collective.

        One pass over the weights and a small all-reduce of checksums; call it every
        few hundred steps of your own loop (``pt.fit`` does, see ``check_sync_every``).
        Sharded strategies compare what every rank holds identically (buffers, shard
        layout); ``single`` compares nothing (its ranks train their own models).

        Raises:
            DistributedError: names the first differing parameter or buffer, the
                ranks that differ from rank 0, and ``step`` when given.
        """
        self.strategy.check_same_weights(model, step=step)

    def autocast(self) -> contextlib.AbstractContextManager:
        """Context for the forward pass and loss: bf16/fp16 autocast, or nothing for 32-true."""
        return self.precision.autocast()

    # ---- data ---------------------------------------------------------------------------
    def loader(self, dataset: Any, batch_size: int, **options: Any):
        """This rank's loader: sharded, resumable, ``set_epoch`` automatic. Collective.

        See :func:`paratrain.data.make_loader` for the options (``shuffle``, ``exact``,
        ``num_workers``, ``drop_last``, ``collate_fn``, ``sampler``, ``seed``, ``group_by_length``,
        ``global_order`` with ``grad_accum``: one trajectory at any world size).

        Batches come out on ``rt.device`` (``move_to_device=False`` leaves them on the CPU).
        A training loader's saved position is what the optimizer has consumed: the batches
        that an ``rt.step`` trained — those handed out before the last forward of a model
        ``setup`` returned — not a batch drawn ahead of the step or of the save
        (:mod:`paratrain.runtime.trained_batches`).
        """
        from paratrain.data import RankPlace, make_loader

        if not options.get("exact"):
            own = self.strategy.training_loader(dataset, batch_size, self.seed, options)
            if own is not None:
                return own
        place = RankPlace(self.rank, self.world_size, self.seed, self.device)
        loader = make_loader(place, dataset, batch_size, **options)
        if not options.get("exact"):  # a training loader: its epoch ends flush gradient accumulation
            loader.add_position_listener(self.strategy.accumulation)
            self._trained.track(loader)
        loader.add_position_listener(hang_watch.LoaderProgress("evaluation" if options.get("exact") else "forward"))
        return loader

    def gather(self, *values: Any, dst: int | None = None):
        """Per-rank results of ``exact=True`` evaluation, concatenated in dataset order. Collective.

        See :func:`paratrain.data.gather`.
        """
        from paratrain.data import gather

        return gather(*values, dst=dst)

    # ---- loop helpers (paratrain.loop) ------------------------------------------------
    def epochs(self, start: Any = 0, total: int | None = None):
        """Epoch numbers from ``start`` (an int, or a resumed state / loader with ``.epoch``;
        ``None``: 0) to ``total - 1``, or without end when ``total`` is None — for loops
        counted in steps, which end themselves (see :func:`paratrain.runtime.progress.epochs`)."""
        return rank0_progress.epochs(start, total)

    def progress(self, iterable: Any = None, **tqdm_options: Any):
        """A tqdm bar on rank 0 only (when stderr is a terminal, unless ``enabled=``); silent elsewhere."""
        return rank0_progress.progress(iterable, **tqdm_options)

    def preemption(self, save_every_minutes: float | None = None):
        """SIGTERM handling for an own loop, as ``pt.fit`` does it: a context manager.

        ``preemption.should_save()`` (collective: every rank, every step) is true on every
        rank when some rank got SIGTERM or ``save_every_minutes`` passed; save then, and call
        ``preemption.stop_if_preempted()``, which exits with code 75 ("preempted") after a
        SIGTERM. See :class:`paratrain.diagnostics.preemption.Preemption`.
        """
        from paratrain.diagnostics.preemption import Preemption

        return Preemption(save_every_minutes)

    def watchdog(self, stall_timeout: float | None = None, **options: Any):
        """A hang watchdog for an own loop: a context manager (start it on every rank).

        When some rank makes no progress for ``stall_timeout`` seconds (default
        ``PARATRAIN_STALL_TIMEOUT`` or 300), every rank writes its stacks to its log and
        the job ends with one error naming the stalled rank, host, step, phase and
        frames. ``rt.backward``/``rt.step`` mark progress; ``watchdog.progress(step,
        phase)`` names steps and phases. See :class:`paratrain.diagnostics.watchdog.Watchdog`.
        With no ``stall_timeout`` and ``PARATRAIN_STALL_TIMEOUT=0`` (``paratrain run
        --stall-timeout 0``) it is a :class:`~paratrain.diagnostics.watchdog.NoWatchdog`.

        Raises:
            ConfigError: a stall timeout that is not a positive number.
        """
        if stall_timeout is None and hang_watch.DEFAULT_STALL_TIMEOUT_S == 0:
            return hang_watch.NoWatchdog()  # the job turned the watchdog off
        timeout = hang_watch.DEFAULT_STALL_TIMEOUT_S if stall_timeout is None else stall_timeout
        return hang_watch.Watchdog(timeout, rank=self.rank, world_size=self.world_size, **options)

    def busy(self, phase: str, limit: float | None = None):
        """Context: this rank is in a long phase that the others wait for (evaluation or a
        checkpoint on rank 0 only), so the watchdog does not take it for a stall::

            if rt.is_main:
                with rt.busy("evaluation"):
                    evaluate(model)
            rt.barrier()

        Past ``limit`` seconds (default: ``timeout``, how long the others' collective may
        wait) the job ends naming this rank and the phase. Not collective.

        Raises:
            ConfigError: an empty phase name, or a limit that is not a positive number or is
                longer than the process group's timeout (the others would time out first).
        """
        return hang_watch.busy(phase, self.timeout if limit is None else limit, longest_s=self._group_timeout)

    # ---- collectives ------------------------------------------------------------------
    barrier = staticmethod(comm.barrier)
    all_reduce = staticmethod(comm.all_reduce)
    all_gather = staticmethod(comm.all_gather)
    broadcast_object = staticmethod(comm.broadcast_object)
    gather_object = staticmethod(comm.gather_object)
    all_gather_object = staticmethod(comm.all_gather_object)
    main_first = staticmethod(comm.main_first)
    print = staticmethod(comm.print)

    # ---- experiment trackers (rank 0) ---------------------------------------------------
    def log_with(self, trackers: Any, out_dir: Any, config: dict[str, Any] | None = None):
        """Open experiment trackers (``"csv,mlflow,wandb"`` or a list; ``tensorboard`` too) for the run in
        ``out_dir``, with ``config`` (your hyperparameters) plus strategy, precision and world size as the
        run's config. Rank 0 feeds them; on the other ranks every call does nothing. Their run ids are kept
        in ``out_dir/trackers.json``: a resumed or restarted script continues the same tracker runs, and a
        step it logs again is sent once (TensorBoard and CSV drop the failed attempt's later steps instead).
        A missing package or an unreachable server is one line, never an error. Not collective.

        Returns the :class:`~paratrain.trackers.hub.Trackers` (``summary(values, step)``,
        ``artifact(path)``); ``rt.log`` feeds it and ``rt.close()`` ends it.

        Raises:
            ConfigError: an unknown tracker name (with the closest known one).
        """
        from paratrain.trackers import parse_names
        from paratrain.trackers.hub import Trackers

        names = parse_names(trackers, "rt.log_with()")
        if getattr(self, "_trackers", None) is not None:
            self._trackers.close()
        self._trackers = Trackers(names, out_dir, is_main=self.is_main)
        self._trackers.open({**(config or {}), "strategy": self.strategy.name, "precision": self.precision.name,
                             "world_size": self.world_size})
        return self._trackers

    def log(self, metrics: dict[str, Any], step: int) -> None:
        """Numbers (``{"loss": 0.41}``; tensors of one element too) at ``step`` to the trackers of
        :meth:`log_with`, from rank 0; nothing on the other ranks or before ``log_with``. Not collective."""
        trackers = getattr(self, "_trackers", None)
        if trackers is not None and self.is_main:
            trackers.log({k: v.item() if isinstance(v, torch.Tensor) else v for k, v in metrics.items()}, step)

    # ---- teardown ---------------------------------------------------------------------
    @property
    def owns_process_group(self) -> bool:
        """True while this Runtime holds a process group it made, which :meth:`close` collects garbage
        before leaving; False for a group the user made (it stays) and after ``close``."""
        return bool(getattr(self, "_owns_group", False))

    def close(self) -> None:
        """Leave the process group if this Runtime joined it (idempotent); a group the
        user made stays.

        The trackers of :meth:`log_with` end their runs here.

        Dropping your references to wrapped (DDP) models before calling it is
        safest: a DDP reducer freed *after* its gloo group is destroyed can deadlock
        the exit (pytorch/pytorch#56297). Collecting garbage here frees the ones
        already unreachable, and leaving the group first lets gloo's threads finish
        (:func:`paratrain.runtime.process_group.destroy_process_group`).
        """
        if getattr(self, "_watches", None) is not None:
            self._watches.stop()
        if getattr(self, "_trackers", None) is not None:
            self._trackers.close()
        if getattr(self, "strategy", None) is not None:
            self.strategy.close()
        if getattr(self, "_owns_group", False):
            self._owns_group = False
            gc.collect()
            destroy_process_group()
        elif getattr(self, "process", None) is not None and self.process.distributed:
            comm.set_control_group(None)  # the user's group stays; the gloo side group we added is dropped

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Runtime(rank={self.rank}/{self.world_size}, device={self.device}, backend={self.backend}, "
                f"strategy={self.strategy.name}, precision={self.precision.name})")


#: The keywords of ``pt.Runtime(...)`` itself (every other keyword is a strategy option).
RUNTIME_ARGUMENTS = tuple(name for name, parameter in inspect.signature(Runtime.__init__).parameters.items()
                          if name != "self" and parameter.kind is not parameter.VAR_KEYWORD)
