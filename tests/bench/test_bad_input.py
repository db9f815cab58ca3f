"""Bad ``paratrain bench`` input: one line naming the problem, a non-zero exit, nothing written."""

from __future__ import annotations

import dataclasses

import pytest

from paratrain.bench.machine import detect_machine
from paratrain.bench.methods import METHODS
from paratrain.bench.settings import check_nproc
from paratrain.cli.main import main
from paratrain.errors import ConfigError


@pytest.mark.parametrize(
    "words, message",
    [
        (["--methods", "single,warp-drive"], "unknown method warp-drive; valid methods: single, dp, ddp"),
        (["--task", "no-such-task"], "unknown task 'no-such-task'; built-in tasks: text-cls"),
        (["--task", "no_such_module_xyz:TASK"], "does not import: ModuleNotFoundError"),
        (["--task", "examples.my_task:NOPE"], "examples.my_task has no attribute 'NOPE'"),
        (["--task", "os.path:sep"], "is not a task: str lacks datasets(), collate(), build_model(), forward(), evaluator()"),
        (["--task", "collections:OrderedDict"], "class OrderedDict is not a task, it lacks datasets()"),
        (["--task", "examples/no_such_file.py:TASK"], "no file"),
        (["--batch-size", "7"], "must be a positive multiple of --nproc-per-node 2"),
        (["--steps", "1"], "--steps must be at least 2"),
        (["--timeout", "soon"], "is not a positive number of seconds"),
        (["--methods", "single", "--timeout", "60,ddp=5"], "'ddp' is not one of the methods run"),
        (["--nproc-per-node", "0"], "--nproc-per-node must be at least 1"),
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["--min-time", "-1"], "--min-time must be 0 or more seconds"),
        (["--methods", "single,ddp", "--baseline", "accelerate"], "--baseline 'accelerate' is not among the methods run (single, ddp)"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(words, message, tmp_path, capsys, monkeypatch):
    from tests.support import ROOT

    monkeypatch.chdir(ROOT)
    out = tmp_path / "out"
    assert main(["bench", *words, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_unwritable_out_is_refused(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["bench", "--methods", "single", "--out", str(blocker / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("paratrain bench: error: cannot write to --out") and len(err.splitlines()) == 1


def test_more_processes_than_gpus_is_refused():
    two_gpus = dataclasses.replace(detect_machine(), gpu_count=2, gpu_model="test GPU")
    with pytest.raises(ConfigError, match=r"--nproc-per-node 4 is more than this machine's 2 GPUs, and .*ddp.* use one GPU"):
        check_nproc(4, two_gpus, list(METHODS.values()))
    check_nproc(2, two_gpus, list(METHODS.values()))
