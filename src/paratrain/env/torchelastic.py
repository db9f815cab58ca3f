"""Processes started by torchrun / ``paratrain run`` (torch.distributed.run's elastic agent)."""

from __future__ import annotations

from collections.abc import Mapping

from paratrain.env.api import ClusterEnvironment, ProcessInfo, env_int

# torch elastic's template for the tag its console tail puts before each worker line; a worker
# that sees it knows its lines are tagged already. paratrain run adds, for rank 0's progress
# bar, the terminal to draw on (the workers' own streams are files).
LINE_PREFIX_VAR = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
PROGRESS_TTY_VAR = "PARATRAIN_PROGRESS_TTY"
# The pid of the paratrain launcher that started a worker (its parent): a worker asks the
# kernel to end it when that process dies (runtime/launcher_death.py).
LAUNCHER_PID_VAR = "PARATRAIN_LAUNCHER_PID"
#: How long leaving a process group waits, with the GIL released, for gloo's threads to let go of finished
#: collectives (runtime/process_group.destroy_process_group; plain scripts' too, launch/worker_site/plain_scripts.py).
GLOO_DRAIN_S = 0.05
#: In a worker that the launcher's warm pool forked (``paratrain run --warm-workers``): the pool's pid. The
#: pool's parent is the launcher, which a cold worker has for its own parent (see :func:`parent_launcher`).
warm_pool_pid: int | None = None


def parent_launcher() -> int:
    """The launcher above this process, as the process tree shows it: its parent, or for a worker the warm pool
    forked (:data:`warm_pool_pid`), the pool's parent. What proves a worker was started by the launcher that
    holds something for it (a variable alone could have leaked from elsewhere)."""
    import os

    parent = os.getppid()
    if warm_pool_pid is None or parent != warm_pool_pid:
        return parent
    try:
        with open(f"/proc/{parent}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])  # field 4: ppid
    except (OSError, ValueError, IndexError):
        return parent


# Set by pt.spawn in its workers. Under either launcher a Runtime starts its hang watchdog.
SPAWNED_VAR = "PARATRAIN_SPAWNED"


def store_attempt(environ: Mapping[str, str]) -> str:
    """The attempt that separates this group's keys from a dead attempt's in the same store.

    Where the agent's store outlives the attempts (a static rendezvous, ours on loopback), a
    restarted group would read the dead one's addresses without the restart count in its prefix;
    every node restarts together there, so the counts agree. A node range (c10d rendezvous) gets
    a fresh store every round (``paratrain run`` turns torch's store sharing off), and there the
    counts do *not* agree: a node started again counts from 0 while the others count on, and
    ranks under two prefixes would wait for each other until the group's timeout.
    """
    if environ.get("TORCHELASTIC_USE_AGENT_STORE") == "False":
        return "0"
    return environ.get("TORCHELASTIC_RESTART_COUNT", "0")


def record_for_launcher(exc: BaseException) -> bool:
    """Write ``exc`` to torch elastic's error file, so the launcher names it (``paratrain run``'s
    failure line, "preempted", "not restarted") and not only the exit code; True when written. Not
    under torchrun (no error file), or when the file cannot be written, the exit code is the whole answer."""
    import os

    try:
        from torch.distributed.elastic.multiprocessing.errors import get_error_handler

        handler = get_error_handler()
        handler.initialize()
        handler.record_exception(exc)
    except Exception:  # never let the record hide the error it records
        return False
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    return bool(path) and os.path.isfile(path)


class TorchElasticEnvironment(ClusterEnvironment):
    name = "torchrun"

    def detected(self, environ: Mapping[str, str]) -> bool:
        # torchrun always exports all four; TORCHELASTIC_RUN_ID tells it apart from a
        # hand-written launcher that sets RANK/WORLD_SIZE (which we still accept).
        return all(k in environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"))

    def read(self, environ: Mapping[str, str]) -> ProcessInfo:
        world_size = env_int(environ, "WORLD_SIZE")
        local_world_size = env_int(environ, "LOCAL_WORLD_SIZE", world_size)
        return ProcessInfo(
            rank=env_int(environ, "RANK"),
            local_rank=env_int(environ, "LOCAL_RANK"),
            world_size=world_size,
            local_world_size=local_world_size,
            node_rank=env_int(environ, "GROUP_RANK", 0),
            # The agent's node count. Not WORLD_SIZE // LOCAL_WORLD_SIZE: nodes may run different
            # numbers of processes. The Runtime replaces it with what every rank agrees on.
            num_nodes=env_int(environ, "GROUP_WORLD_SIZE", 1),
            master_addr=environ.get("MASTER_ADDR"),
            master_port=env_int(environ, "MASTER_PORT", 0) or None,
            source=self.name,
        )
