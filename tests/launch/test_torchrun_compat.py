"""``paratrain run`` is torchrun with one word changed: each case runs the same command under
``torchrun`` (``python -m torch.distributed.run``, or ``torch.distributed.launch``) and under
``paratrain run``, and compares the exit code, the environment and arguments each rank sees,
what the ranks computed, and the files written. Every difference must be one of
:data:`INTENDED` (the table in docs/torchrun-compatibility.md), expected by that case, and
exactly as described there; everything else must be equal.

The cases re-create the shapes of torch's own launcher tests (test/distributed/launcher/
test_run.py: sizes, both spellings, c10d and static rendezvous, --standalone, restarts,
-m, --no-python, --run-path, logs and streams, PET_* variables, elastic ranges) and every
``torchrun --help`` flag that changes what a worker sees. Two cases (four launchers) run at a
time; the whole file takes about a minute on two idle cores (each launcher imports torch).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from paratrain.env.cpu_binding import core_order
from tests.launch.processes import HANG_GUARD_S
from tests.support import ROOT, clean_env, free_port

WORKER = Path(__file__).with_name("compat_worker.py")
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
# paratrain through its console script where installed, as users start it: unlike `python -m`, its
# import path lacks the working directory (so `-m pkg.work` is checked the way users meet it).
_CONSOLE_SCRIPT = Path(sys.executable).with_name("paratrain")
LAUNCHERS = {
    "torchrun": [sys.executable, "-m", "torch.distributed.run"],
    "launch": [sys.executable, "-m", "torch.distributed.launch"],
    "paratrain": [str(_CONSOLE_SCRIPT), "run"] if _CONSOLE_SCRIPT.is_file() else [sys.executable, "-m", "paratrain", "run"],
}


@dataclass(frozen=True)
class Intended:
    """A deliberate difference: what each launcher gives, why, and how to get torchrun's."""

    torchrun: str
    paratrain: str
    why: str
    torchrun_way: str

    def holds(self, torch_value, paratrain_value) -> bool:
        return (str(torch_value), str(paratrain_value)) == (self.torchrun, self.paratrain)


_ONE_NODE_THREADS = str(max(1, CORES // 2))
INTENDED = {
    "MASTER_ADDR": Intended(
        "localhost", "127.0.0.1", "one node: the rendezvous store and gloo listen on loopback only, on a free port",
        "--master-addr localhost --master-port PORT"),
    "MASTER_ADDR (several nodes)": Intended(
        socket.getfqdn(), "127.0.0.1", "several nodes (a node range too): the address of the interface that routes "
        "to node 0 (--local-addr), where torchrun announces the host name, which may resolve elsewhere",
        "--local-addr HOST"),
    "GLOO_SOCKET_IFNAME": Intended(
        "None", "lo", "gloo's sockets on the interface that reaches the master (lo on one node); gloo otherwise "
        "resolves the host name, often to 127.0.0.1, and another node gets 'Connection refused'",
        "export it yourself (yours is kept)"),
    "NCCL_SOCKET_IFNAME": Intended("None", "lo", "the same for NCCL", "export it yourself (yours is kept)"),
    "PARATRAIN_BACKEND": Intended("None", "auto", "--backend for pt.Runtime() in the workers", "ignored by other code"),
    "PARATRAIN_LAUNCH_TIME": Intended(
        "None", "<time>", "when the launcher started: the goodput ledger counts start-up from there",
        "ignored by other code"),
    "PARATRAIN_LAUNCHER_PID": Intended(
        "None", "<pid>", "a worker ends when its launcher is SIGKILLed (PR_SET_PDEATHSIG from its first line of Python)",
        "ignored by other code"),
    "PARATRAIN_STACKS_DIR": Intended(
        "None", "<dir>", "a worker the launcher stops writes its stacks there (faulthandler), so the failure line "
        "names the rank that was not in the collective", "ignored by other code"),
    "PYTHONPATH": Intended(
        "None", "<worker_site>:<yours>", "paratrain's sitecustomize first (it arms that stack dump, then runs the "
        "next sitecustomize on the path); your entries follow unchanged", "ignored by other code"),
    "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": Intended(
        "None", "[rank${rank}]:", "2+ processes: whole console lines tagged with the rank; the variable tells a "
        "worker its lines are tagged already", "--output raw (or -r/-t)"),
    # Checked through omp_threads(): the values depend on the cores and the workers per node.
    "OMP_NUM_THREADS": Intended(
        "unset with 1 worker, 1 with 2+", "cores / local workers", "one worker uses the cores it has; several "
        "share them", "export OMP_NUM_THREADS"),
    # Checked through cpu_cores(): the value depends on the CPUs and the workers per node.
    "PARATRAIN_CPU_CORES": Intended(
        "None", "an equal share of the CPUs per local worker", "2+ CPU workers: pt.Runtime binds each one's "
        "compute threads to its share (gloo's stay free), so the scheduler stops moving them between CPUs",
        "--cpu-binding none"),
    "TORCH_CPP_LOG_LEVEL": Intended(
        "None", "ERROR", "torch's C++ warnings stay out of the lines users read; paratrain's one-line errors say "
        "what failed", "--verbose, or export it yourself (yours is kept)"),
    "TORCHELASTIC_USE_AGENT_STORE": Intended(
        "True", "False", "several nodes through c10d: a fresh store every rendezvous round, hosted by rank 0, so "
        "a node that leaves and comes back can rejoin (torch's shared store publishes its address in the first "
        "round only: pytorch/pytorch#147064)", "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=0"),
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": Intended(
        "None", "1", "the switch behind TORCHELASTIC_USE_AGENT_STORE=False", "export it yourself (yours is kept)"),
    "TORCHELASTIC_MAX_RESTARTS": Intended(
        "0", "3", "--nnodes MIN:MAX without --max-restarts: a node range restarts up to 3 times, so a lost node "
        "can be replaced (the first line says so)", "--max-restarts 0"),
    "exit code (worker exits 3)": Intended(
        "1", "3", "the failed worker's own code reaches SLURM and shell scripts", "--exit-codes torchrun"),
    "exit code (SIGTERM to the launcher)": Intended(
        "1", "143", "128+15 as a shell reports SIGTERM (75 when the workers saved: pt.fit, rt.preemption())",
        "--exit-codes torchrun"),
    "log files": Intended(
        "error files", "error files, stdout.log, stderr.log", "--log-dir keeps every rank's output",
        "add -r 0 (or give -r/-t yourself)"),
}
# Values that differ from run to run under either launcher: compared by their shape.
NORMALIZE = {
    "MASTER_PORT": lambda v: "<port>" if v.isdigit() else v,
    "PARATRAIN_LAUNCH_TIME": lambda v: "<time>" if v else v,
    "PARATRAIN_LAUNCHER_PID": lambda v: "<pid>" if v.isdigit() else v,
    "PARATRAIN_STACKS_DIR": lambda v: "<dir>" if v else v,
    "PYTHONPATH": lambda v: os.pathsep.join(["<worker_site>" if v.split(os.pathsep)[0].endswith("worker_site") else "?",
                                             *(["<yours>"] if os.pathsep in v else [])]),
    "TORCHELASTIC_RUN_ID": lambda v: re.sub(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", "<uuid>", v),
    "TORCHELASTIC_ERROR_FILE": lambda v: re.sub(r"^.*/[^/]+/(attempt_\d+/\d+/error\.json)$", r"<log dir>/<run>/\1", v),
}
# What /bin/sh sets for itself in the --no-python case (PWD: each launcher's run has its own folder).
SHELL_VARIABLES = ("PWD", "OLDPWD", "SHLVL", "_")
ALWAYS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "PARATRAIN_BACKEND", "PARATRAIN_LAUNCH_TIME", "PARATRAIN_LAUNCHER_PID",
          "PARATRAIN_STACKS_DIR", "PYTHONPATH", "TORCH_CPP_LOG_LEVEL")
TAGGED = ("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",)


@dataclass(frozen=True)
class Case:
    """One command, run under both launchers. ``{port}`` is a free port, ``{here}`` the run's folder."""

    name: str
    argv: tuple[str, ...]
    differences: tuple[str, ...] = ALWAYS  # keys of INTENDED this case must show, and no others
    env: dict[str, str] = field(default_factory=dict)
    launcher: str = "torchrun"
    paratrain_argv: tuple[str, ...] | None = None  # when paratrain's command is not the same words
    sigterm: bool = False


TWO = ("--nproc-per-node", "2")
JOIN = {"COMPAT_JOIN": "1"}  # the rendezvous-shaped cases also join the group and all-reduce
ONE_NODE = (*ALWAYS, *TAGGED, "MASTER_ADDR")
CASES = [
    Case("--nproc_per_node=2, script arguments", ("--nproc_per_node=2", "work.py", "--lr", "0.1", "x"), ONE_NODE,
         JOIN),
    Case("--standalone", ("--standalone", *TWO, "work.py"), ONE_NODE, JOIN),
    Case("1 worker (no flags)", ("work.py",), (*ALWAYS, "MASTER_ADDR"), JOIN),
    Case("PET_NPROC_PER_NODE=2", ("work.py",), ONE_NODE, env={"PET_NPROC_PER_NODE": "2"}),
    Case("static --master-addr/--master-port", ("--nnodes", "1", *TWO, "--master-addr", "127.0.0.1",
                                                "--master-port", "{port}", "work.py"), (*ALWAYS, *TAGGED), JOIN),
    Case("c10d --rdzv-endpoint --rdzv-id", ("--nnodes", "1", *TWO, "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                            "127.0.0.1:{port}", "--rdzv-id", "job1", "work.py"), (*ALWAYS, *TAGGED),
         JOIN),
    Case("--nnodes 1:2 (node range)", ("--nnodes", "1:2", *TWO, "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                       "127.0.0.1:{port}", "--rdzv-conf", "last_call_timeout=1", "work.py"),
         (*ALWAYS, *TAGGED, "TORCHELASTIC_MAX_RESTARTS", "MASTER_ADDR (several nodes)",
          "TORCHELASTIC_USE_AGENT_STORE", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"), JOIN),
    Case("--role --monitor-interval --start-method --signals-to-handle --shutdown-timeout --virtual-local-rank",
         (*TWO, "--role", "trainer", "--monitor-interval", "0.2", "--start-method", "fork", "--signals-to-handle",
          "SIGTERM,SIGUSR1", "--shutdown-timeout", "5", "--virtual-local-rank", "work.py"), ONE_NODE),
    Case("--max-restarts 1, rank 1 fails once", (*TWO, "--max-restarts", "1", "work.py"), ONE_NODE,
         {**JOIN, "COMPAT_FAIL": "once"}),
    Case("worker exits 3", (*TWO, "work.py"), (*ONE_NODE, "exit code (worker exits 3)"), env={"COMPAT_FAIL": "3"}),
    Case("worker exits 3, --exit-codes torchrun", (*TWO, "work.py"), ONE_NODE, env={"COMPAT_FAIL": "3"},
         paratrain_argv=(*TWO, "--exit-codes", "torchrun", "work.py")),
    Case("SIGTERM to the launcher", (*TWO, "work.py"), (*ONE_NODE, "exit code (SIGTERM to the launcher)"),
         env={"COMPAT_FAIL": "wait"}, sigterm=True),
    Case("-m pkg.work from the package's folder", (*TWO, "-m", "pkg.work", "--x"), ONE_NODE),
    Case("--no-python ./work.sh", (*TWO, "--no-python", "./work.sh", "--x"), ONE_NODE),
    Case("--run-path /abs/work.py", (*TWO, "--run-path", "{here}/work.py", "--x"), ONE_NODE),
    Case("-r 3 -t 3 --log-dir --duplicate-stdout-filters --local-ranks-filter",
         (*TWO, "-r", "3", "-t", "3", "--log-dir", "logs", "--duplicate-stdout-filters", "hello",
          "--local-ranks-filter", "1", "work.py"), (*ALWAYS, "MASTER_ADDR")),
    Case("--log-dir", (*TWO, "--log-dir", "logs", "work.py"), (*ONE_NODE, "log files")),
    Case("torch.distributed.launch --use-env", ("--use-env", *TWO, "work.py"), ONE_NODE, JOIN, launcher="launch"),
    Case("torch.distributed.launch (passes --local-rank)", (*TWO, "work.py", "--x"), ONE_NODE, launcher="launch",
         paratrain_argv=(*TWO, "--legacy-local-rank=local-rank", "work.py", "--x")),
]




def _prepare(folder: Path) -> None:
    folder.mkdir(parents=True)
    shutil.copy(WORKER, folder / "work.py")
    (folder / "pkg").mkdir()
    (folder / "pkg" / "__init__.py").write_text("")
    shutil.copy(WORKER, folder / "pkg" / "work.py")
    script = folder / "work.sh"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{folder / "work.py"}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@dataclass
class Observation:
    exit_code: int
    seen: dict[str, dict]  # "rank.restart" -> what the rank saw
    files: list[str]
    stderr: str


def _run(command: list[str], folder: Path, env: dict[str, str], sigterm: bool) -> Observation:
    proc = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if sigterm:  # once both ranks reported, as SLURM's scancel would
        deadline = time.monotonic() + HANG_GUARD_S
        while len(list(folder.glob("seen.*.json"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        err += "\n[test] killed: hang"
    seen = {p.name[len("seen."):-len(".json")]: json.loads(p.read_text()) for p in folder.glob("seen.*.json")}
    inputs = {"work.py", "work.sh", "pkg/__init__.py", "pkg/work.py"}
    files = sorted(
        re.sub(r"^logs/[^/]+/", "logs/<run>/", p.relative_to(folder).as_posix())
        for p in folder.rglob("*") if p.is_file() and not p.name.startswith("seen.") and "__pycache__" not in p.parts
        and p.relative_to(folder).as_posix() not in inputs
    )
    return Observation(proc.returncode, seen, files, err)


def _observe(case: Case, tmp: Path) -> dict[str, Observation]:
    base = {k: v for k, v in clean_env().items() if k != "OMP_NUM_THREADS"}
    observed = {}
    for side in ("torchrun", "paratrain"):
        folder = tmp / re.sub(r"\W+", "-", case.name) / side
        _prepare(folder)
        argv = case.paratrain_argv if side == "paratrain" and case.paratrain_argv else case.argv
        argv = [a.format(port=free_port(), here=folder) for a in argv]
        env = {**base, **case.env, "COMPAT_OUT": str(folder)}
        launcher = LAUNCHERS["paratrain" if side == "paratrain" else case.launcher]
        observed[side] = _run([*launcher, *argv], folder, env, case.sigterm)
        for seen in observed[side].seen.values():  # what the launcher added or changed
            seen["env"] = {k: NORMALIZE.get(k, str)(v) for k, v in seen["env"].items() if base.get(k) != v
                           and k not in ("COMPAT_OUT", *case.env, *SHELL_VARIABLES)}
    return observed


def differences(torch_side: Observation, para: Observation) -> dict[str, tuple]:
    """Every way the two runs differ: key -> (torchrun's, paratrain's)."""
    found: dict[str, tuple] = {}
    if torch_side.exit_code != para.exit_code:
        found["exit code"] = (torch_side.exit_code, para.exit_code)
    if sorted(torch_side.seen) != sorted(para.seen):
        found["ranks"] = (sorted(torch_side.seen), sorted(para.seen))
    for key in sorted(set(torch_side.seen) & set(para.seen)):
        t, p = torch_side.seen[key], para.seen[key]
        for what in ("argv", "sum", "launched"):
            if t.get(what) != p.get(what):
                found[what] = (t[what], p[what])
        for var in sorted(set(t["env"]) | set(p["env"])):
            if t["env"].get(var) != p["env"].get(var):
                found.setdefault(var, (t["env"].get(var), p["env"].get(var)))
    if torch_side.files != para.files:
        found["files"] = (torch_side.files, para.files)
    return found


def _as_intended(case: Case, found: dict[str, tuple]) -> dict[str, tuple]:
    """Map observed keys onto INTENDED's names (exit code and file differences are per case)."""
    named = {}
    for key, values in found.items():
        if key in ("exit code", "MASTER_ADDR"):  # per-case flavours: "exit code (...)", "MASTER_ADDR (...)"
            key = next((d for d in case.differences if d.startswith(f"{key} (")), key)
        elif key == "files" and "log files" in case.differences:
            only_para = sorted(set(values[1]) - set(values[0]))
            if not set(values[0]) - set(values[1]) and all(f.endswith(("stdout.log", "stderr.log")) for f in only_para):
                values = ("error files", "error files, stdout.log, stderr.log")
            key = "log files"
        named[key] = values
    return named


def omp_threads(local_world_size: int) -> tuple[str | None, str]:
    """OMP_NUM_THREADS under torchrun and under paratrain run when the user did not set it."""
    return (None if local_world_size == 1 else "1"), str(max(1, CORES // local_world_size))


def cpu_cores(local_world_size: int) -> tuple[None, str | None]:
    """PARATRAIN_CPU_CORES under torchrun and under paratrain run (2+ CPU workers, none of the
    user's OMP_NUM_THREADS): the usable CPUs, in physical-core order, cut into equal runs."""
    cpus = core_order(os.sched_getaffinity(0))
    size = len(cpus) // local_world_size
    if local_world_size < 2 or size < 1:
        return None, None
    shares = [cpus[i * size:(i + 1) * size] for i in range(local_world_size)]
    def written(share: list[int]) -> str:  # as `taskset -c` writes it, for one run of neighbours or not
        if len(share) > 1 and share == list(range(share[0], share[-1] + 1)):
            return f"{share[0]}-{share[-1]}"
        return ",".join(map(str, share))

    return None, ";".join(written(share) for share in shares)


@pytest.fixture(scope="module")
def observations(tmp_path_factory) -> dict[str, dict[str, Observation]]:
    tmp = tmp_path_factory.mktemp("compat")
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cases, four launchers, at a time
        return dict(zip([c.name for c in CASES], pool.map(lambda case: _observe(case, tmp), CASES), strict=True))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_same_as_torchrun_but_the_intended_differences(case, observations):
    torch_side, para = observations[case.name]["torchrun"], observations[case.name]["paratrain"]
    assert torch_side.seen, torch_side.stderr  # torch's launcher ran the workers: the comparison means something
    found = _as_intended(case, differences(torch_side, para))
    local_world_size = int(next(iter(torch_side.seen.values()))["env"]["LOCAL_WORLD_SIZE"])
    threads = omp_threads(local_world_size)
    shares = cpu_cores(local_world_size)
    expected = (set(case.differences) | ({"OMP_NUM_THREADS"} if threads[0] != threads[1] else set())
                | ({"PARATRAIN_CPU_CORES"} if shares[1] else set()))
    assert sorted(found) == sorted(expected), (found, para.stderr[-2000:])
    for name, (torch_value, paratrain_value) in found.items():
        if name in ("OMP_NUM_THREADS", "PARATRAIN_CPU_CORES"):
            assert (torch_value, paratrain_value) == (threads if name == "OMP_NUM_THREADS" else shares)
            continue
        assert INTENDED[name].holds(torch_value, paratrain_value), (name, torch_value, paratrain_value)


def test_the_ranks_really_ran_and_restarts_are_counted_alike(observations):
    two = observations["--nproc_per_node=2, script arguments"]["paratrain"]
    assert {k: (s["sum"], s["launched"], s["argv"]) for k, s in two.seen.items()} == {
        "0.0": (3.0, True, ["--lr", "0.1", "x"]), "1.0": (3.0, True, ["--lr", "0.1", "x"])}
    restarted = observations["--max-restarts 1, rank 1 fails once"]
    for side in restarted.values():
        assert sorted(side.seen) == ["0.0", "0.1", "1.0", "1.1"] and side.exit_code == 0
        assert side.seen["1.1"]["env"]["TORCHELASTIC_RESTART_COUNT"] == "1"
    legacy = observations["torch.distributed.launch (passes --local-rank)"]
    assert [legacy["paratrain"].seen[k]["argv"] for k in ("0.0", "1.0")] == [["--local-rank=0", "--x"],
                                                                             ["--local-rank=1", "--x"]]
    flags = observations[CASES[7].name]["paratrain"]  # --role, --virtual-local-rank, --signals-to-handle
    assert {(s["env"]["LOCAL_RANK"], s["env"]["ROLE_NAME"], s["env"]["TORCHELASTIC_SIGNALS_TO_HANDLE"])
            for s in flags.seen.values()} == {("0", "trainer", "SIGTERM,SIGUSR1")}


def test_the_docs_table_lists_every_case_and_every_intended_difference():
    table = (ROOT / "docs" / "torchrun-compatibility.md").read_text()
    for case in CASES:
        assert f"| {case.name} |" in table, case.name
    for name, intended in INTENDED.items():
        assert f"| {name} |" in table and intended.torchrun_way in table, name
