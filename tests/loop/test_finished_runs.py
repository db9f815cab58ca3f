"""What a rerun in a run directory may do: nothing lost, nothing counted twice, nothing silent.

In one process with real files (``pt.fit(model, out_dir=...)``), each case the same command or a
changed one run again in the directory:

* checkpoints a user renamed or copied are never resumed from, rotated or deleted (mentioned once);
* a finished run run again trains, evaluates, saves and counts nothing — nor with fewer steps;
* ``stopped_early`` is true only when steps were left;
* a changed ``lr`` (or precision, failure rate, or strategy option) applies from the resume step on, said in one line; a
  changed seed or metric is refused.

Each failed before: the renamed folder was the resume point and both were deleted; the rerun evaluated
again, counted the tie as patience and saved again; an extension that ran all its steps kept
``stopped_early``; ``lr=`` on a resume changed nothing, silently; another precision or strategy option was taken in silence.
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch
from torch.utils.data import TensorDataset

import paratrain as pt
from paratrain.checkpoint.catalog import CheckpointWarning
from paratrain.errors import ConfigError


def _data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())


def _fit(out, **options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    options = {"lr": 0.05, "seed": 0, **options}
    return pt.fit(model, _data(64, 1), _data(40, 2), batch_size=8, eval_every=2, progress=False,
                  out_dir=str(out), tensorboard=False, **options)


def _records(out, event: str) -> list[dict]:
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["event"] == event]


def test_renamed_and_copied_checkpoints_are_never_resumed_from_nor_deleted(tmp_path):
    out = tmp_path / "run"
    _fit(out, max_steps=6, keep_last=3)
    ckpts = out / "checkpoints"
    shutil.copytree(ckpts / "step-000002", ckpts / "keep-me")
    (ckpts / "step-000006").rename(ckpts / "my-final")
    shutil.copytree(ckpts / "step-000004", ckpts / "step-000099")  # a copy under a name of paratrain's
    (ckpts / ".notes.tmp-mine").write_text("the user's")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _fit(out, max_steps=10, keep_last=1)
    assert result.resumed_from_step == 4  # step-000004, paratrain's newest under its own name
    for kept in ("keep-me", "my-final", "step-000099"):
        assert (ckpts / kept / "COMPLETE").is_file() and (ckpts / kept / "manifest.json").is_file(), kept
    assert (ckpts / ".notes.tmp-mine").read_text() == "the user's"
    mentioned = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    for name in ("keep-me", "my-final", "step-000099"):
        assert sum(f"{name} is not a checkpoint paratrain wrote" in m for m in mentioned) == 1, mentioned
    assert any("name it step-000006 to resume from it" in m for m in mentioned)


def test_a_finished_run_run_again_does_nothing_and_stopped_early_means_steps_were_left(tmp_path, capsys):
    out = tmp_path / "run"
    _fit(out, max_steps=6)
    summary = (out / "summary.json").read_bytes()
    saves, evals = len(_records(out, "checkpoint")), len(_records(out, "eval"))
    for steps in (6, 4):  # the same command, then fewer steps
        result = _fit(out, max_steps=steps)
        assert result.steps == 6 and not result.stopped_early
        assert (len(_records(out, "checkpoint")), len(_records(out, "eval"))) == (saves, evals)
        assert (out / "summary.json").read_bytes() == summary
        assert f"is finished: it ran 6 steps and this command asks for {steps}; nothing is trained" in capsys.readouterr().out

    # lr 1e-9: every evaluation's accuracy ties the first, so patience 1 stops the run at step 4 of 6.
    still = tmp_path / "still"
    assert _fit(still, max_steps=6, lr=1e-9, patience=1).stopped_early
    evals = len(_records(still, "eval"))
    rerun = _fit(still, max_steps=6, lr=1e-9, patience=1)
    assert rerun.stopped_early and rerun.steps == 4 and len(_records(still, "eval")) == evals  # no patience +1
    extended = _fit(still, max_steps=8, lr=1e-9, patience=5)  # patience raised: trains on, runs every step
    assert extended.steps == 8 and not extended.stopped_early
    assert not json.loads((still / "summary.json").read_text())["stopped_early"]


def test_a_changed_lr_is_applied_and_said_and_a_changed_seed_or_metric_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    _fit(out, max_steps=6)
    for changed, word in (({"seed": 1}, "seed"), ({"metric": "loss"}, "metric")):
        with pytest.raises(ConfigError, match=f"was trained with {word}=.*resume with {word}="):
            _fit(out, max_steps=10, **changed)
    capsys.readouterr()
    _fit(out, max_steps=10, lr=0.02, precision="bf16-mixed", save_every="auto", mtbf=60.0, strategy_options={"grad_compression": "bf16"})
    assert ("resuming with lr=0.02 (was 0.05), save_every='auto' (was None), mtbf=60.0 (was None), precision='bf16-mixed' (was 32-true), "
            "grad_compression='bf16' (was its default): applied from step 6 on" in capsys.readouterr().out)
    lr_at = {r["step"]: r["lr"] for r in _records(out, "train")}
    assert lr_at[8] == pytest.approx(0.02 * (10 - 8) / 10)  # the new peak on the stretched linear decay
