"""The fit loop in one process: steps, accumulation, evaluation cadence, callbacks, early stop."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

import paratrain as pt
from paratrain.errors import ConfigError
from paratrain.tasks import Evaluation, Evaluator


def _separable(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())


class Recorder(pt.Callback):
    def __init__(self, stop_at: int | None = None):
        self.events: list[tuple] = []
        self.stop_at = stop_at

    def on_fit_start(self, trainer):
        self.events.append(("start", trainer.state.step))

    def on_step_end(self, trainer, step, loss):
        self.events.append(("step", step))
        if self.stop_at and step >= self.stop_at:
            trainer.should_stop = True

    def on_eval_end(self, trainer, evaluation):
        self.events.append(("eval", trainer.state.step, round(evaluation.metrics["accuracy"], 6)))

    def on_epoch_end(self, trainer, epoch):
        self.events.append(("epoch", epoch))

    def on_fit_end(self, trainer, result):
        self.events.append(("end", result.steps))


def test_fit_own_model_with_accumulation_eval_cadence_and_callbacks():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    recorder = Recorder()
    # 64 samples, batch 8 → 8 batches per epoch; accumulation 3 → steps of 3, 3, 2 batches.
    result = pt.fit(model, _separable(64, 1), _separable(40, 2), epochs=4, batch_size=8, lr=0.05,
                    grad_accum=3, eval_every=5, log_every=2, callbacks=[recorder], progress=False)
    steps = [e[1] for e in recorder.events if e[0] == "step"]
    assert steps == list(range(1, 13))  # 3 optimizer steps per epoch × 4 epochs
    evals = [e[1] for e in recorder.events if e[0] == "eval"]
    assert evals == [3, 5, 6, 9, 10, 12]  # every 5 steps and at each epoch end, never twice at one step
    assert [e[1] for e in recorder.events if e[0] == "epoch"] == [0, 1, 2, 3]
    assert recorder.events[0] == ("start", 0) and recorder.events[-1] == ("end", 12)
    assert result.steps == 12 and result.epochs_done == pytest.approx(4.0)
    assert result.best_metrics["accuracy"] >= 0.85
    assert result.best_metrics["samples"] == 40.0
    assert "precision" in result.report


def test_max_steps_ends_mid_epoch_and_a_callback_can_stop_every_rank():
    model = torch.nn.Linear(4, 2)
    result = pt.fit(model, _separable(64, 1), _separable(16, 2), max_steps=5, batch_size=8, progress=False)
    assert result.steps == 5 and result.last_metrics  # a final evaluation at the last step
    recorder = Recorder(stop_at=3)
    result = pt.fit(torch.nn.Linear(4, 2), _separable(64, 1), _separable(16, 2), epochs=3, batch_size=8,
                    log_every=1, callbacks=[recorder], progress=False)
    assert result.steps == 3


class Constant(Evaluator):
    def update(self, scores, batch):
        pass

    def compute(self):
        return Evaluation(metrics={"score": 0.5})


def test_early_stopping_after_patience_evaluations_without_a_new_best():
    result = pt.fit(torch.nn.Linear(4, 2), _separable(64, 1), _separable(16, 2), epochs=10, batch_size=8,
                    eval_every=2, eval_per_epoch=False, patience=2, metric="score", evaluator=Constant, progress=False)
    # best at the first evaluation (step 2), no improvement at steps 4 and 6 → stop at 6
    assert result.stopped_early and result.steps == 6 and result.best_step == 2


def test_a_metric_the_task_does_not_compute_is_named():
    with pytest.raises(ConfigError, match="metric='f2' is not computed by task 'model'; choose one of: loss, accuracy"):
        pt.fit(torch.nn.Linear(4, 2), _separable(16, 1), _separable(8, 2), epochs=1, batch_size=8, metric="f2", progress=False)


def test_fit_rejects_unknown_options_and_things_that_are_not_tasks():
    with pytest.raises(ConfigError, match="did you mean 'epochs'"):
        pt.fit("digits", epoch=1)
    with pytest.raises(ConfigError, match="takes a task name, a Task or a torch.nn.Module"):
        pt.fit(42)
    with pytest.raises(ConfigError, match="needs train_data and eval_data"):
        pt.fit(torch.nn.Linear(4, 2))


class Crash(pt.Callback):
    """Stands in for a killed process: raises after ``step``."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, trainer, step, loss):
        if step == self.step:
            raise KeyboardInterrupt("killed")


def test_a_crashed_run_resumes_from_its_last_checkpoint_and_ends_like_an_uninterrupted_one(tmp_path):
    import json

    options = {"task_options": pt.tasks.TaskOptions(limit_train=256, limit_eval=64), "max_steps": 12, "batch_size": 16,
               "save_every": 4, "eval_every": 6, "log_every": 3, "progress": False}
    straight = pt.fit("digits", out_dir=str(tmp_path / "straight"), **options)

    out = tmp_path / "crashed"
    with pytest.raises(KeyboardInterrupt):
        pt.fit("digits", out_dir=str(out), callbacks=[Crash(step=10)], **options)
    assert not (out / "summary.json").exists()
    resumed = pt.fit("digits", out_dir=str(out), **options)

    assert resumed.resumed_from_step == 8  # checkpoints at 4, 6 (eval), 8; the crash came at 10
    assert resumed.steps == 12
    # Same data order, dropout masks, optimizer and schedule state: the same numbers to the last bit.
    assert resumed.last_metrics == straight.last_metrics
    assert resumed.best_metrics == straight.best_metrics and resumed.best_step == straight.best_step

    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [4, 6, 8, 12]
    assert [e["step"] for e in events if e["event"] == "resume"] == [8]
    assert json.loads((out / "task.json").read_text())["task"] == "digits"
    assert json.loads((out / "summary.json").read_text())["resumed_from_step"] == 8
    assert "rank 0: step 12 local loss" in (out / "logs" / "rank0.log").read_text()
    assert any((out / "tensorboard").iterdir())
    assert resumed.best_checkpoint and resumed.best_checkpoint.startswith(str(out / "checkpoints"))


def test_own_model_with_lengths_trains_on_length_grouped_batches():
    """pt.fit(model, ..., lengths=) pads each batch to similar lengths; group_by_length=False draws at random."""
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 40, (256,), generator=generator).tolist()
    data = [(torch.ones(n), n % 2) for n in lengths]
    widths = []

    def collate(samples):
        width = max(len(x) for x, _ in samples)
        widths.append(width)
        inputs = torch.zeros(len(samples), 40)
        for i, (x, _) in enumerate(samples):
            inputs[i, : len(x)] = x
        return inputs, torch.tensor([y for _, y in samples])

    for grouped in (True, False):
        widths.clear()
        pt.fit(torch.nn.Linear(40, 2), data, data[:16], lengths=lengths, collate_fn=collate, epochs=1, batch_size=16,
               group_by_length=grouped, progress=False, tensorboard=False)
        training = widths[: 256 // 16]
        if grouped:
            grouped_mean = sum(training) / len(training)
        else:
            random_mean = sum(training) / len(training)
    assert grouped_mean < 0.8 * random_mean  # random batches of 16 nearly always hold a ~39-long sample
    with pytest.raises(ConfigError, match="lengths= goes with your own model"):
        pt.fit("digits", lengths=[1])
def test_save_every_also_saves_on_the_steps_that_log(tmp_path):
    import json

    out = tmp_path / "run"
    pt.fit("digits", task_options=pt.tasks.TaskOptions(limit_train=256, limit_eval=32), max_steps=5, batch_size=16,
           save_every=2, log_every=2, keep_last=5, eval_per_epoch=False, out_dir=str(out), progress=False,
           tensorboard=False)
    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "train"] == [2, 4, 5]
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [2, 4, 5]  # 5: the last step
    assert sorted(p.name for p in (out / "checkpoints").glob("step-*")) == ["step-000002", "step-000004", "step-000005"]
