"""What the launcher says when a job ends other than by success: one line each, naming the fix.

The rendezvous that failed (where, and what to check), the node that was lost, the exit code
a legacy script's argparse gives, and a signal that stopped the launcher (SIGTERM after the
workers saved is a preemption, exit 75). :mod:`paratrain.launch.torchrun` raises these.
"""

from __future__ import annotations

import signal

from paratrain.errors import LaunchError, PreemptedError
from paratrain.launch.config import LaunchConfig
from paratrain.launch.legacy import parses_local_rank


def is_rendezvous_error(exc: BaseException) -> bool:
    """``exc`` comes from meeting the other nodes (the store, the rendezvous), not from the workers."""
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import RendezvousError

    return isinstance(exc, (dist.DistError, RendezvousError, TimeoutError, ConnectionError))


def rendezvous_error(config: LaunchConfig, where: str, exc: BaseException) -> LaunchError:
    """The rendezvous at ``where`` (host:port) failed with ``exc``: what to check, in one line."""
    cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if "waiting for clients" in cause:  # node 0's store: not every node connected
        return LaunchError(
            f"the rendezvous at {where} timed out after {config.rdzv_timeout}s ({cause}); start every node "
            f"(--node-rank 0 to {config.max_nodes - 1}) with the same --master-addr/--master-port and "
            f"--nnodes {config.max_nodes}, "
            "or raise --rdzv-timeout"
        )
    return LaunchError(
        f"the rendezvous at {where} failed ({type(exc).__name__}: {cause}); check that node 0 runs, with the same "
        f"--nnodes {config.min_nodes if config.min_nodes == config.max_nodes else f'{config.min_nodes}:{config.max_nodes}'}, and that "
        f"every node reaches {where} (paratrain doctor), or raise --rdzv-timeout"
    )


def exit_hint(config: LaunchConfig, exitcode: int) -> str:
    """What a worker's exit code says about the launch itself, or ``""``."""
    # 2 is argparse's exit code: a legacy script that did not get its --local_rank.
    if exitcode == 2 and not config.legacy_local_rank and parses_local_rank(config.target, config.module):
        return "the script parses --local_rank itself: add --legacy-local-rank"
    return ""


def lost_node(config: LaunchConfig, failed: list[int], peer: str | None) -> str:
    """Every failed rank of this node lost its peers: on several nodes, another node is gone."""
    if not config.multi_node:
        return ""
    # The other node's ranks are not named: it may run another number of processes than this one.
    if config.rdzv_backend == "static" and config.max_nodes == 2:
        lost = f"node {1 - config.node_rank}"
    else:
        lost = "another node"
    return (
        f"every rank of this node ({_span(failed)}) lost its peers at once: {lost}"
        + (f" at {peer}" if peer else "")
        + " died or became unreachable; check that host, then start every node again "
        "(or launch with --nnodes MIN:MAX --max-restarts K to let the remaining nodes go on without it)"
    )


def _span(ranks: list[int]) -> str:
    return f"{ranks[0]}-{ranks[-1]}" if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)) \
        else ", ".join(map(str, ranks))


def stopped_by(sigval, preempted: bool = False) -> LaunchError:
    """The launcher got a signal; the agent has passed it to the workers and waited for them.

    SIGTERM is how SLURM and Kubernetes preempt: pt.fit, ``paratrain train`` and loops using
    ``rt.preemption()`` finish their step, save, and record a PreemptedError before they exit
    (``preempted``); then the launcher says "preempted" and exits 75. Workers that recorded
    nothing (plain scripts) were stopped where they were: 128+15, as a shell reports SIGTERM.
    """
    if sigval == signal.SIGTERM and preempted:
        stopped = LaunchError(
            "preempted by SIGTERM: the workers finished their step and saved; run the same command again to resume"
        )
        stopped.exit_code = PreemptedError.exit_code
        return stopped
    if sigval == signal.SIGINT:  # Ctrl-C: pt.fit and paratrain train save as on SIGTERM; exit 130 as a shell reports it
        what = "the workers finished their step and saved; run the same command again to resume" if preempted \
            else "the workers were stopped too"
        stopped = LaunchError(f"interrupted by SIGINT (Ctrl-C): {what}")
        stopped.exit_code = 130
        return stopped
    stopped = LaunchError(f"stopped by {sigval.name}; the workers were stopped too")
    stopped.exit_code = 128 + int(sigval)
    return stopped
