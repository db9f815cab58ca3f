"""``paratrain run --fault-tolerance replicas``: a Lighthouse and N replica groups, supervised.

Per-step fault tolerance (``strategy="ft-ddp"``, torchft) needs, besides the workers, torchft's
*Lighthouse*: the one server that tells every step which replica groups are alive. This module
starts it, then one ``paratrain run`` (a torchrun agent, the job's other flags as given: its
``--nproc-per-node K`` processes are the group) per replica group, with the environment torchft
reads: ``TORCHFT_LIGHTHOUSE``, ``REPLICA_GROUP_ID``, ``NUM_REPLICA_GROUPS``. Then it watches:

* a group that exits with an error (its agent ends every process of the group when one dies) is
  started again whole (up to ``--replica-restarts`` times each), unless the error is a configuration error
  (exit code 2: a worker raised ConfigError or DataError, and would again); it
  heals from a live group at its first step, and the others never stop;
* a group that exits 0 finished the run; after that a failed group is not started again, and one
  still running ``FINISH_GRACE_S`` later is stopped (both could only train alone from their own
  state); the job ends when every group has ended;
* the Lighthouse is a single point of failure: when it exits, every group is stopped at once (they
  would otherwise wait for a quorum until their ``quorum_timeout``), it is started again and so are
  the groups, which resume from their disk checkpoints (``pt.Checkpointer``; steps since the last
  checkpoint are trained again). One line says so.

On several nodes (``--nnodes M --node-rank R --master-addr ADDR [--master-port P]``) every node's
launcher runs its N groups (ids ``R × N + i`` of ``M × N``) against one Lighthouse, which node 0's
launcher starts on ``ADDR:P`` (an address of node 0). The other nodes' launchers wait for it (bounded by
``--rdzv-timeout``) and watch it: when it stops answering they stop their groups too, wait for it to come
back and start them again, from disk, as node 0 does. Each group's store, Manager server and checkpoint
server are advertised at the node's address that routes to ``ADDR`` (``PARATRAIN_FT_ADDRESS``), and its
gloo/NCCL sockets use that interface: the other nodes' groups dial them. A node lost whole costs only
its groups: the others go on, and its groups heal when its launcher is started again.

Every process it starts is killed by the kernel if the supervisor dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from paratrain.errors import LaunchError
from paratrain.launch import network
from paratrain.launch.lighthouse import Lighthouse, die_with_supervisor
from paratrain.replica_environ import ADDRESS_ENV, GROUP_ENV, GROUPS_ENV, LIGHTHOUSE_ENV

LIGHTHOUSE_RESTARTS = 3
STOP_GRACE_S = 5.0
#: Once one group finished the run, how long the others have to finish theirs (they end the same
#: step; a group still starting then could only train alone from its own state).
FINISH_GRACE_S = 15.0
POLL_S = 0.1
#: ``paratrain run``'s exit code when a worker raised ConfigError or DataError (launch.failures): a group that
#: exits with it is not started again, since the same start fails the same way.
CONFIG_EXIT_CODE = 2
#: The Lighthouse's port on node 0 when several nodes run and --master-port is not given.
DEFAULT_LIGHTHOUSE_PORT = 29500
SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


@dataclass
class Group:
    """One replica group's agent and its history."""

    index: int
    process: subprocess.Popen | None = None
    restarts: int = 0
    finished: bool = False
    codes: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Nodes:
    """Where this launcher sits in the job: ``count`` nodes, this one ``rank``; on several, node 0's
    ``master_addr`` hosts the Lighthouse on ``port``, and the others wait ``wait_s`` for it."""

    count: int = 1
    rank: int = 0
    master_addr: str | None = None
    port: int | None = None
    wait_s: float = 600.0


class ReplicaGroups:
    """The Lighthouse (on node 0) and this node's ``groups`` agents of ``paratrain run`` running ``run_args``.

    Args:
        run_args: ``paratrain run``'s words for one group (flags and script), without the
            fault-tolerance and node flags.
        groups: replica groups on this node (at least 1).
        restarts: how many times each group may be started again after an error.
        min_replicas: fewest groups a quorum may hold.
        nodes: the job's nodes and this one's place among them (default: one node).

    Raises:
        LaunchError: fewer than one group.
        ConfigError: node 0 of several does not own ``master_addr``, or it does not resolve; a Lighthouse
            timeout variable that is not a valid number of milliseconds.
    """

    def __init__(self, run_args: list[str], groups: int, restarts: int, min_replicas: int = 1,
                 nodes: Nodes = Nodes()):
        if groups < 1:
            raise LaunchError(f"--replica-groups must be at least 1, got {groups}")
        self.run_args, self.restarts, self.min_replicas, self.nodes = run_args, restarts, min_replicas, nodes
        self.groups = [Group(nodes.rank * groups + index) for index in range(groups)]
        self.total_groups = nodes.count * groups
        self.finished_at = 0.0
        self.route: network.Interface | None = None
        if nodes.count > 1:
            if nodes.rank == 0:
                network.require_own_address(nodes.master_addr)  # the Lighthouse listens there
            ip = network.resolve(nodes.master_addr)
            host, port = ip, nodes.port or DEFAULT_LIGHTHOUSE_PORT
            self.route = network.interface_for(ip)  # what the other nodes' groups dial this node's groups at
        else:
            host, port = network.LOOPBACK, nodes.port or 0
        self.lighthouse = Lighthouse(host, port, own=nodes.rank == 0, min_replicas=min_replicas, wait_s=nodes.wait_s)

    def say(self, message: str) -> None:
        print(f"paratrain run: {message}", file=sys.stderr, flush=True)

    # ---- the groups -------------------------------------------------------------------------------
    def start_group(self, group: Group) -> None:
        env = {**os.environ, LIGHTHOUSE_ENV: self.lighthouse.address, GROUP_ENV: str(group.index),
               GROUPS_ENV: str(self.total_groups)}
        if self.route is not None:  # the other nodes' groups dial this group's store, servers and sockets here
            env[ADDRESS_ENV] = self.route.address
            for var in SOCKET_IFNAME_VARS:
                env[var] = env.get(var) or self.route.name
        env.setdefault("RUST_LOG", "warn")  # torchft's own log: a few lines per step at its default, info
        group.process = subprocess.Popen([sys.executable, "-m", "paratrain", "run", *self.run_args], env=env,
                                         preexec_fn=die_with_supervisor)

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
        """Supervise until every group of this node ended; returns 0 when the run finished (a group exited 0), 2 when
        the groups ended on a configuration error (exit code 2), else 1.

        Raises:
            LaunchError: the Lighthouse cannot start, or was lost more than ``LIGHTHOUSE_RESTARTS`` times;
                on a node other than 0, it did not answer within ``--rdzv-timeout``.
        """
        self.lighthouse.start_or_wait()
        ids = f"{len(self.groups)} replica group{'s' if len(self.groups) > 1 else ''}"
        if self.nodes.count > 1:
            first, last = self.groups[0].index, self.groups[-1].index
            ids += f" ({first}{f'-{last}' if last != first else ''} of {self.total_groups}, node {self.nodes.rank})"
        self.say(f"Lighthouse at {self.lighthouse.address}; starting {ids}")
        for group in self.groups:
            self.start_group(group)
        lighthouse_losses, run_over = 0, False
        try:
            while True:
                lost = None if run_over else self.lighthouse.lost()
                if lost is not None and self.nodes.rank > 0 and self._ended_with_the_run():
                    run_over = True  # node 0 ended its Lighthouse because the run finished
                    continue
                if lost is not None:
                    lighthouse_losses += 1
                    if lighthouse_losses > LIGHTHOUSE_RESTARTS:
                        raise LaunchError(f"the Lighthouse was lost {lighthouse_losses} times; giving up")
                    self.say(f"the Lighthouse {lost}: stopping every replica group"
                             + (" of this node" if self.nodes.count > 1 else "")
                             + (", starting it again" if self.nodes.rank == 0 else ", waiting for it to come back")
                             + "; the groups resume from their last disk checkpoint")
                    self.stop_all()
                    self.lighthouse.start_or_wait()
                    for group in self.groups:
                        if not group.finished:
                            self.start_group(group)
                    continue
                if self._watch_groups():
                    break
                time.sleep(POLL_S)
            if self.nodes.count > 1 and self.lighthouse.own and any(g.finished for g in self.groups):
                self._linger()
        finally:
            self.stop_all()
            self.lighthouse.stop()
        if any(g.finished for g in self.groups):
            return 0
        return CONFIG_EXIT_CODE if any(g.codes[-1:] == [CONFIG_EXIT_CODE] for g in self.groups) else 1

    def _ended_with_the_run(self) -> bool:
        """On a node other than 0 whose Lighthouse went away: whether it went because the run finished (a group
        of this node finished, or ends with code 0 within ``STOP_GRACE_S``: its last step was the job's last)."""
        deadline = time.monotonic() + STOP_GRACE_S
        while True:
            codes = [g.process.poll() if g.process is not None else None for g in self.groups]
            if any(g.finished for g in self.groups) or 0 in codes:
                return True
            if time.monotonic() > deadline or all(g.process is None or code is not None
                                                  for g, code in zip(self.groups, codes)):
                return False
            time.sleep(POLL_S)

    def _linger(self) -> None:
        """On node 0 of several, once its groups finished the run: keep the Lighthouse while groups of other
        nodes are still connected to it (they end the same step and shut their Managers down), at most
        ``FINISH_GRACE_S``: its end would tell their launchers that it was lost."""
        deadline = time.monotonic() + FINISH_GRACE_S
        while time.monotonic() < deadline and self.lighthouse.connected():
            time.sleep(POLL_S)

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
            elif code == CONFIG_EXIT_CODE:
                self.say(f"replica group {group.index} exited with code {code}, a configuration error (said above): "
                         "started again it would fail the same way; not starting it again")
            elif group.restarts >= self.restarts:
                self.say(f"replica group {group.index} exited with code {code} and used its {self.restarts} "
                         "restarts; the others go on without it")
            else:
                group.restarts += 1
                self.say(f"replica group {group.index} exited with code {code}; starting it again "
                         f"({group.restarts}/{self.restarts}), it heals from a live group")
                self.start_group(group)
        return all(g.process is None for g in self.groups)

