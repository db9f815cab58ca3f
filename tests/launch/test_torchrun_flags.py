"""Every flag of the installed torchrun is a flag of ``paratrain run``, and reaches torch's launcher
with its value. Read from torch's own parser, so a flag torch adds fails here. No processes."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from torch.distributed import run as torchrun

from paratrain.errors import ConfigError
from paratrain.launch.torchrun import run_id_for, torchrun_argv
from paratrain.launch.torchrun_flags import PASSED_THROUGH
from tests.launch.test_config import ALLREDUCE, config, parse
from tests.support import ROOT, clean_env


def _torch_options() -> list[argparse.Action]:
    return [a for a in torchrun.get_args_parser()._actions if a.option_strings and a.dest != "help"]  # no public list


def _run_options() -> dict[str, argparse.Action]:
    from paratrain.cli import run_cmd

    parser = run_cmd.register(argparse.ArgumentParser().add_subparsers())
    return {flag: action for action in parser._actions for flag in action.option_strings}


def test_every_torchrun_option_string_is_a_paratrain_run_option_with_the_same_choices():
    ours = _run_options()
    missing = [flag for action in _torch_options() for flag in action.option_strings if flag not in ours]
    assert missing == []
    for action in _torch_options():
        if action.choices:
            spec = next((s for s in PASSED_THROUGH if action.option_strings[0] in s.names), None)
            assert spec is not None and set(spec.choices) == set(action.choices), action.option_strings


def _sample(action: argparse.Action) -> list[str]:
    """A value torch accepts for the flag, as command-line words."""
    if action.nargs == 0:
        return []
    if action.choices:
        return [list(action.choices)[-1]]
    samples = {int: "7", float: "0.5"}
    return [samples.get(action.type, f"x-{action.dest}")]


# Flags that paratrain reads itself: the sample each gets, and what torch's launcher then sees.
# (Every other flag is handed over as given.)
OWN_SAMPLES = {
    "nnodes": (["1"], "1:1"),
    "rdzv_endpoint": (["localhost:29411"], "localhost:29411"),  # with --rdzv-backend c10d (TARGET_FLAGS)
    "nproc_per_node": (["2"], "2"),
    "rdzv_backend": (["c10d"], "c10d"),
    "rdzv_id": (["job7"], "job7"),
    "rdzv_conf": (["read_timeout=9"], "timeout=600,read_timeout=9"),
    "max_restarts": (["2"], 2),
    "module": ([], True),
    "no_python": ([], True),
    "log_dir": (["/tmp/x-logs"], "/tmp/x-logs"),
    "redirects": (["1"], "1"),
    "tee": (["2"], "2"),
    "local_ranks_filter": (["0"], "0"),
    "node_rank": (["0"], 0),
    "master_addr": (["127.0.0.1"], "127.0.0.1"),
    "master_port": (["29499"], 29499),
    "local_addr": (["127.0.0.2"], "127.0.0.2"),
}
# The one flag whose meaning paratrain gives with its own machinery: --standalone is paratrain's
# one-node rendezvous (a loopback store on a free port, see LaunchConfig.standalone).
OWN_MEANING = {"standalone"}
TARGETS = {"module": "tests.launch.probe", "no_python": "true"}
EXTRA_FLAGS = {"rdzv_endpoint": ["--rdzv-backend", "c10d"]}


@pytest.mark.parametrize("action", _torch_options(), ids=lambda a: a.option_strings[-1])
def test_each_torchrun_flag_reaches_torch_with_its_value(action, monkeypatch):
    monkeypatch.chdir(ROOT)
    if action.dest in OWN_MEANING:
        cfg = config(action.option_strings[0], "--nproc-per-node", "2", ALLREDUCE)
        assert cfg.standalone and cfg.loopback_only and cfg.master_port is None
        return
    words, expected = OWN_SAMPLES.get(action.dest, (_sample(action), None))
    target = TARGETS.get(action.dest, ALLREDUCE)
    for spelling in action.option_strings:  # dashes and underscores alike
        cfg = config(*EXTRA_FLAGS.get(action.dest, []), *([f"{spelling}={words[0]}"] if words else [spelling]), target)
        cfg.validate() if action.dest not in ("master_addr", "master_port", "node_rank", "log_dir") else None
        seen = getattr(torchrun.parse_args(torchrun_argv(cfg, cfg.master_port or 1, run_id_for(cfg))), action.dest)
        if expected is None:
            expected_value = action.type(words[0]) if words and action.type not in (None, str) else (words[0] if words else True)
            if action.dest.startswith("duplicate_"):
                expected_value = [words[0]]
        else:
            expected_value = expected
        assert seen == expected_value, (spelling, seen)


def test_underscore_and_dash_spellings_of_paratrain_flags_agree():
    assert config("--rdzv_conf", "a=1", ALLREDUCE).rdzv_conf == config("--rdzv-conf", "a=1", ALLREDUCE).rdzv_conf == "a=1"
    assert config("--log_dir", "/tmp/l", ALLREDUCE).log_dir == "/tmp/l"
    assert parse("--use_env", ALLREDUCE).use_env and parse("--use-env", ALLREDUCE).use_env


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--monitor-interval", "soon", ALLREDUCE], "--monitor-interval 'soon' is not a number"),
        (["--monitor-interval", "0", ALLREDUCE], "--monitor-interval 0 must be a positive"),
        (["--shutdown-timeout", "1.5", ALLREDUCE], "--shutdown-timeout '1.5' is not an integer"),
        (["--start-method", "thread", ALLREDUCE], "--start-method 'thread' is not one of spawn, fork, forkserver"),
        (["--numa-binding", "all", ALLREDUCE], "--numa-binding 'all' is not one of node"),
    ],
)
def test_passed_through_values_are_checked_before_anything_starts(argv, message):
    with pytest.raises(ConfigError, match=message):
        config(*argv)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--standalone", "--nnodes", "2", ALLREDUCE], "--standalone is one node, but --nnodes 2:2"),
        (["--no-python", "-m", "tests.launch.probe"], "give one of them"),
        (["--no-python", "no-such-program-here"], "not an executable file or a command on PATH"),
        (["-r", "4", ALLREDUCE], "-r/--redirects '4' is not a stream choice"),
        (["--tee", "0:3,x", ALLREDUCE], "-t/--tee '0:3,x' is not a stream choice"),
        (["--output", "prefixed", "-t", "3", ALLREDUCE], "drop -r/--redirects and -t/--tee"),
        (["--rdzv-conf", "join_timeout", ALLREDUCE], "--rdzv-conf 'join_timeout' is not KEY=VALUE"),
        (["--exit-codes", "shell", ALLREDUCE], "--exit-codes 'shell' is not one of paratrain, torchrun"),
    ],
)
def test_refused_combinations(argv, message):
    with pytest.raises(ConfigError, match=message) as caught:
        config(*argv).validate()
    assert "\n" not in str(caught.value)


def test_a_static_rendezvous_meets_at_the_endpoint_when_one_is_given_as_in_torchrun():
    cfg = config("--rdzv-endpoint", "127.0.0.1:29433", "--nnodes", "2", "--master-addr", "10.9.9.9", ALLREDUCE)
    args = torchrun.parse_args(torchrun_argv(cfg, cfg.master_port, run_id_for(cfg)))
    assert torchrun.get_rdzv_endpoint(args) == "127.0.0.1:29433" and args.rdzv_backend == "static"


def test_standalone_ignores_the_rendezvous_flags_as_torchrun_does():
    cfg = config("--standalone", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--rdzv-id", "x",
                 "--master-port", "29501", ALLREDUCE)
    assert (cfg.rdzv_backend, cfg.rdzv_endpoint, cfg.rdzv_id, cfg.master_port) == ("static", None, None, None)
    assert config(ALLREDUCE, environ={"PET_STANDALONE": "1"}).standalone


def test_the_users_streams_replace_the_tagged_console():
    cfg = config("--nproc-per-node", "2", "-r", "3", "--log-dir", "/tmp/l", ALLREDUCE)
    assert not cfg.prefixed_output
    args = torchrun.parse_args(torchrun_argv(cfg, 1, "r"))
    assert (args.redirects, args.tee, args.log_dir) == ("3", "0", "/tmp/l")
    tagged = torchrun.parse_args(torchrun_argv(config("--nproc-per-node", "2", ALLREDUCE), 1, "r", log_dir="/tmp/s"))
    assert (tagged.redirects, tagged.tee) == ("3", "3")


def test_a_node_range_restart_default_is_flagged_for_the_first_line():
    ranged = config("--nnodes", "1:2", "--rdzv-endpoint", "h:29400", ALLREDUCE)
    assert (ranged.max_restarts, ranged.restarts_by_default) == (3, True)
    given = config("--nnodes", "1:2", "--rdzv-endpoint", "h:29400", "--max-restarts", "0", ALLREDUCE)
    assert (given.max_restarts, given.restarts_by_default) == (0, False)


def test_help_lists_every_torchrun_flag():
    done = subprocess.run([sys.executable, "-m", "paratrain", "run", "--help"], cwd=ROOT, env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    flat = " ".join(done.stdout.split())
    missing = [flag for action in _torch_options() for flag in action.option_strings if flag not in flat]
    assert missing == []
    assert "default 0; with --nnodes MIN:MAX 3, where torchrun's is 0" in flat
