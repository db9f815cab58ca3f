"""`paratrain train` refuses bad input before any process starts: one line, the fix, nothing touched."""

from __future__ import annotations

import argparse
import json
import re
import sys

import pytest

from paratrain.cli.config_flags import config_from_args
from paratrain.cli.main import main
from paratrain.cli.train_cmd import add_train_arguments, train_argv
from paratrain.cli.workers.train import build_run
from paratrain.loop.config import FitConfig
from paratrain.tasks.api import TaskOptions


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["train", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_and_unknown_task_name_the_tasks(capsys):
    code, out, _ = _run(capsys, "--list")
    assert code == 0 and all(name in out for name in ("text-cls", "digits", "mnist", "seg"))
    code, _, err = _run(capsys, "cifar10", "--out", "unused")
    assert code == 2
    assert err.count("\n") == 1 and "unknown task 'cifar10'; built-in tasks: text-cls" in err


def test_bad_values_are_named(capsys, tmp_path):
    code, _, err = _run(capsys, "digits", "--epochs", "0", "--out", str(tmp_path / "x"))
    assert code == 2 and "--epochs must be a positive integer, got 0" in err
    code, _, err = _run(capsys, "digits", "--limit-train", "-3", "--out", str(tmp_path / "x"))
    assert code == 2 and "--limit-train must be a positive integer" in err
    code, _, err = _run(capsys, "seg", "--metric", "accuracy", "--out", str(tmp_path / "x"))
    assert code == 2 and "--metric accuracy is not computed by task 'seg'; choose one of: loss, miou, pixel_accuracy" in err
    assert not (tmp_path / "x").exists()


def test_mnist_needs_data_and_names_the_wrong_file(capsys, tmp_path):
    code, _, err = _run(capsys, "mnist", "--out", str(tmp_path / "out"))
    assert code == 2 and "needs --data DIR holding train-images-idx3-ubyte" in err
    data = tmp_path / "mnist"
    data.mkdir()
    (data / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x00")
    (data / "train-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x00")
    code, _, err = _run(capsys, "mnist", "--data", str(data), "--out", str(tmp_path / "out"))
    assert code == 2
    assert f"{data / 'train-images-idx3-ubyte'} has magic number 0x00000801, expected 0x00000803" in err
    assert not (tmp_path / "out").exists()


def test_missing_snownlp_names_the_extra(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "snownlp", None)
    code, _, err = _run(capsys, "text-cls", "--out", str(tmp_path / "out"))
    assert code == 2 and "needs the 'snownlp' package: pip install 'paratrain[tasks]'" in err


def test_model_path_without_a_saved_model(capsys, tmp_path):
    code, _, err = _run(capsys, "text-cls", "--model-path", str(tmp_path), "--out", str(tmp_path / "out"))
    assert code == 2 and f"--model-path {tmp_path} holds no config.json" in err and "save_pretrained" in err


def test_out_dir_of_another_task_is_refused_untouched(capsys, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    record = {"task": "seg", "options": {}}
    (out / "task.json").write_text(json.dumps(record))
    code, _, err = _run(capsys, "digits", "--out", str(out))
    assert code == 2
    assert "holds checkpoints of task 'seg', not 'digits'; refusing to mix them" in err
    assert "--fresh" in err and "another --out" in err
    assert json.loads((out / "task.json").read_text()) == record


@pytest.mark.parametrize("saved, given", [(None, "bert"), ("bert", None)])
def test_out_dir_of_a_run_with_another_model_path_says_which_was_given(capsys, tmp_path, saved, given):
    model = tmp_path / "bert"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out = tmp_path / "run"
    out.mkdir()
    record = {"task": "text-cls", "options": {"model_path": saved and str(model)}}
    (out / "task.json").write_text(json.dumps(record))
    code, _, err = _run(capsys, "text-cls", "--out", str(out), *(["--model-path", str(model)] if given else []))
    assert code == 2 and err.count("\n") == 1 and "None" not in err
    with_path, without_path = f"--model-path {model}", "no --model-path (the task's own model)"
    first, second = (with_path, without_path) if saved else (without_path, with_path)
    assert f"holds a run with {first}, this one has {second}; refusing to mix them" in err
    assert [p.name for p in out.iterdir()] == ["task.json"] and json.loads((out / "task.json").read_text()) == record


def _worker_run(args: argparse.Namespace):
    """What the launcher's words for ``args`` give a worker: (task, config), parsed again."""
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    _, config = build_run(args)
    return build_run(parser.parse_args(train_argv(args.task, config_from_args(TaskOptions, args), config)))


def test_worker_gets_the_same_options_back():
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    args = parser.parse_args(["seg", "--sync-bn", "--epochs", "3", "--lr", "0.01", "--limit-train", "64",
                              "--out", "o", "--no-progress", "--grad-accum", "2", "--check-sync-every", "7"])
    task, config = _worker_run(args)
    assert task.name == "seg" and task.options.limit_train == 64
    assert config.sync_batchnorm and config.epochs == 3 and config.lr == 0.01 and config.grad_accum == 2
    assert config.progress is False and config.out_dir == "o" and config.eval_per_epoch
    assert config.check_sync_every == 7 and FitConfig().check_sync_every == 100
    assert config == build_run(args)[1]


@pytest.mark.parametrize("words", [["train", "--help"], ["predict", "--help"]])
def test_help_is_a_manual(capsys, words):
    with pytest.raises(SystemExit):
        main(words)
    out = capsys.readouterr().out
    assert "paratrain predict runs/text-cls" in out


def test_fast_default_switches_reach_the_worker():
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    _, default = build_run(parser.parse_args(["digits"]))
    assert (default.fused_optimizer, default.tf32, default.compile) == (True, True, False)
    _, config = _worker_run(parser.parse_args(["digits", "--no-fused-optimizer", "--no-tf32", "--compile"]))
    assert (config.fused_optimizer, config.tf32, config.compile) == (False, False, True)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--strategy", "dpp"], "unknown strategy 'dpp'; choose one of: auto, single, dp, ddp, fsdp, deepspeed"),
        (["--strategy", "dp"], "strategy 'dp' runs one process over all GPUs, but this job has 2 processes; "
                               "use strategy='ddp'"),
        (["--grad-compression", "zip"], "grad_compression 'zip' is not one of: none, bf16, fp16, powersgd"),
    ],
)
def test_what_the_workers_could_not_run_is_refused_by_the_launcher_before_any_starts(tmp_path, flags, message):
    import subprocess

    from tests.support import clean_env, paratrain_cmd

    scratch = tmp_path / "tmp"  # where the launcher would put the workers' logs and stack dumps
    scratch.mkdir()
    out = tmp_path / "run"
    done = subprocess.run(paratrain_cmd("train", "digits", "--nproc-per-node", "2", "--out", str(out), *flags),
                          env=clean_env(TMPDIR=str(scratch)), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr  # once, by the launcher
    assert done.stderr.startswith("paratrain train: error: ") and message in done.stderr
    # No worker ran: none wrote a rank-tagged line, a run directory, a log or a stack dump.
    assert re.search(r"rank ?\d", done.stderr) is None
    assert not out.exists() and list(scratch.iterdir()) == []


@pytest.mark.parametrize("flags, message", [
    (["--max-restarts", "x"], "--max-restarts 'x' is not an integer"),
    (["--master-port", "99999"], "--master-port 99999 is not a TCP port (1-65535)"),
    (["--log-dir", "/proc/no/such"], "--log-dir /proc/no/such cannot be created (No such file or directory): give a folder you can write"),
])
def test_a_refused_process_flag_creates_no_out_dir(capsys, tmp_path, flags, message):
    # Before: --out was locked (created) before the launcher's flags were checked, and left empty.
    code, _, err = _run(capsys, "digits", "--nproc-per-node", "2", "--out", str(tmp_path / "run"), *flags)
    assert code == 2 and err == f"paratrain train: error: {message}\n"
    assert not (tmp_path / "run").exists()


def test_a_refused_batch_size_change_says_only_its_refusal(capsys, tmp_path):
    # Before: "the run's global batch of 16 samples is kept …, the same trajectory", then the refusal.
    import warnings

    small = ["--limit-train", "64", "--limit-eval", "16", "--out", str(tmp_path / "run")]
    assert _run(capsys, "digits", "--max-steps", "1", *small)[0] == 0
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        code, _, err = _run(capsys, "digits", "--max-steps", "2", "--batch-size", "4", *small)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"paratrain train: error: the run in {tmp_path / 'run'} was trained with --batch-size 16")
    assert not [str(w.message) for w in said if "trajectory" in str(w.message) or "is kept" in str(w.message)]


def test_a_path_too_long_is_one_line(capsys, tmp_path):
    # Before: OSError "File name too long" as a traceback from Path.exists.
    deep = tmp_path / "/".join(["d" * 200] * 25)
    code, _, err = _run(capsys, "digits", "--out", str(deep))
    assert code == 2 and err.count("\n") == 1 and "(File name too long); pick a shorter or another directory" in err


def test_fresh_on_a_mount_point_is_refused_and_moves_nothing(capsys, tmp_path):
    # Before: OSError "Invalid cross-device link" as a traceback, and an empty OUT.old-<time> left behind.
    import subprocess

    mount = tmp_path / "mnt"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4M", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        (mount / "task.json").write_text(json.dumps({"task": "digits", "options": {}}))
        code, _, err = _run(capsys, "digits", "--out", str(mount), "--fresh")
        assert code == 2 and err == (f"paratrain train: error: --fresh cannot move the run in {mount} aside: {mount} is a "
                                     f"mount point, and its neighbour mnt.old-… would be on another file system (a copy, "
                                     "not a move); move the old run yourself, or give a folder inside it as --out\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["mnt"] and [p.name for p in mount.iterdir()] == ["task.json"]
    finally:
        subprocess.run(["umount", str(mount)], check=True)
