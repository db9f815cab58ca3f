"""``Trainer``: the fit loop — steps, accumulation, evaluation, checkpoints, early stop, output.

Built only on the public layers: ``Runtime`` (process group, strategy, precision),
``rt.loader`` (resumable training data, exact evaluation shards), ``Checkpointer``
(resume and save), ``paratrain.comm`` (agreement between ranks). The path one
step takes, on every rank::

    batch → device → accumulate(sync on the last micro-batch) → autocast → forward
          → backward → step(mean of the micro-batches' gradients, clip) → LR schedule → log / eval / save

Beside it: ``step_timing.py`` (when to log, evaluate, save; the step's clock), ``nonfinite.py`` (NaN/inf: skip
or stop), ``fit_preemption.py`` (SIGTERM: save, then exit 75), ``report.py`` (what it prints).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from pathlib import Path
from typing import Any

import torch

from paratrain import comm
from paratrain.arguments import option
from paratrain.data.global_order import MicroBatch
from paratrain.diagnostics import watchdog
from paratrain.diagnostics.desync import check_same_setup
from paratrain.errors import CheckpointError, ConfigError, NonFiniteError, ParatrainError
from paratrain.goodput import ledger
from paratrain.loop.callbacks import Callback, CallbackList
from paratrain.loop.checkpoints import LoopCheckpoints, metric_mode
from paratrain.loop.config import FitConfig
from paratrain.loop.evaluation import evaluate
from paratrain.loop.fit_preemption import FitPreemption
from paratrain.loop.nonfinite import FiniteChecks, NonFiniteGuard
from paratrain.loop.preflight import check_first_dev_batch, check_options, describe_changes, resume_options
from paratrain.loop.rank_times import RankTimes
from paratrain.loop.out_dir import agree_on_out_dir, check_still_there, directory_identity
from paratrain.loop.report import (report_communication, report_end, report_eval, report_start, report_train,
                                   report_weights, run_config)
from paratrain.runtime.progress import epochs, progress
from paratrain.loop.result import FitResult
from paratrain.loop.run_log import RunLog
from paratrain.loop.schedule import stretch_to, warmup_schedule
from paratrain.loop.state import FitState
from paratrain.loop.step_timing import Cadence, StepClock, TrainWindow
from paratrain.tasks.api import Evaluation, Task

UNBOUNDED_EPOCHS = 1_000_000  # with max_steps the step count ends the run, not the epochs


class Trainer:
    """Trains ``task`` with ``config`` on this process's share of the job.

    ``fit()`` is collective: every rank of the job runs it with the same task and
    config. Without a ``runtime`` one is created from the config (strategy,
    precision, seed, sync_batchnorm) and closed at the end; a given ``runtime``
    is used as it is (the config's strategy, precision, seed and sync_batchnorm
    are then not read) and left open.

    Attributes available to callbacks: ``runtime``, ``task``, ``config``, ``state``
    (step, best metrics…), ``model``, ``optimizer``, ``scheduler``,
    ``train_loader``, ``eval_loader``, ``log``, ``should_stop``.
    """

    def __init__(self, task: Task, config: FitConfig | None = None, runtime: Any = None, callbacks: list[Callback] | tuple = ()):
        self.task = task
        self.config = (config or FitConfig()).with_recipe(task.recipe)
        self.runtime = runtime
        self.callbacks = CallbackList(callbacks)
        self.state = FitState()
        self.should_stop = False
        self.log = RunLog(None, comm.rank())
        self.model: Any = None
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.train_loader: Any = None
        self.eval_loader: Any = None
        self.checkpoints: LoopCheckpoints | None = None
        self.out_dir: Path | None = None
        self._out_identity: tuple[int, int] | None = None  # rank 0's out_dir as it started (device, inode)
        self.last_evaluation: Evaluation | None = None
        self._cadence = Cadence(self.config)
        self._nonfinite = NonFiniteGuard(self.config.on_nonfinite, self.config.max_nonfinite_skips)
        self._finite = FiniteChecks(self._nonfinite, self._last_good)
        self._step_clock = StepClock()
        self._out_lock: Any = None  # rank 0's writer lock on out_dir, held for the whole fit
        self._preemption = FitPreemption()
        self.finished_before = False  # resumed from the end of a finished run: nothing to do
        self.rank_times: RankTimes | None = None  # every rank's data/compute/communication time, the stragglers

    # ---- the whole run ------------------------------------------------------------------
    def check(self) -> None:
        """Refuse what is visible before training (:func:`~paratrain.loop.preflight.check_options`): a
        metric the task does not compute, a strategy of own loops only, an impossible non-finite policy.
        Not collective. (Strategy
        and precision: ``runtime.resolve``, which ``paratrain train`` runs before any process starts
        and the Runtime in every worker.)

        Raises:
            ConfigError: names the valid choices.
        """
        check_options(self.task, self.config)

    def fit(self) -> FitResult:
        """Train until the epochs or ``max_steps`` are done, or early stopping. Collective.

        Raises:
            ConfigError: a bad option, or an output directory that holds another run.
            DataError / MissingDependencyError: from the task's data.
            CheckpointError: a checkpoint in the output directory cannot be resumed.
        """
        from paratrain.runtime.runtime import Runtime

        self.check()  # before any process group: a strategy the loop cannot run is one line, not a rendezvous
        owns_runtime = self.runtime is None
        if owns_runtime:
            c = self.config
            self.runtime = Runtime(precision=c.precision, seed=c.seed,
                                   sync_batchnorm=c.sync_batchnorm, compile=c.compile, tf32=c.tf32,
                                   **c.strategy_arguments())
        try:
            result = self._fit()
        except BaseException:
            ledger.close_ledger(ended=False)  # this attempt failed or was stopped: the next one redoes its steps
            raise
        else:
            ledger.close_ledger(ended=True)
            return result
        finally:
            if self.rank_times is not None:
                self.rank_times.close()
            self.log.close()
            if owns_runtime:
                self.release_wrappers()
                self.runtime.close()
            if self._out_lock is not None:
                self._out_lock.release()
                self._out_lock = None

    def release_wrappers(self) -> None:
        """Keep the trained module, drop the strategy's wrapper (DDP and its Reducer).

        Call it before the process group is destroyed. If DDP's Reducer outlives the
        group and holds its last reference, freeing the Reducer runs the gloo group's
        destructor with the GIL held; that destructor waits for gloo's worker thread,
        which may need the GIL to free a tensor: a deadlock at exit (pytorch/pytorch#56297).
        """
        if self.model is not None:
            self.model = self.runtime.unwrap(self.model)
        self.checkpoints = None  # the Checkpointer holds the wrapped model too
        if not self.runtime.owns_process_group:
            # rt.close() collects before it leaves a group it made, and one pass is enough: with torch
            # loaded, each pass over every object costs a stopping job tenths of a second.
            gc.collect()

    def _fit(self) -> FitResult:
        rt, c, task = self.runtime, self.config, self.task
        self.check()
        self.out_dir = self._prepare_out_dir()
        self._out_identity = directory_identity(self.out_dir) if self.out_dir is not None and rt.is_main else None
        self.log = RunLog(self.out_dir, rt.rank, c.tensorboard, c.trackers)
        self.log.start_attempt()
        # Every rank must train the same thing: one collective here beats a hang or garbage later.
        check_same_setup(config={"task": task.name, "options": task.options.to_dict(), "fit": self._agreed_config()})
        train_data, eval_data = task.datasets()
        model = task.build_model()
        optimizer = task.build_optimizer(model, c.lr, c.weight_decay, fused=c.fused_optimizer)
        self.model, self.optimizer = rt.setup(model, optimizer)
        self.rank_times = RankTimes(rt, self.model)
        # fp16: the loss scaler skips overflowed steps itself; those are not failures.
        self._nonfinite.scaler_skips = getattr(rt.precision, "scaler", None) is not None
        lengths = task.sample_lengths(train_data) if c.group_by_length else None
        # The job's global order: a run resumed on another number of processes keeps its global
        # batch and continues the same trajectory (paratrain.data.global_order). The loop owns the
        # loss weighting and the stepping that this asks for, so it is always on here.
        self.train_loader = rt.loader(train_data, c.batch_size, shuffle=True, collate_fn=task.collate,
                                      num_workers=c.num_workers, group_by_length=lengths,
                                      global_order=True, grad_accum=c.grad_accum)
        self.eval_loader = rt.loader(eval_data, c.eval_batch_size, exact=True, collate_fn=task.collate, num_workers=c.num_workers)
        check_first_dev_batch(rt, task, self.model, eval_data)  # fail now, not after an epoch
        self.steps_per_epoch = self.train_loader.global_batches_per_epoch  # the same at any world size
        self.total_steps = c.max_steps or c.epochs * self.steps_per_epoch
        self.scheduler = warmup_schedule(self.optimizer, self.total_steps, c.warmup or 0.0, c.schedule)
        resumed_from = 0
        if self.out_dir is not None:
            self.checkpoints = LoopCheckpoints(
                rt, self.out_dir, keep_last=c.keep_last, metric=c.metric,
                model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
                loader=self.train_loader, trainer=self.state, background=c.background_save,
                every="auto" if c.save_every == "auto" else None, mtbf=c.mtbf,
            )
            self._cadence.auto_due = self.checkpoints.due
            resumed_from = self.checkpoints.resume(c.batch_size, c.grad_accum, len(eval_data), self.train_loader,
                                                   resume_options(c))
            if resumed_from:  # the saved global batch is kept on any world size: count the steps with it
                self.steps_per_epoch = self.train_loader.global_batches_per_epoch
                self.total_steps = c.max_steps or c.epochs * self.steps_per_epoch
                self._resume_where_it_ended(resumed_from)
            self._cadence.saved_at = resumed_from if resumed_from else -1  # never write the same step twice
            self._nonfinite.skipped = self.state.nonfinite_skips
            if rt.is_main:
                task.save(self.out_dir)
        self.epoch = self.train_loader.epoch
        self.log.open_trackers(resumed_from, run_config(self))
        report_start(self, len(train_data), len(eval_data), resumed_from)
        self.callbacks("on_fit_start", self)
        # SIGTERM → finish the step, save, stop; no progress on some rank → a named stall.
        hang_watch = watchdog.Watchdog(c.stall_timeout) if c.stall_timeout else contextlib.nullcontext()
        # The guard stays up through the final evaluation and save: a SIGTERM there would otherwise
        # kill the worker mid-save, and the launcher would call a finished run "stopped".
        with FitPreemption(c.save_every_minutes) as self._preemption:
            if self.finished_before:  # a rerun of a finished run: nothing to train, evaluate or save
                window = TrainWindow(rt.device)
            else:
                with hang_watch:
                    window = self._train()
            train_seconds = window.train_seconds  # before the final evaluation
            if self._cadence.evaluated_at != self.state.step:
                self._evaluate()
            if self._cadence.unsaved(self.state.step) and self.checkpoints is not None:
                self._save()
            if self.checkpoints is not None:
                self._finish_writing("the end of the run")
            self._check_out_dir()  # never "done" for a run whose directory went away
            result = report_end(self, resumed_from, train_seconds, window.samples_total)
            report_weights(self)
            self._preemption.stop_if_asked_at_the_end(self.state.step, self._checkpoint_dir())
        return result

    def _resume_where_it_ended(self, step: int) -> None:
        """After a resume from ``step``: a finished run stays finished (no evaluation, save or patience
        count again); otherwise the options this run changed apply from ``step`` on, said in one line,
        and the run continues with a fresh early-stop verdict. Not collective (every rank alike)."""
        c, state, checkpoints = self.config, self.state, self.checkpoints
        patience_reached = bool(state.stopped_early and c.patience and state.evals_without_improvement >= c.patience)
        if (step >= self.total_steps or patience_reached) and checkpoints.resumed_metrics:
            self.finished_before = True
            self.last_evaluation = Evaluation(checkpoints.resumed_metrics)
            self._cadence.evaluated(step)
            self._cadence.saved(step, with_metrics=True)
            why = (f"it stopped early at step {step} ({option('patience', c.patience)} reached; raise it to train on)"
                   if patience_reached and step < self.total_steps else
                   f"it ran {step} steps and this command asks for {self.total_steps}")
            self.total_steps = max(self.total_steps, step)
            self.log.console(f"the run in {self.out_dir} is finished: {why}; nothing is trained, evaluated or saved")
            return
        state.stopped_early = False  # this attempt's own verdict, from its own evaluations
        changes = self.checkpoints.changed
        lr = c.lr if any(name == "lr" for name, _, _ in changes) else None
        old_total = stretch_to(self.scheduler, self.total_steps, c.warmup or 0.0, c.schedule, lr=lr)
        if any(name == "weight_decay" for name, _, _ in changes):
            for group in self.optimizer.param_groups:
                group["weight_decay"] = c.weight_decay
        if changes:
            self.log.console(describe_changes(changes, step))
        if old_total is not None:
            self.log.console(f"this run has {self.total_steps} steps, the saved one had {old_total}: "
                             "the LR schedule now ends at the new last step")

    def _agreed_config(self) -> dict[str, Any]:
        """The options that must be equal on every rank (not the ones about this rank's console)."""
        local = ("progress", "tensorboard", "num_workers", "fresh")  # log_with stays: the final weights are collective
        return {k: v for k, v in dataclasses.asdict(self.config).items() if k not in local}

    def _prepare_out_dir(self) -> Path | None:
        """Rank 0 checks the directory; every rank gets its verdict (and raises the same error). Collective."""
        if self.config.out_dir is None:
            return None
        moved, self._out_lock = agree_on_out_dir(self.runtime.is_main, self.config.out_dir, self.task.name,
                                                 self.task.options.to_dict(), self.config.fresh,
                                                 self.task.model_identity())
        if moved is not None:
            self.log.console(f"moved the previous run in {self.config.out_dir} to {moved}")
        return Path(self.config.out_dir)

    # ---- training -----------------------------------------------------------------------
    def _train(self) -> TrainWindow:
        """The epochs and steps; returns the run's timing and sample count. Collective."""
        c, state = self.config, self.state
        bar = progress(enabled=c.progress, total=self.total_steps, initial=state.step, unit="step", desc=self.task.name)
        self.log.bar = bar
        window = TrainWindow(self.runtime.device)  # its clock waits for the GPU
        done = state.step >= self.total_steps
        try:
            for epoch in epochs(self.train_loader, UNBOUNDED_EPOCHS if c.max_steps else c.epochs):
                if done:
                    break
                self.epoch = epoch
                self.train_loader.set_epoch(epoch)  # a resumed epoch keeps its saved position
                batches = len(self.train_loader)
                self.model.train()
                watchdog.mark("data", state.step)
                step_batches: list[tuple[torch.Tensor, int]] = []  # this step's micro-batches: (weighted loss, samples)
                for index, batch in enumerate(self.train_loader):
                    # Gradients are all-reduced only on the last micro-batch of a step (nanoGPT's no_sync trick).
                    micro = self.train_loader.current
                    sync = micro.sync
                    loss, weighted = self._micro_step(batch, micro)
                    samples = micro.step_samples if sync else 0  # the job's samples, counted once per step
                    step_batches.append((weighted, samples))
                    state.samples += samples
                    if not sync:
                        watchdog.mark("data")
                        continue
                    watchdog.mark("optimizer")
                    skipped = self._finite.skip_step(state, [weighted for weighted, _ in step_batches], self.optimizer, self.log)
                    norm = self.runtime.step(self.optimizer, clip_norm=c.clip_norm).grad_norm
                    self.scheduler.step()
                    state.step += 1
                    self._nonfinite.observe(state.step, [] if skipped else [weighted for weighted, _ in step_batches], norm)
                    for micro_loss, micro_samples in step_batches:
                        window.add(None if skipped else micro_loss, micro_samples)
                    step_batches = []
                    watchdog.mark("logging", state.step)
                    bar.update(1)
                    self.callbacks("on_step_end", self, state.step, loss.detach())
                    done = window.pause(self._after_step, epoch, window, index + 1 == batches)
                    window.pause(self._save_if_asked)
                    watchdog.mark("data")
                    if done or (state.step >= self.total_steps and index + 1 < batches):
                        done = True  # stopped, or max_steps reached mid-epoch (a full epoch ends below)
                        break
                else:  # the epoch ran to its end
                    window.pause(self._end_epoch, epoch)
                    done = self.should_stop or state.step >= self.total_steps
        finally:
            bar.close()
            self.log.bar = None
        return window

    def _micro_step(self, batch: Any, micro: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and backward of one micro-batch; returns its loss and its loss weighted for the
        global-batch mean.

        The strategy averages gradients over ranks and ``rt.step`` over the step's micro-batches,
        which is the mean over the global batch only when every micro-batch holds as many samples;
        the short last global batch of an epoch splits unevenly, so each micro-batch's loss is
        weighted by its share (``micro.loss_weight``, 1.0 for an even split).
        """
        rt = self.runtime  # the batch comes from rt.loader, already on rt.device
        watchdog.mark("forward")
        with rt.accumulate(self.model, steps=micro.micro_steps, sync=micro.sync):  # step averages the micro-batches
            with rt.autocast():
                loss, _ = self.task.forward(self.model, batch)
            weighted = loss if micro.loss_weight == 1.0 else loss * micro.loss_weight
            watchdog.mark("backward")
            rt.backward(weighted)
        return loss, weighted

    def _check_finite(self) -> None:
        """See :meth:`FiniteChecks.check`. Collective."""
        self._finite.check(self.state.step, self.model, self.log)

    def _last_good(self) -> str | None:
        """The newest complete checkpoint, after the one being written in the background (if any) is
        complete: a stop must name what is on disk, not race the writer. Collective (asked only at a
        stop every rank agreed on)."""
        if self.checkpoints is None:
            return None
        try:  # every rank alike: the stop being named is the error to raise, not this write's
            self.checkpoints.finish_writing("naming the last good checkpoint", say=False)
        except CheckpointError:
            pass  # nothing of it was committed: the newest checkpoint on disk is the last good one
        newest = self.checkpoints.newest()
        return str(newest) if newest else None

    def _checkpoint_dir(self) -> Path | None:
        return self.checkpoints.directory if self.checkpoints is not None else None

    def _after_step(self, epoch: int, window: TrainWindow, epoch_ends: bool) -> bool:
        """Log, evaluate and save when due; True when the run must stop. Collective."""
        c, step = self.config, self.state.step
        report_communication(self, self._step_clock, step, window.train_seconds)
        if c.check_sync_every and step % c.check_sync_every == 0:
            self.runtime.check_same_weights(self.model, step=step)  # drift raises here, naming tensor and ranks
        evaluate = self._cadence.evaluation_due(step, epoch_ends, self.total_steps)
        stop = False
        if self._cadence.log_due(step, evaluate, self.total_steps):
            self._check_finite()
            report_train(self, epoch, *window.take())
            if evaluate:
                self._evaluate()
                self._save()
            stop = self._stop_requested()
        if self._cadence.save_due(step):
            self._save()  # a save step that is also a log step (or the last step, or a stop) saves too
        return stop

    def _save_if_asked(self) -> None:
        """See :meth:`FitPreemption.save_if_asked`. Collective."""
        step = self.state.step
        self._preemption.save_if_asked(step, self._cadence.saved_at != step, self._save, self._checkpoint_dir(),
                                       lambda: self.checkpoints and self._finish_writing("stopping"))

    def _finish_writing(self, before: str) -> None:
        """The checkpoint being written in the background is complete (said when it was still being written);
        a failure of its save raises on every rank — a non-finite run named by its first bad step, as a save
        that failed at once. Collective."""
        try:
            self.checkpoints.finish_writing(before)
        except (CheckpointError, NonFiniteError):
            self._finite.after_failed_save(self.state.step, self.model, self.log)
            raise

    def _end_epoch(self, epoch: int) -> None:
        """Evaluate (when asked per epoch) and save at the end of a full pass. Collective."""
        if self.config.eval_per_epoch and self._cadence.evaluated_at != self.state.step:
            self._evaluate()
        if self.checkpoints is not None and self._cadence.epoch_save_due(self.state.step):
            self._save()
        self.callbacks("on_epoch_end", self, epoch)
        self._stop_requested()

    def _stop_requested(self) -> bool:
        """True when any rank asked to stop (a callback or early stopping). Collective."""
        self.should_stop = bool(comm.all_reduce(float(self.should_stop), op="max"))
        return self.should_stop

    # ---- evaluation ---------------------------------------------------------------------
    def evaluate(self) -> Evaluation:
        """Score the model on the whole dev set (each sample once across ranks). Collective.

        See :func:`paratrain.loop.evaluation.evaluate`.
        """
        return evaluate(self.runtime, self.task, self.model, self.eval_loader)

    def _evaluate(self) -> Evaluation:
        c, state = self.config, self.state
        self._check_finite()
        with ledger.phase("eval"):
            evaluation = self.evaluate()
        self.last_evaluation = evaluation
        self._cadence.evaluated(state.step)
        value = evaluation.metrics.get(c.metric)
        if value is None:
            raise ConfigError(f"{option('metric', c.metric)} is not computed by task {self.task.name!r}; choose one of: {', '.join(evaluation.metrics)}")
        best = state.improve(float(value), state.step, evaluation.metrics, metric_mode(c.metric) == "max")
        if c.patience and state.evals_without_improvement >= c.patience and state.step < self.total_steps:
            state.stopped_early = True  # only when steps were left: a run that ran them all did not stop early
            self.should_stop = True
        report_eval(self, evaluation, best)
        self.callbacks("on_eval_end", self, evaluation)
        return evaluation

    # ---- checkpoints and output -----------------------------------------------------------
    def _check_out_dir(self) -> None:
        """Every rank stops, with one line, when rank 0's output directory was deleted or moved. Collective."""
        if self.out_dir is not None:
            from paratrain.checkpoint.all_or_none import on_all_ranks

            on_all_ranks("the run directory is gone", self._out_dir_still_there)

    def _out_dir_still_there(self) -> None:
        """Rank 0: its output directory is the one this run started in (other ranks: nothing to check).
        Not collective: run inside an agreement (:meth:`_check_out_dir`, or a save's own)."""
        try:
            check_still_there(self.out_dir, self._out_identity, self.state.step)
        except ParatrainError:
            self.log.trackers.forget()  # nothing more written there, not even a tracker's last flush (rank 0's)
            raise

    def _save(self) -> None:
        if self.checkpoints is None:
            return
        step = self.state.step
        metrics = self.last_evaluation.metrics if self._cadence.evaluated_at == step and self.last_evaluation else None
        finite = self._finite.before_save(step, self.model)
        out_dir = self._out_dir_still_there if self.out_dir is not None else None

        def check() -> None:
            # Every rank, inside the save's own agreement (no collective of its own): never a checkpoint
            # into a deleted run directory (it would be recreated with one checkpoint), nor of non-finite weights.
            if out_dir is not None:
                out_dir()
            if finite is not None:
                finite()

        watchdog.mark("checkpoint")
        try:
            path = self.checkpoints.save(step=step, epoch=self.epoch, metrics=metrics, check=check)
        except (CheckpointError, NonFiniteError):
            if finite is not None:  # every rank alike: a non-finite run stops naming its first bad step
                self._finite.after_failed_save(step, self.model, self.log)
            raise
        if finite is not None and not self.checkpoints.agreement_pending():  # else known at the next save or wait
            self._finite.saved(step)
        watchdog.mark("logging")
        self._cadence.saved(step, with_metrics=bool(metrics))
        self._preemption.saved()
        self.log.file(f"checkpoint step {step}: {path}")
        self.log.record("checkpoint", step, epoch=self.epoch, path=str(path) if path else None)
        self.callbacks("on_checkpoint", self, step)
