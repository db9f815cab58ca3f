"""`paratrain train`'s flags come from FitConfig's and TaskOptions' fields, and its task list from
the task registry: every field is a flag that survives the trip launcher → words → worker, a new
field is a new flag with its help, and a registered task shows in the help."""

from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import dataclass

import pytest

from paratrain.arguments import option_field
from paratrain.cli.config_flags import add_flags, config_from_args, config_words, flag_fields, nested_flag_fields
from paratrain.cli.main import main
from paratrain.cli.train_cmd import add_train_arguments, train_argv
from paratrain.cli.workers.train import build_run
from paratrain.loop.config import FitConfig
from paratrain.tasks.api import TaskOptions
from paratrain.tasks.digits import DigitsTask
from paratrain.tasks.registry import TASKS

# Values the config checks accept where a made-up word would not (or may not, once checked earlier).
VALID = {"strategy": "ddp", "precision": "bf16-mixed", "grad_compression": "bf16", "log_with": "csv,mlflow",
         "save_every": "auto"}
# Fields taken only beside another's value (alone they are refused: they would set nothing).
COMPANIONS = {"mtbf": {"save_every": "auto"}, "max_nonfinite_skips": {"on_nonfinite": "skip"}}

# The flags of `paratrain train` before they were derived from the fields: every one still parses.
OLD_FLAGS = ("--epochs 2", "--max-steps 2", "--batch-size 2", "--eval-batch-size 2", "--lr 0.1", "--weight-decay 0.1",
             "--warmup 0.1", "--schedule constant", "--grad-accum 2", "--clip-norm 1", "--eval-every 2",
             "--no-eval-per-epoch", "--metric loss", "--patience 2", "--save-every 2", "--save-every-minutes 2",
             "--stall-timeout 0", "--keep-last 2", "--on-nonfinite skip", "--max-nonfinite-skips 2", "--log-every 2",
             "--check-sync-every 2", "--strategy ddp", "--grad-compression bf16", "--zero-stage 2",
             "--precision bf16-mixed", "--seed 2", "--sync-bn", "--compile", "--no-fused-optimizer", "--no-tf32",
             "--num-workers 2", "--no-group-by-length", "--no-progress", "--no-tensorboard", "--data d",
             "--model-path m", "--limit-train 2", "--limit-eval 2", "--max-len 2", "--out o", "--fresh")


def _other_values(field: dataclasses.Field, kind: type) -> list:
    """Values of ``field`` other than its default, that its class accepts."""
    if field.name in VALID:
        return [VALID[field.name]]
    if "choices" in field.metadata:
        return [choice for choice in field.metadata["choices"] if choice != field.default]
    if kind is bool:
        return [True, False] if field.default is None else [not field.default]
    others = [None] if "off" in field.metadata else []  # a default that the flag's "off" value turns to None
    return others + [{int: 3, float: 0.25, str: "-x"}[kind]]  # "-x": a value that starts like a flag


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    return parser


@pytest.mark.parametrize("cls", [FitConfig, TaskOptions])
def test_every_field_is_a_flag_and_comes_back_equal(cls):
    parser = _parser()
    flagged = [field.name for field, _ in flag_fields(cls)]
    # every field but one that holds another component's options (their flags: the next test)
    assert flagged == [field.name for field in dataclasses.fields(cls) if "flags_from" not in field.metadata]
    dests = {action.dest for action in parser._actions}  # argparse has no public list
    assert set(flagged) <= dests
    for field, kind in flag_fields(cls):
        for value in _other_values(field, kind):
            companions = COMPANIONS.get(field.name, {})
            config = cls(**companions, **{field.name: value})
            words = config_words(config)
            assert len(words) == 1 + len(companions) and config_from_args(cls, parser.parse_args(["digits", *words])) == config, (field.name, words)
    everything = cls(**{field.name: _other_values(field, kind)[0] for field, kind in flag_fields(cls)})
    assert config_from_args(cls, parser.parse_args(["digits", *config_words(everything)])) == everything
    assert config_words(cls()) == []


def test_every_strategy_option_is_a_flag_and_comes_back_equal():
    parser = _parser()
    (holder, flags), = nested_flag_fields(FitConfig)
    assert holder.name == "strategy_options"
    from paratrain.strategy import STRATEGIES

    declared = {field.name for cls in STRATEGIES.values() for field, _ in flag_fields(cls.Options)}
    assert {field.name for field, _, _ in flags} == declared >= {"find_unused_parameters", "zero_stage", "shard"}
    for field, kind, owners in flags:
        for value in _other_values(field, kind):
            config = FitConfig(strategy_options={field.name: value})
            words = config_words(config)
            assert len(words) == 1 and config_from_args(FitConfig, parser.parse_args(["digits", *words])) == config, \
                (field.name, words)


def test_a_registered_strategy_brings_its_options_as_flags(monkeypatch, capsys):
    from paratrain.strategy import STRATEGIES
    from paratrain.strategy.ddp import DDPStrategy

    @dataclass(frozen=True)
    class Options(DDPStrategy.Options):
        warmup_buckets: int = option_field(0, "steps before the buckets are rebuilt", metavar="N")

    monkeypatch.setitem(STRATEGIES, "toy-ddp", type("ToyDDP", (DDPStrategy,), {"name": "toy-ddp", "Options": Options}))
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--warmup-buckets N toy-ddp: steps before the buckets are rebuilt (default 0)" in help_text
    assert "--find-unused-parameters, --no-find-unused-parameters ddp, toy-ddp: allow parameters" in help_text
    unwrapped = re.sub(r"(\w)- (\w)", r"\1-\2", help_text)  # argparse may wrap a line after a name's hyphen
    assert "auto, single, dp, ddp, fsdp, deepspeed, ft-ddp, ft-fsdp, hsdp, toy-ddp (auto: ddp" in unwrapped
    config = FitConfig(strategy="toy-ddp", strategy_options={"warmup_buckets": 2})
    assert config_from_args(FitConfig, _parser().parse_args(["digits", *config_words(config)])) == config


def test_the_launcher_words_give_the_worker_the_same_run():
    options = TaskOptions(limit_train=64, limit_eval=32)
    config = FitConfig(epochs=2, lr=3e-4, eval_per_epoch=False, progress=False, stall_timeout=None, out_dir="runs/x")
    task, again = build_run(_parser().parse_args(train_argv("digits", options, config)))
    assert again == config and task.options == options and task.name == "digits"


def test_the_flags_users_typed_before_still_parse():
    args = _parser().parse_args(["digits", *" ".join(OLD_FLAGS).split()])
    config = config_from_args(FitConfig, args)
    assert config_from_args(TaskOptions, args) == TaskOptions(data="d", model_path="m", limit_train=2, limit_eval=2, max_len=2)
    assert (config.eval_per_epoch, config.fused_optimizer, config.tf32, config.group_by_length) == (False, False, False, False)
    assert (config.progress, config.tensorboard, config.sync_batchnorm, config.compile) == (False, False, True, True)
    assert (config.stall_timeout, config.out_dir, config.fresh, config.schedule) == (None, "o", True, "constant")


@dataclass(frozen=True)
class WithEma(FitConfig):
    ema_decay: float | None = option_field(None, "keep a moving average of the weights with this decay")
    ema_on_cpu: bool = option_field(False, "keep that average in CPU memory")


def test_a_new_field_is_a_new_flag_with_its_help(monkeypatch, capsys):
    parser = argparse.ArgumentParser()
    add_flags(parser, WithEma)
    assert config_from_args(WithEma, parser.parse_args(["--ema-decay", "0.999", "--ema-on-cpu"])) == \
        WithEma(ema_decay=0.999, ema_on_cpu=True)
    # the real command, with the one new field in its config
    monkeypatch.setattr("paratrain.loop.config.FitConfig", WithEma)
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--ema-decay DECAY keep a moving average of the weights with this decay" in help_text
    assert "--ema-on-cpu, --no-ema-on-cpu keep that average in CPU memory (default off)" in help_text
    words = train_argv("digits", TaskOptions(), WithEma(ema_decay=0.5))
    assert words == ["digits", "--ema-decay=0.5"]
    _, config = build_run(_parser().parse_args(words))
    assert config == WithEma(ema_decay=0.5)


def test_help_states_the_dataclass_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    fields = {field.name: field for field in dataclasses.fields(FitConfig)}
    assert f"--keep-last N checkpoints to keep besides the best (default {fields['keep_last'].default})" in help_text
    assert f"(0: off) (default {fields['stall_timeout'].default:g})" in help_text
    assert "--schedule {linear,constant}" in help_text and "--tf32, --no-tf32" in help_text


def test_task_names_in_the_help_come_from_the_registry(monkeypatch, capsys):
    toy = type("ToyTask", (DigitsTask,), {"name": "toy-sine", "summary": "a sine wave the help reads from the registry"})
    monkeypatch.setitem(TASKS, "toy-sine", toy)
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "  toy-sine   a sine wave the help reads from the registry\n" in out
    assert all(f"\n  {name:<10} {cls.summary[:20]}" in out for name, cls in TASKS.items())
    assert "toy-sine, or your own: FILE.py:TASK" in " ".join(out.split())
    assert main(["train", "--list"]) == 0
    assert "  toy-sine   a sine wave the help reads from the registry" in capsys.readouterr().out
