"""A plain script (no paratrain) for the side-by-side runs of torchrun and ``paratrain run``.

Each rank writes what it saw to ``$COMPAT_OUT/seen.<RANK>.<restart>.json``: its whole
environment and its arguments. With ``COMPAT_JOIN=1`` it also joins the group at
MASTER_ADDR:MASTER_PORT as RANK of WORLD_SIZE (gloo), all-reduces, and records the sum and
``is_torchelastic_launched()`` (the other cases skip importing torch: seconds per case).
``COMPAT_FAIL``: ``once`` (rank 1 fails its first attempt), an exit code (rank 1 exits with
it), or ``wait`` (every rank waits to be stopped).
"""

import json
import os
import sys
import time
from datetime import timedelta


def join_and_all_reduce(restart: str) -> dict:
    import torch
    import torch.distributed as dist

    # torch's agent keeps one store for every attempt (static rendezvous, and c10d's shared one):
    # a restarted group could read the dead group's gloo addresses, so each attempt has its own keys.
    # Rank 0 hosts the store unless the agent does, as torch's env:// rendezvous decides.
    agent_hosts = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=not agent_hosts and os.environ["RANK"] == "0", timeout=timedelta(seconds=120))
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt{restart}", store),
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    dist.barrier()
    dist.destroy_process_group()
    return {"sum": total.item(), "launched": dist.is_torchelastic_launched()}


def _wait_for_every_record(restart: str, timeout_s: float = 60.0) -> None:
    """Before failing on purpose, let every rank write what it saw: the launcher stops the others
    when one fails, and a rank still starting up on a busy machine would leave no record (the
    comparison would then report a difference in the ranks seen, which is the load, not the launcher)."""
    paths = [os.path.join(os.environ["COMPAT_OUT"], f"seen.{rank}.{restart}.json")
             for rank in range(int(os.environ["WORLD_SIZE"]))]
    deadline = time.monotonic() + timeout_s
    while not all(os.path.exists(path) for path in paths) and time.monotonic() < deadline:
        time.sleep(0.05)


def main() -> None:
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "-")
    seen = {"env": dict(os.environ), "argv": sys.argv[1:]}
    if os.environ.get("COMPAT_JOIN") == "1":
        seen.update(join_and_all_reduce(restart))
    with open(os.path.join(os.environ["COMPAT_OUT"], f"seen.{os.environ['RANK']}.{restart}.json"), "w") as file:
        json.dump(seen, file)
    fail = os.environ.get("COMPAT_FAIL", "")
    if fail == "wait":
        time.sleep(600)
    if os.environ["RANK"] == "1" and (fail == "once" and restart == "0" or fail.isdigit()):
        _wait_for_every_record(restart)
        sys.exit(3 if fail == "once" else int(fail))


if __name__ == "__main__":
    main()
