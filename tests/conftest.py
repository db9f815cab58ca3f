"""Shared fixtures: every test must leave the environment and torch.distributed as it found them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import WATCHED_PREFIXES as _WATCHED_PREFIXES


#: Test files that must not run at the same time as each other under pytest-xdist: the ones
#: sharing the session's SLURM cluster. (The network-namespace tests need no group: each
#: makes its own namespaces, and their veth ends never hold an address in the root namespace.)
SHARED_GROUPS = {"slurm": ("tests/env/test_slurm.py", "tests/env/test_mpi.py")}
_GROUP_OF_FILE = {path: group for group, paths in SHARED_GROUPS.items() for path in paths}


#: The longest files (seconds of test time per file in a full run on two cores, `--durations=0`), handed to
#: the workers first so that the run does not end with one worker alone on a long file while the other idles.
#: The rest follow in collection order. (pyproject's ``--no-loadscope-reorder`` keeps this order;
#: xdist would otherwise sort the groups by their number of tests.)
LONGEST_FIRST = (
    "tests/strategy/test_ft_ddp.py",  # ~550 (3 groups of 1 with four starts, 2 groups of 2, two nodes, two IPv6 nodes of groups of 2, ft-fsdp, a late rank)
    "tests/loop/test_elastic_trajectory.py",  # ~130 (6 jobs)
    "tests/diagnostics/watchdog/test_stall_positions.py",  # 130
    "tests/loop/test_run_directory.py",  # 121
    "tests/launch/test_torchrun_compat.py",  # 117
    "tests/bench/test_bench.py",  # 106
    "tests/migrate/test_examples.py",  # 91
    "tests/loop/test_rerun_soak.py",  # 84
    "tests/env/test_slurm.py",  # 84 with test_mpi.py (one group)
    "tests/bench/test_from_any_folder.py",  # 80
    "tests/strategy/test_hsdp.py",  # ~90 with the two-namespace parity and auto's two launchers
    "tests/diagnostics/test_stragglers.py",  # ~75 with the saturated link
    "tests/cli/test_train.py",  # 71
    "tests/strategy/test_grad_compression_multi.py",  # ~16 (one job)
    "tests/launch/test_elastic_rejoin.py",  # 66
    "tests/loop/test_nonfinite.py",  # ~20
    "tests/diagnostics/test_auto_resume.py",  # 57
    "tests/launch/test_warm_worker.py",  # ~53 (a warm job with a restart, a cold one, paratrain train warm)
    "tests/strategy/test_setup_guard.py",  # ~13 (one job)
    "tests/diagnostics/test_hostile_inputs.py",  # 54
    "tests/diagnostics/test_two_hosts.py",  # 52
    "tests/bench/test_tune.py",  # 50
    "tests/strategy/test_grad_compression_resume.py",  # 44
    "tests/test_readme_example.py",  # 43
    "tests/benchmarks/test_gpu_proof.py",  # 39
    "tests/test_comm.py",  # 38
    "tests/goodput/test_goodput_run.py",  # 37
    "tests/checkpoint/test_deepspeed.py",  # 36
    "tests/loop/test_fit_own_model.py",  # 34
    "tests/cli/test_predict.py",  # 32
    "tests/loop/test_fit_seed.py",  # 32
    "tests/launch/test_warm_pool.py",  # ~18 to 30 (one warm job, four attempts)
    "tests/checkpoint/test_async_shards.py",  # ~40
    "tests/diagnostics/test_preemption.py",  # 28
    "tests/strategy/test_fast_defaults_multi.py",  # 27
    "tests/checkpoint/test_elastic_own_loop.py",  # 26
    "tests/trackers/test_trackers.py",  # 26
)


def _slow_tests() -> frozenset[str]:
    """The node ids in ``tests/slow_tests.txt`` (written by ``tools/slow_tests.py`` from a full run)."""
    listed = Path(__file__).with_name("slow_tests.txt")
    if not listed.is_file():
        return frozenset()
    lines = listed.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the marks into scheduling groups
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``-n``, ``--dist loadgroup``): each test file runs on one worker, so
    its module fixtures are built once, and the files of a :data:`SHARED_GROUPS` entry share one.
    The files of :data:`LONGEST_FIRST` come first (a stable sort keeps each file's own order).
    Tests listed in ``tests/slow_tests.txt``, and every test of a :data:`LONGEST_FIRST` file, are
    marked ``slow``: ``pytest -m "not slow"`` is the quick loop."""
    root = config.rootpath
    paths = {id(item): item.path.relative_to(root).as_posix() for item in items}
    slow = _slow_tests()
    for item in items:
        path = paths[id(item)]
        item.add_marker(pytest.mark.xdist_group(_GROUP_OF_FILE.get(path, path)))
        if item.nodeid in slow or path in LONGEST_FIRST:
            item.add_marker(pytest.mark.slow)
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    for group in SHARED_GROUPS.values():  # a group's files stay together, where its first one is
        for path in group[1:]:
            rank.setdefault(path, rank.get(group[0], len(LONGEST_FIRST)))
    items.sort(key=lambda item: rank.get(paths[id(item)], len(LONGEST_FIRST)))


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per two cores (most tests start two or three processes), at least two."""
    return max(2, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2) // 2)


def _watched_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(_WATCHED_PREFIXES)}


#: What ``paratrain``'s command line sets in its own process on purpose (cli/main.py). A test that
#: calls ``main()`` in-process sets it in the test worker; it is put back after every test, or the
#: launchers of later tests in that worker would inherit it (and torch's and paratrain's alike).
CLI_SETS = ("TORCH_CPP_LOG_LEVEL",)


@pytest.fixture(autouse=True)
def no_leaks():
    """Fail a test that leaves distributed env vars or an initialised process group behind."""
    import torch.distributed as dist

    before = _watched_env()
    cli_before = {key: os.environ.get(key) for key in CLI_SETS}
    yield
    for key, value in cli_before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    leaked_group = dist.is_available() and dist.is_initialized()
    if leaked_group:
        dist.destroy_process_group()
    after = _watched_env()
    for key in set(after) - set(before):
        del os.environ[key]
    for key, value in before.items():
        os.environ[key] = value
    assert not leaked_group, "test left a torch.distributed process group initialised"
    assert after == before, f"test leaked environment variables: {sorted(set(after.items()) ^ set(before.items()))}"


@pytest.fixture
def cli_env():
    """Environment for running the real CLI in a subprocess (see tests.support)."""
    from tests.support import clean_env

    return clean_env()


@pytest.fixture
def two_hosts():
    """(namespace, interface, address) for node 0 and node 1 — two network namespaces joined by a
    veth pair (tests/netns.py); always deleted afterwards."""
    yield from _two_hosts(ipv6=False)


@pytest.fixture
def two_ipv6_hosts():
    """As ``two_hosts``, the pair carrying IPv6 addresses only."""
    yield from _two_hosts(ipv6=True)


def _two_hosts(ipv6: bool):
    from tests import netns

    try:
        with netns.two_hosts(ipv6=ipv6) as hosts:
            yield [(h.namespace, h.interface, h.address) for h in hosts]
    except netns.NetnsUnavailable as exc:
        pytest.skip(f"two-node test: {exc}")


#: A test not marked ``slow`` that took this long is named at the end of the run.
UNMARKED_SLOW_S = 3.0


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Name the tests that ran long without the ``slow`` mark: the quick loop should not hold them."""
    long = []
    for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", []):
        if report.when == "call" and report.duration >= UNMARKED_SLOW_S and "slow" not in report.keywords:
            long.append((report.duration, report.nodeid))
    if long:
        terminalreporter.write_line(
            f"{len(long)} test(s) not marked slow took >= {UNMARKED_SLOW_S:g} s (refresh tests/slow_tests.txt with "
            "tools/slow_tests.py): " + ", ".join(f"{nodeid} {seconds:.1f}s" for seconds, nodeid in sorted(long)[-5:]))
