"""What each replica group of ``paratrain run --fault-tolerance replicas`` runs, and the job shapes refused.

Every group is a one-node ``paratrain run`` of its own with the job's flags, less the fault-tolerance
flags and the node flags (those place the Lighthouse; :mod:`paratrain.launch.replica_groups`).
"""

from __future__ import annotations

from paratrain.errors import ConfigError
from paratrain.launch import network

_FT_FLAGS = ("--fault-tolerance", "--replica-groups", "--replica-restarts")
#: The job's node flags: they place the Lighthouse; each group is a one-node run of its own.
_NODE_FLAGS = ("--nnodes", "--node-rank", "--node_rank", "--master-addr", "--master_addr", "--master-port",
               "--master_port")


def group_words(argv: list[str]) -> list[str]:
    """``paratrain run``'s words of ``argv`` (everything after ``run``) without the fault-tolerance
    and node flags: what each replica group's launcher runs (one node, on its loopback). The script's own
    arguments are kept as given."""
    words = argv[argv.index("run") + 1:]
    kept, skip = [], False
    for position, word in enumerate(words):
        if skip:
            skip = False
            continue
        if not word.startswith("-") and _is_target(words, position):
            return kept + words[position:]
        name = word.split("=", 1)[0]
        if name in _FT_FLAGS or name in _NODE_FLAGS:
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


def check_group_shape(min_nodes: int, max_nodes: int, master_addr: str | None = None) -> None:
    """Refuse a job shape the replica groups cannot share, before anything starts: every group is one
    ``paratrain run`` on one node, all of the same size (torchft pairs rank ``i`` of every group); on
    several nodes, each node runs its own groups against node 0's Lighthouse at ``--master-addr``.

    Raises:
        ConfigError: a node range (groups whose size could change), several nodes without ``--master-addr``, or
            an ``--master-addr`` with its port or half a bracket (:func:`network.check_address_form`).
    """
    if min_nodes != max_nodes:
        raise ConfigError(f"--fault-tolerance replicas needs replica groups of one fixed size, but --nnodes "
                          f"{min_nodes}:{max_nodes} lets a group grow and shrink; give each group --nproc-per-node K "
                          "processes on one node (a lost process restarts its whole group)")
    if master_addr:
        network.check_address_form("--master-addr", master_addr)
    if max_nodes > 1 and not master_addr:
        raise ConfigError(f"--fault-tolerance replicas on --nnodes {max_nodes} needs --master-addr: an address of "
                          "node 0, where its launcher starts the Lighthouse that every node's groups ask")
