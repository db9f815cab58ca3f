"""The command line starts without torch: help, ``check`` and refused ``run``/``doctor`` flags
answer before torch is imported (``train``'s without FSDP's modules); ``import paratrain``
imports a name's module when it is used."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import EXAMPLES, ROOT, clean_env

PROBE = """
import sys
from paratrain.cli.main import main
code = main(sys.argv[1:])
print("exit", code, "torch imported" if "torch" in sys.modules else "torch not imported")
"""


def _probe(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=120)


def test_help_check_and_refused_flags_answer_without_importing_torch():
    allreduce = str(EXAMPLES / "allreduce.py")
    for argv, code, stderr in [
        (["check", allreduce], 0, ""),
        (["run", "--nproc-per-node", "0", allreduce], 2, "paratrain run: error: --nproc-per-node 0 must be at least 1"),
        (["run", "--stall-timeout", "-3", allreduce], 2, "--stall-timeout -3 must be a finite number of seconds, or 0"),
        (["doctor", "--nproc-per-node", "x"], 2, "paratrain doctor: error: --nproc-per-node 'x' is neither a number nor 'auto'"),
    ]:
        done = _probe(*argv)
        assert done.stdout.splitlines()[-1] == f"exit {code} torch not imported", (argv, done.stdout, done.stderr)
        assert stderr in done.stderr
    # train checks its options with the task and the fit config (torch), but not with FSDP's modules (~0.7 s)
    done = subprocess.run([sys.executable, "-c", PROBE.replace('"torch" in', '"torch.distributed.fsdp" in'), "train", "digits",
                           "--stall-timeout", "-5"], cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines()[-1] == "exit 2 torch not imported", done.stderr
    done = subprocess.run([sys.executable, "-m", "paratrain", "--help"], cwd=ROOT, env=clean_env(), capture_output=True, text=True)
    assert done.returncode == 0 and "paratrain run [flags] script.py" in done.stdout


def test_the_package_imports_each_name_where_it_lives_on_first_use():
    code = ("import sys, paratrain as pt; assert 'torch' not in sys.modules; "
            "from paratrain.runtime.runtime import Runtime; from paratrain.comm import all_reduce; "
            "assert pt.Runtime is Runtime and pt.all_reduce is all_reduce and pt.comm.all_reduce is all_reduce; "
            "assert pt.tasks.TaskOptions().to_dict()['data'] is None; "
            "assert all(hasattr(pt, name) for name in pt.__all__) and set(pt.__all__) <= set(dir(pt)); "
            "print(sorted(set(dir(pt)) & {'fit', 'spawn', 'ConfigError'}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "['ConfigError', 'fit', 'spawn']", done.stderr
    done = subprocess.run([sys.executable, "-c", "import paratrain; paratrain.no_such_name"], cwd=ROOT, env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert "AttributeError: module 'paratrain' has no attribute 'no_such_name'" in done.stderr


def test_a_command_module_that_does_not_import_is_reported_not_left_out_of_the_help(monkeypatch):
    """A missing command module is a broken install: building the parser (``paratrain --help``, any
    command) fails naming it, instead of a help text that silently lacks the command."""
    from paratrain.cli import main as cli_main

    monkeypatch.setattr(cli_main, "COMMAND_MODULES", ("check", "no_such"))
    with pytest.raises(ModuleNotFoundError, match="paratrain.cli.no_such_cmd"):
        cli_main.build_parser()
