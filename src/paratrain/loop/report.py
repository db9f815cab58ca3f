"""What the fit loop tells its user: the opening line, training and evaluation lines, the closing summary.

Each function reads the trainer's public attributes (task, runtime, state, counts, loaders) and writes
through its :class:`~paratrain.loop.run_log.RunLog`: the console on rank 0, every rank's
own log file, ``metrics.jsonl`` and TensorBoard.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from paratrain.loop.result import FitResult
from paratrain.loop.step_timing import StepClock
from paratrain.loop.out_dir import WEIGHTS_FILE
from paratrain.trackers.hub import wants_artifacts

if TYPE_CHECKING:
    from paratrain.loop.trainer import Trainer
    from paratrain.tasks.api import Evaluation


def report_start(trainer: Trainer, train_size: int, eval_size: int, resumed_from: int) -> None:
    """The run's first line: data, processes, batch arithmetic, steps, strategy (what ``auto`` chose and
    why, the mesh), precision. Not collective."""
    rt, loader, log = trainer.runtime, trainer.train_loader, trainer.log
    what = f"resuming from step {resumed_from}" if resumed_from else "starting from step 0"
    why = "; ".join(filter(None, [f"auto: {rt.resolved.auto_reason}" if rt.resolved.auto_reason else "",
                                  rt.strategy.layout()]))
    log.console(
        f"{trainer.task.name}: {train_size} train / {eval_size} dev samples, {rt.world_size} process(es) × batch "
        f"{loader.batch_size} × accumulation {loader.accumulation} = global batch "
        f"{loader.global_batch}, {trainer.steps_per_epoch} steps/epoch, {trainer.total_steps} steps, "
        f"strategy {rt.strategy.name}{f' ({why})' if why else ''}, precision {rt.precision.name}; {what}"
    )
    log.file(repr(rt))
    if resumed_from:
        log.record("resume", resumed_from)


def run_config(trainer: Trainer) -> dict[str, Any]:
    """The run as the trackers show its config: the fit options, the task's, and the job's shape. Not collective."""
    rt, config = trainer.runtime, trainer.config
    options = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("progress", "out_dir")}
    return {**options, **{f"task_{k}": v for k, v in trainer.task.options.to_dict().items()},
            "task": trainer.task.name, "strategy": rt.strategy.name, "precision": rt.precision.name,
            "world_size": rt.world_size, "num_nodes": rt.topology.num_nodes}


def report_weights(trainer: Trainer) -> None:
    """The final weights as one safetensors file in the run directory, stored by every tracker that keeps files.
    Collective (the whole weights are gathered for sharded strategies); nothing when no tracker asks for them."""
    log = trainer.log
    if trainer.out_dir is None or not wants_artifacts(log.trackers.names):
        return
    path = trainer.out_dir / WEIGHTS_FILE
    trainer.runtime.save_weights(trainer.model, path)
    log.trackers.artifact(path)


def report_train(trainer: Trainer, epoch: int, local_loss: torch.Tensor, samples_per_s: float) -> None:
    """The global mean loss over the window since the last line → console, files, progress bar; every rank's
    step times in the same collective → per-rank curves and straggler lines (:mod:`paratrain.loop.rank_times`).
    Collective."""
    state, config, log = trainer.state, trainer.config, trainer.log
    loss, ranks = trainer.rank_times.gather(local_loss)  # the loss's one collective also gathers every rank's timings
    lr = trainer.scheduler.get_last_lr()[0]
    epochs_total = "?" if config.max_steps else config.epochs
    log.file(f"step {state.step} local loss {float(local_loss):.4f}")
    log.console(
        f"epoch {epoch + 1}/{epochs_total} step {state.step}/{trainer.total_steps} loss {loss:.4f} lr {lr:.2e} {samples_per_s:.1f} samples/s"
    )
    log.record("train", state.step, epoch=epoch, loss=loss, lr=lr, samples_per_s=samples_per_s)
    trainer.rank_times.report(log, state.step, ranks, trainer.train_loader.global_batch / max(trainer.runtime.world_size, 1))
    if log.bar is not None:
        log.bar.set_postfix(loss=f"{loss:.4f}", samples_s=f"{samples_per_s:.0f}", refresh=False)


def report_eval(trainer: Trainer, evaluation: Evaluation, best: bool) -> None:
    """One evaluation's metrics, marked ``(best)`` when they are the best so far. Not collective."""
    step = trainer.state.step
    shown = " ".join(f"{k} {v:.4f}" for k, v in evaluation.metrics.items() if k != "samples")
    trainer.log.console(f"eval  step {step}/{trainer.total_steps} {shown}" + (" (best)" if best else ""))
    trainer.log.record("eval", step, epoch=trainer.epoch, best=best, **evaluation.metrics)


def report_communication(trainer: Trainer, clock: StepClock, step: int, train_seconds: float) -> None:
    """After ``step`` (at ``train_seconds`` of training), once ``clock`` has timed the first steps:
    the strategy's word on whether communication bounds the job (multi-node DDP compares the step
    time with the link it measured; others say nothing). Not collective."""
    seconds_per_step = clock.after_step(step, train_seconds)
    text = trainer.runtime.strategy.communication_report(seconds_per_step) if seconds_per_step is not None else ""
    if text:
        trainer.log.console(text)
        trainer.log.record("communication", step, step_seconds=seconds_per_step, report=text)


def report_end(trainer: Trainer, resumed_from: int, train_seconds: float, run_samples: int) -> FitResult:
    """The run's :class:`FitResult` on every rank: printed (the last dev report, then the summary),
    recorded, saved by rank 0 as ``OUT/summary.json``, and handed to the callbacks' ``on_fit_end``.
    Not collective."""
    rt, state, checkpoints = trainer.runtime, trainer.state, trainer.checkpoints
    evaluation = trainer.last_evaluation
    result = FitResult(
        task=trainer.task.name,
        steps=state.step,
        epochs_done=state.step / max(trainer.steps_per_epoch, 1),
        resumed_from_step=resumed_from,
        seconds=round(train_seconds, 3),
        samples_per_s=run_samples / train_seconds if train_seconds > 0 else 0.0,
        world_size=rt.world_size,
        metric=trainer.config.metric,
        best_metrics=state.best_metrics,
        best_step=state.best_step,
        last_metrics=evaluation.metrics if evaluation else {},
        checkpoint_dir=str(checkpoints.directory) if checkpoints else None,
        best_checkpoint=checkpoints.best_path() if checkpoints else None,
        stopped_early=state.stopped_early,
        sync_batchnorm=bool(rt.strategy.sync_batchnorm),
        strategy=rt.strategy.name,
        precision=rt.precision.name,
        report=str(evaluation.report) if evaluation and rt.is_main else "",  # formatted on rank 0 only
        stragglers=trainer.rank_times.summary() if trainer.rank_times is not None else [],
        goodput=_goodput(),
    )
    log = trainer.log
    if result.report:
        log.console(f"dev report at step {state.step}:\n{result.report}")
    for line in result.summary_lines():
        log.console(line)
    log.record("summary", state.step, **{k: v for k, v in result.to_dict().items() if k != "report"})
    if rt.is_main and trainer.out_dir is not None and not trainer.finished_before:  # a finished run's stays
        result.save(trainer.out_dir)
    trainer.callbacks("on_fit_end", trainer, result)
    return result


def _goodput() -> dict | None:
    """Rank 0: the run's goodput account so far (its ledger, every attempt's records). Not collective."""
    from paratrain.goodput import accounting, ledger

    active = ledger.active()
    if active is None:
        return None
    active.flush()
    run = accounting.account(ledger.read_records(active.path))
    if run is None:
        return None
    run.attempts[-1].ended = True  # this attempt, ending now
    return run.to_dict()
