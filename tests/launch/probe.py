"""A worker module for `paratrain run -m tests.launch.probe`: reports what the launcher gave it.

Each rank prints one line `PROBE {json}` with its environment, its arguments, the
all_reduce result and the addresses that its launcher and itself listen on.
"""

import json
import os
import sys

import psutil

import paratrain as pt


def listening_sockets(pid: int) -> list[str]:
    """Every ``address port`` the process listens on (TCP)."""
    connections = psutil.Process(pid).net_connections(kind="tcp")
    return sorted({f"{c.laddr.ip} {c.laddr.port}" for c in connections if c.status == psutil.CONN_LISTEN})


def main() -> None:
    rt = pt.Runtime()
    try:
        report = {
            "rank": rt.rank,
            "world_size": rt.world_size,
            "backend": rt.backend,
            "sum": pt.all_reduce(float(rt.rank + 1), op="sum"),
            "argv": sys.argv[1:],
            "env": {
                k: os.environ.get(k)
                for k in (
                    "OMP_NUM_THREADS",
                    "PARATRAIN_BACKEND",
                    "GLOO_SOCKET_IFNAME",
                    "NCCL_SOCKET_IFNAME",
                    "MASTER_ADDR",
                    "MASTER_PORT",
                    "LOCAL_RANK",
                )
            },
            # While the group is up: gloo's pair sockets (ours) and the rendezvous store (the launcher's).
            "listening": {"worker": listening_sockets(os.getpid()), "launcher": listening_sockets(os.getppid())},
        }
        print("PROBE " + json.dumps(report), flush=True)
        pt.barrier()  # keep every rank's sockets open until all have looked
    finally:
        rt.close()


if __name__ == "__main__":
    main()
