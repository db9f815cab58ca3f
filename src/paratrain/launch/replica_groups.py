"""``paratrain run --fault-tolerance replicas``: a Lighthouse and N replica groups, supervised.

Per-step fault tolerance (``strategy="ft-ddp"``, torchft) needs, besides the workers, torchft's
*Lighthouse*: the one server that tells every step which replica groups are alive. This module
starts it, then one ``paratrain run`` (a torchrun agent, the job's other flags as given: its
``--nproc-per-node K`` processes are the group) per replica group, with the environment torchft
reads: ``TORCHFT_LIGHTHOUSE``, ``REPLICA_GROUP_ID``, ``NUM_REPLICA_GROUPS``. Then it watches:

* a group that exits with an error (its agent ends every process of the group when one dies) is
  started again whole (up to ``--replica-restarts`` times each); it
  heals from a live group at its first step, and the others never stop;
* a group that exits 0 finished the run; after that a failed group is not started again, and one
  still running ``FINISH_GRACE_S`` later is stopped (both could only train alone from their own
  state); the job ends when every group has ended;
* the Lighthouse is a single point of failure: when it exits, every group is stopped at once (they
  would otherwise wait for a quorum until their ``quorum_timeout``), it is started again and so are
  the groups, which resume from their disk checkpoints (``pt.Checkpointer``; steps since the last
  checkpoint are trained again). One line says so.

Every process it starts is killed by the kernel if the supervisor dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from paratrain.errors import ConfigError, LaunchError

#: How long the Lighthouse waits for a heartbeat before it drops a replica group from the quorum
#: (torchft's default is 5 s: the pause of the survivors after a group dies), and for a group that
#: heartbeats but has not asked for a quorum yet (torchft's: 60 s).
HEARTBEAT_TIMEOUT_MS = int(os.environ.get("PARATRAIN_FT_HEARTBEAT_TIMEOUT_MS", "2000"))
JOIN_TIMEOUT_MS = int(os.environ.get("PARATRAIN_FT_JOIN_TIMEOUT_MS", "2000"))
LIGHTHOUSE_START_S = 30.0  # a guard: the Lighthouse prints its address within a second
LIGHTHOUSE_RESTARTS = 3
STOP_GRACE_S = 5.0
#: Once one group finished the run, how long the others have to finish theirs (they end the same
#: step; a group still starting then could only train alone from its own state).
FINISH_GRACE_S = 15.0
POLL_S = 0.1

_LIGHTHOUSE = """\
import signal, sys
from torchft._torchft import LighthouseServer
server = LighthouseServer(bind="127.0.0.1:0", min_replicas={min_replicas}, join_timeout_ms={join},
                          heartbeat_timeout_ms={heartbeat})
print(server.address(), flush=True)
signal.sigwait([signal.SIGTERM, signal.SIGINT])
server.shutdown()
"""


_FT_FLAGS = ("--fault-tolerance", "--replica-groups", "--replica-restarts")


def group_words(argv: list[str]) -> list[str]:
    """``paratrain run``'s words of ``argv`` (everything after ``run``) without the fault-tolerance
    flags: what each replica group's launcher runs. The script's own arguments are kept as given."""
    words = argv[argv.index("run") + 1:]
    kept, skip = [], False
    for position, word in enumerate(words):
        if skip:
            skip = False
            continue
        if not word.startswith("-") and _is_target(words, position):
            return kept + words[position:]
        name = word.split("=", 1)[0]
        if name in _FT_FLAGS:
            skip = "=" not in word
            continue
        kept.append(word)
    return kept


def _is_target(words: list[str], position: int) -> bool:
    """Whether ``words[position]`` is the script (not a flag's value): a flag before it takes a value
    unless it is one of run's switches."""
    if position == 0:
        return True
    before = words[position - 1]
    return not before.startswith("-") or "=" in before or before in _SWITCHES


#: ``paratrain run``'s flags that take no value (the word after one is the script).
_SWITCHES = {"--standalone", "-m", "--module", "--no-python", "--no_python", "-v", "--verbose", "--run-path",
             "--run_path"}


def check_group_shape(min_nodes: int, max_nodes: int) -> None:
    """Refuse a group shape the replica groups cannot share, before anything starts: every group is one
    ``paratrain run`` on this node, all of the same size (torchft pairs rank ``i`` of every group).

    Raises:
        ConfigError: a node range (groups whose size could change) or several nodes per group.
    """
    if min_nodes != max_nodes:
        raise ConfigError(f"--fault-tolerance replicas needs replica groups of one fixed size, but --nnodes "
                          f"{min_nodes}:{max_nodes} lets a group grow and shrink; give each group --nproc-per-node K "
                          "processes on one node (a lost process restarts its whole group)")
    if max_nodes != 1:
        raise ConfigError(f"--fault-tolerance replicas runs each replica group on this node, got --nnodes {max_nodes}; "
                          "give each group --nproc-per-node K processes (groups spanning nodes are not supported)")


def _die_with_supervisor() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


@dataclass
class Group:
    """One replica group's agent and its history."""

    index: int
    process: subprocess.Popen | None = None
    restarts: int = 0
    finished: bool = False
    codes: list[int] = field(default_factory=list)


class ReplicaGroups:
    """The Lighthouse and ``groups`` agents of ``paratrain run`` running ``run_args``.

    Args:
        run_args: ``paratrain run``'s words for one group (flags and script), without the
            fault-tolerance flags.
        groups: replica groups (at least 1).
        restarts: how many times each group may be started again after an error.
        min_replicas: fewest groups a quorum may hold.
    """

    def __init__(self, run_args: list[str], groups: int, restarts: int, min_replicas: int = 1):
        if groups < 1:
            raise LaunchError(f"--replica-groups must be at least 1, got {groups}")
        self.run_args, self.restarts, self.min_replicas = run_args, restarts, min_replicas
        self.groups = [Group(index) for index in range(groups)]
        self.lighthouse: subprocess.Popen | None = None
        self.lighthouse_address = ""
        self.finished_at = 0.0

    def say(self, message: str) -> None:
        print(f"paratrain run: {message}", file=sys.stderr, flush=True)

    # ---- the Lighthouse -------------------------------------------------------------------------------
    def start_lighthouse(self) -> None:
        """Start it on a port the kernel picks; its first line is its address.

        Raises:
            LaunchError: it exited or printed nothing within the guard (names why, torchft missing included).
        """
        code = _LIGHTHOUSE.format(min_replicas=self.min_replicas, join=JOIN_TIMEOUT_MS, heartbeat=HEARTBEAT_TIMEOUT_MS)
        # Its log (a line per quorum) goes to a file: a pipe nobody reads would fill and stall it.
        log = tempfile.TemporaryFile(mode="w+")
        self.lighthouse = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=log, text=True,
                                           preexec_fn=_die_with_supervisor)
        line = _first_line(self.lighthouse, LIGHTHOUSE_START_S)
        if line is None:  # alive but silent: never wait for it without end
            self.lighthouse.kill()
            self.lighthouse.wait()
            raise LaunchError(f"the torchft Lighthouse printed no address within {LIGHTHOUSE_START_S:g} s; check "
                              "that this host can listen on 127.0.0.1 and that torchft imports (pip install 'paratrain[ft]')")
        if not line.startswith("http"):
            try:
                self.lighthouse.wait(timeout=LIGHTHOUSE_START_S)
            except subprocess.TimeoutExpired:
                self.lighthouse.kill()
                self.lighthouse.wait()
            log.seek(0)
            error = (log.read().strip().splitlines() or [line or "no output"])[-1]
            raise LaunchError(f"the torchft Lighthouse did not start ({error}); pip install 'paratrain[ft]'")
        # Its address names this host; the groups reach it on the loopback, where it listens.
        self.lighthouse_address = "http://127.0.0.1:" + line.rsplit(":", 1)[1]

    # ---- the groups -------------------------------------------------------------------------------
    def start_group(self, group: Group) -> None:
        env = dict(os.environ, TORCHFT_LIGHTHOUSE=self.lighthouse_address, REPLICA_GROUP_ID=str(group.index),
                   NUM_REPLICA_GROUPS=str(len(self.groups)))
        env.setdefault("RUST_LOG", "warn")  # torchft's own log: a few lines per step at its default, info
        group.process = subprocess.Popen([sys.executable, "-m", "paratrain", "run", *self.run_args], env=env,
                                         preexec_fn=_die_with_supervisor)

    def stop_all(self) -> None:
        """SIGTERM every live agent (it stops its worker), SIGKILL what is left after the grace."""
        live = [g.process for g in self.groups if g.process is not None and g.process.poll() is None]
        for process in live:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for process in live:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def run(self) -> int:
        """Supervise until every group ended; returns 0 when the run finished (a group exited 0).

        Raises:
            LaunchError: the Lighthouse cannot start, or died more than ``LIGHTHOUSE_RESTARTS`` times.
        """
        self.start_lighthouse()
        self.say(f"Lighthouse at {self.lighthouse_address}; starting {len(self.groups)} replica groups")
        for group in self.groups:
            self.start_group(group)
        lighthouse_losses = 0
        try:
            while True:
                if self.lighthouse.poll() is not None:
                    lighthouse_losses += 1
                    if lighthouse_losses > LIGHTHOUSE_RESTARTS:
                        raise LaunchError(f"the Lighthouse died {lighthouse_losses} times; giving up")
                    self.say(f"the Lighthouse exited (code {self.lighthouse.returncode}): stopping every replica "
                             "group, starting it again; the groups resume from their last disk checkpoint")
                    self.stop_all()
                    self.start_lighthouse()
                    for group in self.groups:
                        if not group.finished:
                            self.start_group(group)
                    continue
                if self._watch_groups():
                    break
                time.sleep(POLL_S)
        finally:
            self.stop_all()
            if self.lighthouse is not None and self.lighthouse.poll() is None:
                self.lighthouse.terminate()
                self.lighthouse.wait()
        return 0 if any(g.finished for g in self.groups) else 1

    def _watch_groups(self) -> bool:
        """Restart failed groups; True when every group has ended for good."""
        anyone_finished = any(g.finished for g in self.groups)
        if anyone_finished and time.monotonic() - self.finished_at > FINISH_GRACE_S:
            for group in self.groups:
                if group.process is not None and group.process.poll() is None:
                    self.say(f"replica group {group.index} is still running {FINISH_GRACE_S:g} s after the run "
                             "finished elsewhere (it started too late to heal from a live group): stopping it")
                    group.process.send_signal(signal.SIGTERM)
                    try:
                        group.process.wait(timeout=STOP_GRACE_S)
                    except subprocess.TimeoutExpired:
                        group.process.kill()
        for group in self.groups:
            if group.process is None or group.process.poll() is None:
                continue
            code = group.process.returncode
            group.codes.append(code)
            group.process = None
            if code == 0:
                group.finished = True
                if not anyone_finished:
                    self.finished_at, anyone_finished = time.monotonic(), True
            elif anyone_finished:
                self.say(f"replica group {group.index} exited with code {code} after the run finished elsewhere; "
                         "not starting it again")
            elif group.restarts >= self.restarts:
                self.say(f"replica group {group.index} exited with code {code} and used its {self.restarts} "
                         "restarts; the others go on without it")
            else:
                group.restarts += 1
                self.say(f"replica group {group.index} exited with code {code}; starting it again "
                         f"({group.restarts}/{self.restarts}), it heals from a live group")
                self.start_group(group)
        return all(g.process is None for g in self.groups)


def _first_line(process: subprocess.Popen, timeout_s: float) -> str | None:
    """``process``'s first line of output, stripped ("" when it exited first); None when it printed no whole
    line within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    received = b""
    with selectors.DefaultSelector() as waiting:
        waiting.register(process.stdout, selectors.EVENT_READ)
        while b"\n" not in received:
            left = deadline - time.monotonic()
            if left <= 0 or not waiting.select(timeout=left):
                return None
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                break
            received += chunk
    return received.split(b"\n", 1)[0].decode(errors="replace").strip()

