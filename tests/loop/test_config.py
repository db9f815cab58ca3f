"""FitConfig checks, the warmup schedule, and output-directory rules."""

from __future__ import annotations

import json

import pytest
import torch

from paratrain.errors import ConfigError
from paratrain.loop.config import FitConfig
from paratrain.loop.out_dir import prepare_out_dir
from paratrain.loop.schedule import warmup_schedule
from paratrain.tasks.api import Recipe


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"epochs": 0}, "^epochs must be a positive integer"),
        ({"grad_accum": -1}, "^grad_accum must be a positive integer"),
        ({"lr": 0}, "^lr must be a positive number"),
        ({"warmup": 1.5}, r"^warmup is a fraction of the steps in \[0, 1\)"),
        ({"schedule": "cosine"}, "^schedule='cosine' is not one of linear, constant"),
        ({"patience": True}, "^patience must be a positive integer"),
        ({"seed": "42"}, "^seed must be an int, got '42'"),
        ({"fresh": "yes"}, "^fresh must be a bool, got 'yes'"),
        # an option that only shapes another one, while that one is off: it would seem to set something
        ({"mtbf": 60.0}, r"^mtbf sets the interval of save_every='auto' only; add save_every='auto' or drop mtbf"),
        ({"mtbf": 60.0, "save_every": 100}, "^mtbf sets the interval of save_every='auto' only"),
        ({"max_nonfinite_skips": 3}, r"^max_nonfinite_skips=3 counts skipped steps, and on_nonfinite='stop' skips "
                                     r"none; add on_nonfinite='skip' or drop max_nonfinite_skips"),
        ({"patience": 2, "eval_per_epoch": False}, r"^patience counts evaluations, and eval_per_epoch=False without "
                                                   r"eval_every schedules none; add eval_every='N' or drop patience"),
    ],
)
def test_bad_values_are_refused_naming_the_argument(options, needle):
    with pytest.raises(ConfigError, match=needle):
        FitConfig(**options)


def test_under_the_cli_the_same_checks_name_the_flags():
    from paratrain.arguments import cli_spelling

    with cli_spelling(), pytest.raises(ConfigError, match="^--grad-accum must be a positive integer"):
        FitConfig(grad_accum=0)
    with cli_spelling(), pytest.raises(ConfigError, match="^--schedule cosine is not one of"):
        FitConfig(schedule="cosine")
    with cli_spelling(), pytest.raises(ConfigError, match="^--mtbf sets the interval of --save-every auto only; add "
                                                          "--save-every auto or drop --mtbf$"):
        FitConfig(mtbf=60.0)
    with cli_spelling(), pytest.raises(ConfigError, match="^--patience counts evaluations, and --no-eval-per-epoch "
                                                          "without --eval-every schedules none; add --eval-every N"):
        FitConfig(patience=3, eval_per_epoch=False)
    with cli_spelling(), pytest.raises(ConfigError, match="^--max-nonfinite-skips 0 counts skipped steps, and "
                                                          "--on-nonfinite stop skips none; add --on-nonfinite skip"):
        FitConfig(max_nonfinite_skips=0)
    FitConfig(mtbf=60.0, save_every="auto")  # and what they shape, on: taken
    FitConfig(max_nonfinite_skips=0, on_nonfinite="skip")
    FitConfig(patience=3, eval_per_epoch=False, eval_every=10)


def test_unknown_option_lists_the_known_ones():
    with pytest.raises(ConfigError, match="pt.fit\\(\\) got an unexpected argument 'epoch'; did you mean 'epochs'\\?"):
        FitConfig.check_names({"epoch": 3})


def test_recipe_fills_only_what_was_not_given():
    config = FitConfig(lr=0.5).with_recipe(Recipe(epochs=7, lr=0.1, batch_size=4, metric="miou"))
    assert (config.epochs, config.lr, config.batch_size, config.metric) == (7, 0.5, 4, "miou")


def test_warmup_rises_linearly_then_decays_to_zero():
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    schedule = warmup_schedule(optimizer, total_steps=10, warmup_fraction=0.2)
    rates = []
    for _ in range(10):
        rates.append(schedule.get_last_lr()[0])
        optimizer.step()
        schedule.step()
    assert rates[:3] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert rates[2:] == sorted(rates[2:], reverse=True) and rates[-1] == pytest.approx(1 / 8)
    state = schedule.state_dict()
    assert state["lr_lambdas"][0] == {"total": 10, "warmup": 2, "decay": True}  # plain numbers: weights_only-safe


def test_constant_schedule_keeps_the_peak():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    schedule = warmup_schedule(optimizer, total_steps=5, warmup_fraction=0.0, schedule="constant")
    for _ in range(4):
        optimizer.step()
        schedule.step()
    assert schedule.get_last_lr() == [2.0]


def test_out_dir_refuses_another_tasks_run_and_fresh_moves_it_aside(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "task.json").write_text(json.dumps({"task": "digits", "options": {}}))
    (out / "checkpoints").mkdir()
    with pytest.raises(ConfigError) as info:
        prepare_out_dir(out, "seg")
    message = str(info.value)
    assert "holds checkpoints of task 'digits', not 'seg'" in message
    assert "another out_dir" in message and "fresh=True" in message and "--" not in message
    assert (out / "task.json").exists()  # nothing touched
    same, moved = prepare_out_dir(out, "digits")
    assert same == out and moved is None
    _, moved = prepare_out_dir(out, "seg", fresh=True)
    assert moved is not None and (moved / "task.json").exists() and (moved / "checkpoints").is_dir()
    assert out.is_dir() and not any(out.iterdir())


def test_out_dir_refuses_foreign_files_a_file_and_another_model_path(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"already holds files that are not a paratrain run \(notes.txt\)"):
        prepare_out_dir(tmp_path, "digits")
    with pytest.raises(ConfigError, match="is a file"):
        prepare_out_dir(tmp_path / "notes.txt", "digits")
    run = tmp_path / "bert"
    run.mkdir()
    (run / "task.json").write_text(json.dumps({"task": "text-cls", "options": {"model_path": "/models/a"}}))
    with pytest.raises(ConfigError, match="holds a run with model_path='/models/a', this one has model_path='/models/b'"):
        prepare_out_dir(run, "text-cls", {"model_path": "/models/b"})


@pytest.mark.parametrize("name, value", [("max_steps", 10**12), ("epochs", 10**7)])
def test_an_absurd_length_is_refused_rather_than_trained_at_lr_near_zero(name, value):
    # Before: --max-steps 10^12 (or 1e24 through pt.fit) trained in silence at lr 8e-12 (1.8e-24).
    with pytest.raises(ConfigError, match=rf"more than [\d,]+ .*the learning rate would stay near 0"):
        FitConfig(**{name: value})
    FitConfig(**{name: 1000})
