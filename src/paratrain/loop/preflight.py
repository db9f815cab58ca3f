"""Checks at start-up, so that a run fails in its first seconds instead of after an epoch.

* :func:`check_first_dev_batch`: the dev set is not empty, and its first batch goes through the
  task's forward and evaluator (a dict batch without ``labels``, a model that returns a tuple,
  a dict batch given to a positional model — each is one line naming the fix).
* :func:`check_options`: the options name a metric the task computes, and a non-finite policy
  the strategy allows.
* :func:`check_resumable`: a resumed run counts steps and picks its best checkpoint as the saved
  one did — the same global batch, the same dev set, the same metric and seed — or it is refused in
  one line; :func:`changed_options` lists the options a resume applies from its step on (said in one line).
"""

from __future__ import annotations

from typing import Any

import torch

from paratrain.arguments import option
from paratrain.errors import ConfigError, DataError, ParatrainError
from paratrain.data.batches import move_to
from paratrain.strategy import strategy_class

PREFLIGHT_SAMPLES = 2


def check_first_dev_batch(runtime: Any, task: Any, model: torch.nn.Module, eval_data: Any) -> None:
    """Run the task's forward and evaluator on the first dev samples, in eval mode, without gradients.

    Collective only as much as the model's forward is (a sharded model gathers its parameters):
    every rank runs it on the same samples, so all pass or all raise alike. Nothing is trained,
    no dev metric is kept; the model is put back in training mode.

    Raises:
        DataError: the dev set is empty, or its first batch cannot be evaluated (names the error and the fix).
    """
    if len(eval_data) == 0:
        raise DataError("the dev set is empty: every run ends with an evaluation, and the best checkpoint is "
                        "chosen by it; give eval_data at least one sample (or a larger --limit-eval)")
    batch = task.collate([eval_data[i] for i in range(min(PREFLIGHT_SAMPLES, len(eval_data)))])
    batch = move_to(batch, runtime.device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), runtime.autocast():
            _, scores = task.forward(model, batch)
            task.evaluator().update(scores, batch)
    except ParatrainError:
        raise
    except Exception as exc:  # the user's model, batch and evaluator: any error, named once, now
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise DataError(f"the first dev batch cannot be evaluated ({type(exc).__name__}: {first}); "
                        f"{_hint(exc, batch)}") from exc
    finally:
        model.train(was_training)


def _hint(exc: Exception, batch: Any) -> str:
    if isinstance(exc, KeyError) and isinstance(batch, dict):
        return (f"the batch has keys {sorted(batch)}: a dict batch needs 'labels' for the default evaluator, "
                "or pass evaluator= (and forward=) that read your keys")
    return "checked before training; fix the dataset, collate_fn, forward= or evaluator= it names"


def check_options(task: Any, config: Any) -> None:
    """Refuse what is visible before training: a metric ``task`` does not compute, a strategy that runs
    in own loops only, an impossible non-finite policy. Not collective. (Strategy and precision names: ``runtime.resolve``.)

    Raises:
        ConfigError: names the valid choices.
    """
    known = ("loss", *task.metric_names)
    if task.metric_names and config.metric not in known:
        raise ConfigError(
            f"{option('metric', config.metric)} is not computed by task {task.name!r}; choose one of: {', '.join(known)}"
        )
    strategy = strategy_class(config.strategy)
    if strategy is not None and strategy.refuses_fit_loop:
        raise ConfigError(f"{option('strategy', strategy.name)} does not run in pt.fit or paratrain train: "
                          f"{strategy.refuses_fit_loop}")
    if config.on_nonfinite == "skip" and strategy is not None and strategy.refuses_skipped_steps:
        raise ConfigError(f"{option('on_nonfinite', 'skip')} does not work with {option('strategy', strategy.name)} "
                          f"({strategy.refuses_skipped_steps}); use the default stop, or another strategy")


#: Fit options a resume holds to the saved run's: ``metric`` chose the best checkpoint so far (another
#: would mix two rankings in one summary); ``seed`` drew the data order and generators, which the
#: checkpoint restores (another seed would change nothing, silently).
REFUSED_ON_RESUME = ("metric", "seed")
#: Fit options a resume applies from its step on, and names in one line: the learning rate and the
#: schedule's shape (recomputed for the current step), the optimizer's weight decay, clipping, early
#: stopping, the cadence of evaluations, saves (``mtbf``: the failure rate ``save_every="auto"`` plans
#: for), logs and checks, and how the steps are computed (the precision, SyncBatchNorm, compile, TF32,
#: the fused optimizer, the evaluation batch, loader workers, background saves, the stall timeout),
#: each set up anew by the resumed run.
APPLIED_ON_RESUME = ("lr", "weight_decay", "warmup", "schedule", "clip_norm", "patience", "eval_every",
                     "eval_per_epoch", "save_every", "save_every_minutes", "mtbf", "keep_last", "log_every",
                     "check_sync_every", "on_nonfinite", "max_nonfinite_skips", "precision", "sync_batchnorm",
                     "compile", "tf32", "fused_optimizer", "eval_batch_size", "num_workers", "background_save",
                     "stall_timeout")
#: The strategy named and each strategy option given (``--grad-compression``, ``--zero-stage``, …) are
#: compared one by one too: a checkpoint loads into another strategy (resharded as needed), and the
#: resumed run sets the strategy up anew, so each change is applied from the resume step and said.
STRATEGY_OPTIONS = "strategy_options"
RESUME_OPTIONS = REFUSED_ON_RESUME + APPLIED_ON_RESUME + ("strategy", STRATEGY_OPTIONS)
_DEFAULT = "its default"  # what a strategy option not given before was


def resume_options(config: Any) -> dict[str, Any]:
    """The options of ``config`` that a checkpoint records for the next resume to compare (plain data)."""
    found = {name: getattr(config, name) for name in RESUME_OPTIONS}
    found[STRATEGY_OPTIONS] = dict(found[STRATEGY_OPTIONS] or {})
    return found


def changed_options(saved: dict[str, Any], now: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(name, saved value, this run's)`` for every option of :data:`APPLIED_ON_RESUME`, the strategy
    and each strategy option that changed (none when the checkpoint recorded no options)."""
    names = (*APPLIED_ON_RESUME, "strategy")
    changes = [(name, saved[name], now.get(name)) for name in names if name in saved and saved[name] != now.get(name)]
    if isinstance(saved.get(STRATEGY_OPTIONS), dict):
        before, after = saved[STRATEGY_OPTIONS], now.get(STRATEGY_OPTIONS) or {}
        changes += [(name, before.get(name, _DEFAULT), after.get(name, _DEFAULT)) for name in sorted({*before, *after})
                    if before.get(name, _DEFAULT) != after.get(name, _DEFAULT)]
    return changes


def describe_changes(changes: list[tuple[str, Any, Any]], step: int) -> str:
    """The one line a resume says about the options it applies."""
    listed = ", ".join(f"{option(name) if new is _DEFAULT else option(name, new)} (was {old})"
                       + (" back to its default" if new is _DEFAULT else "") for name, old, new in changes)
    return f"resuming with {listed}: applied from step {step} on"


def check_resumable(saved: Any, batch_size: int, grad_accum: int, dev_samples: int, out_dir: Any,
                    loader: Any = None, options: dict[str, Any] | None = None) -> None:
    """Refuse a resume whose steps or best checkpoint would not mean what they meant when saved.

    ``saved`` is the restored :class:`~paratrain.loop.state.FitState` (fields 0 when an older
    checkpoint did not record them: not checked); ``loader`` the restored training loader.
    A step must hold the run's global batch. With the job's global order (a loader that
    ``keeps_trajectory``) the world size may change and so may the split of that batch: the
    same ``batch_size`` and ``grad_accum`` as saved (the same command on another number of
    processes; the loader re-splits the saved global batch), or any whose product with this
    run's processes is the saved global batch (``4 × 3 × 1`` for ``2 × 3 × 2``). Another
    product is another global batch, and is refused. Without the global order (an older
    checkpoint of the per-rank order) the batch size and accumulation must be the saved ones.

    Raises:
        ConfigError: another global batch (or, without the global order, another batch size or
            accumulation), another dev set, or another option of :data:`REFUSED_ON_RESUME`.
    """
    how = f"or pass {option('fresh', True)} to move the run aside and start over"
    recorded = getattr(saved, "options", None) or {}
    for name in REFUSED_ON_RESUME:
        if options is not None and name in recorded and recorded[name] != options.get(name):
            why = ("its best checkpoint was chosen by it, and two rankings would mix" if name == "metric" else
                   "its data order and generators continue from the checkpoint, which another seed would not change")
            raise ConfigError(f"the run in {out_dir} was trained with {option(name, recorded[name])}, this one asks "
                              f"{option(name, options.get(name))}: {why}; resume with {option(name, recorded[name])}, {how}")
    same = (saved.batch_size, saved.grad_accum) == (batch_size, grad_accum)
    if saved.batch_size and not same and not _splits_the_global_batch(loader, batch_size, grad_accum):
        global_batch = _kept_global_batch(loader)
        if global_batch:
            world = loader.sampler.split.world_size
            asked = (f": on {world} process(es) that is a global batch of {world * batch_size * grad_accum} samples, "
                     f"the run's is {global_batch}")
            values = (f"resume with the same values (any number of processes keeps the run's global batch) or "
                      f"values whose product with the number of processes is {global_batch}, {how}")
        else:
            asked, values = "", f"resume with the same values, {how}"
        raise ConfigError(
            f"the run in {out_dir} was trained with {option('batch_size', saved.batch_size)} × accumulation "
            f"{saved.grad_accum}, this one has {option('batch_size', batch_size)} × {grad_accum}{asked}; a step "
            f"would hold another number of samples, so its step, epoch and LR-schedule counts would be wrong; {values}"
        )
    if saved.dev_samples and saved.dev_samples != dev_samples:
        raise ConfigError(
            f"the dev set has {dev_samples} samples, the run in {out_dir} was evaluated on {saved.dev_samples}: "
            f"its best checkpoint was chosen on that set, and the metrics would mix; resume with the same dev set "
            f"(the same {option('limit_eval')}), {how}"
        )


def _kept_global_batch(loader: Any) -> int | None:
    """The run's global batch when ``loader`` restored one of the global order, else None."""
    return loader.global_batch if getattr(loader, "keeps_trajectory", False) else None


def _splits_the_global_batch(loader: Any, batch_size: int, grad_accum: int) -> bool:
    """``batch_size × grad_accum`` on this run's processes makes up the run's saved global batch."""
    global_batch = _kept_global_batch(loader)
    return bool(global_batch) and loader.sampler.split.world_size * batch_size * grad_accum == global_batch


__all__ = ["changed_options", "check_first_dev_batch", "check_options", "check_resumable", "describe_changes",
           "resume_options"]
