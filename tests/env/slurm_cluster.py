"""A one-node SLURM cluster for tests: munged, slurmctld and slurmd started as root in a temp dir.

Everything private to the cluster (munge key and socket, state, spool, logs, ports) lives
in its own directory, so it neither needs nor touches a system SLURM or munge. The node
is called ``localhost`` (address 127.0.0.1), so the master address that SLURM jobs derive
from the node list resolves on any machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import ROOT, free_port

DAEMONS = ("munged", "slurmctld", "slurmd")
COMMANDS = ("srun", "sbatch", "scancel", "squeue", "sinfo")
INSTALLER = ROOT / ".ci" / "install-cluster-tools"


def missing_tools(tools=DAEMONS + COMMANDS) -> list[str]:
    return [tool for tool in tools if shutil.which(tool) is None]


def ensure_installed(tools) -> str | None:
    """Install the packages if they are missing and we can; return why we cannot, or None.

    Where installing is possible (root, apt-get) and fails, the test fails: a machine that
    can run the SLURM and MPI claims must not pass by skipping them. The installer takes a
    lock, so test workers that ask at once install one after the other.
    """
    if not missing_tools(tools):
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"{', '.join(missing_tools(tools))} not installed and cannot be (needs root and apt-get; bash {INSTALLER})"
    done = subprocess.run(["bash", str(INSTALLER)], capture_output=True, text=True)
    if done.returncode != 0 or missing_tools(tools):
        pytest.fail(f"installing {', '.join(missing_tools(tools))} failed: {done.stderr.strip()[-300:]}")
    return None




class SlurmCluster:
    """Start with :meth:`start`, run commands with :meth:`env`, stop with :meth:`stop`."""

    CPUS = 4  # declared (SlurmdParameters=config_overrides): enough for -n 2 -c 2

    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` plus SLURM_CONF, so srun/sbatch/scancel talk to this cluster."""
        return {**base, "SLURM_CONF": str(self.conf)}

    def start(self, timeout_s: float = 60) -> None:
        for sub in ("state", "spool", "jobs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.conf.write_text(self._config())
        r = self.root
        self._daemon(["munged", "--foreground", "--force", f"--socket={r}/munge.socket", f"--key-file={key}",
                      f"--pid-file={r}/munged.pid", f"--log-file={r}/munged.log", f"--seed-file={r}/munge.seed"])
        self._wait(lambda: (r / "munge.socket").exists(), "munged", timeout_s)
        self._daemon(["slurmctld", "-D", "-f", str(self.conf), "-L", f"{r}/slurmctld.log"])
        self._daemon(["slurmd", "-D", "-N", "localhost", "-f", str(self.conf), "-L", f"{r}/slurmd.log"])
        self._wait(self._node_idle, "slurmd to register its node as idle", timeout_s)

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "--user", "root"], env=self.env(dict(os.environ)), capture_output=True)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    # ---- internals -------------------------------------------------------------------------
    def _config(self) -> str:
        r = self.root
        return f"""\
ClusterName=paratrain-test
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={r}/munge.socket
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
KillWait=10
NodeName=localhost NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 CPUs={self.CPUS} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""

    def _daemon(self, argv: list[str]) -> None:
        log = open(self.root / f"{argv[0]}.out", "w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def _node_idle(self) -> bool:
        done = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], env=self.env(dict(os.environ)),
                              capture_output=True, text=True)
        return done.returncode == 0 and done.stdout.strip().startswith("idle")

    def _wait(self, ready, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = " | ".join(f"{n}: {self.log(n)[-400:]}" for n in DAEMONS)
                raise RuntimeError(f"SLURM test cluster: waited for {what}; exited: {dead}; logs: {logs}")
            time.sleep(0.2)
