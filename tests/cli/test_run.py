"""`paratrain run` end to end: real CLI processes, 2 gloo workers each, on this machine."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from paratrain.cli.main import main
from tests.launch.probe import listening_sockets
from tests.launch.processes import run_all
from tests.support import EXAMPLES, ROOT, clean_env, paratrain_cmd

ALLREDUCE = str(EXAMPLES / "allreduce.py")
LEGACY = str(EXAMPLES / "legacy_local_rank.py")


def test_two_jobs_at_once_both_all_reduce_correctly():
    jobs = run_all([paratrain_cmd("run", "--nproc-per-node", "2", ALLREDUCE)] * 2)
    ports = []
    for job in jobs:
        assert job.returncode == 0, job.stderr
        assert "rank 0/2: all_reduce(rank + 1) = 3" in job.stdout and "rank 1/2: all_reduce(rank + 1) = 3" in job.stdout
        found = re.search(
            r"all_reduce OK: sum 3 over 2 processes, backend gloo, rendezvous 127\.0\.0\.1:(\d+)", job.stdout
        )
        assert found, job.stdout
        ports.append(found.group(1))
        assert "Traceback" not in job.stderr
    assert ports[0] != ports[1]  # each job took its own free port


def test_legacy_script_runs_unchanged_with_the_flag_and_fails_clearly_without(tmp_path):
    with_flag, without = run_all(
        [
            paratrain_cmd("run", "--nproc-per-node", "2", "--legacy-local-rank", LEGACY, "--tag", "seed000"),
            paratrain_cmd("run", "--nproc-per-node", "2", LEGACY, "--tag", "seed000"),
        ],
        env={**clean_env(), "TMPDIR": str(tmp_path)},  # where each run keeps its scratch copy of the ranks' output
    )
    assert with_flag.returncode == 0, with_flag.stderr
    assert "[seed000] rank 0/2: --local_rank=0, all_reduce = 3" in with_flag.stdout
    assert "[seed000] rank 1/2: --local_rank=1, all_reduce = 3" in with_flag.stdout

    assert without.returncode == 2  # the worker's exit code (argparse's)
    assert "the following arguments are required: --local_rank" in without.stderr  # the worker's own message
    last = without.stderr_lines[-1]
    assert re.fullmatch(
        r"paratrain run: error: rank [01] \(local rank [01], host \S+, pid \d+\) failed first: it exited with code 2"
        r"(; after it, rank [01] exited with code 2)?(; rank [01] stopped by the launcher)?; "
        r"its output is in \S+/stderr\.log; the script parses --local_rank itself: add --legacy-local-rank",
        last,
    ), last
    assert "ChildFailedError" not in without.stderr and "Traceback" not in without.stderr
    # The run that succeeded removed its copy of the output; the failed one keeps the log it names.
    log = Path(re.search(r"its output is in (\S+/stderr\.log)", last).group(1))
    assert log.is_file() and [p.name for p in tmp_path.iterdir()] == [log.relative_to(tmp_path).parts[0]]


def test_module_in_process_with_log_dir(tmp_path, monkeypatch, capfd):
    """The path `paratrain train` takes: main(["run", ..., "-m", module]) in this process."""
    monkeypatch.chdir(ROOT)  # workers import tests.launch.probe from the working directory, like python -m
    # The launcher is this pytest worker: whatever an earlier test in it left listening is not this run's.
    listening_before = set(listening_sockets(os.getpid()))
    code = main(
        [
            "run",
            "--nproc-per-node",
            "2",
            "--threads-per-proc",
            "1",
            "--backend",
            "gloo",
            "--log-dir",
            str(tmp_path),
            "-m",
            "tests.launch.probe",
            "--flag",
            "value",
        ]
    )
    console = capfd.readouterr()
    assert code == 0, console.err
    logs = sorted(tmp_path.glob("*/attempt_0/*/stdout.log"))  # <run id: a UUID on one node, as torchrun>_<random>
    assert [log.parent.name for log in logs] == ["0", "1"]
    reports = [json.loads(log.read_text().split("PROBE ", 1)[1]) for log in logs]
    for rank, report in enumerate(reports):
        assert (report["rank"], report["world_size"], report["sum"], report["backend"]) == (rank, 2, 3.0, "gloo")
        assert report["argv"] == ["--flag", "value"]
        env = report["env"]
        assert (env["OMP_NUM_THREADS"], env["PARATRAIN_BACKEND"], env["LOCAL_RANK"]) == ("1", "gloo", str(rank))
        assert env["GLOO_SOCKET_IFNAME"] == "lo" and env["MASTER_ADDR"] == "127.0.0.1"
        # Nothing listens beyond loopback: neither the rendezvous store (the launcher's) nor gloo's sockets.
        launcher_opened = set(report["listening"]["launcher"]) - listening_before
        assert launcher_opened and {socket.split()[0] for socket in launcher_opened} == {"127.0.0.1"}, report
        assert {socket.split()[0] for socket in report["listening"]["worker"]} == {"127.0.0.1"}, report
    assert "[rank0]:PROBE" in console.out and "[rank1]:PROBE" in console.out  # tee: still on the console, tagged
    assert f"per-rank logs: {tmp_path}" in console.err
