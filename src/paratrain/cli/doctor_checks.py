"""``paratrain doctor``'s checks: what this machine and its network look like to a distributed job.

Each check returns :class:`Finding` objects: ``ok``, ``info`` (facts worth seeing),
``warning`` (works, but slower or fragile) or ``problem`` (a job would fail or hang;
the finding says how to fix it). The command exits non-zero when there is a problem.
The cross-rank all_reduce probe is :mod:`paratrain.cli.workers.doctor_probe`.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from dataclasses import asdict, dataclass

from paratrain.env.cpu_binding import usable_cpus

OK, INFO, WARNING, PROBLEM = "ok", "info", "warning", "problem"

# The environment variables that steer a distributed job.
ENV_PREFIXES = ("MASTER_", "NCCL_", "TORCHELASTIC_")
ENV_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GLOO_SOCKET_IFNAME",
             "NCCL_SOCKET_IFNAME", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "PARATRAIN_BACKEND",
             "PARATRAIN_TIMEOUT", "PARATRAIN_STALL_TIMEOUT", "PARATRAIN_CPU_CORES")
_LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID")


@dataclass(frozen=True)
class Finding:
    """One line of the report: what was checked, what was found, and the fix for a problem."""

    check: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"[{self.status:>7}] {self.check}: {self.detail}"
        return text + (f" — fix: {self.fix}" if self.fix else "")

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def software() -> list[Finding]:
    """Python, torch, the backends and the CUDA stack."""
    import torch
    import torch.distributed as dist

    from paratrain._version import __version__

    found = [Finding("paratrain", OK, __version__)]
    python = platform.python_version()
    found.append(Finding("python", OK if sys.version_info >= (3, 10) else PROBLEM, python,
                         "" if sys.version_info >= (3, 10) else "use Python 3.10 or newer"))
    found.append(fork_safety(sys.version_info))
    found.append(Finding("torch", OK, torch.__version__))
    if not dist.is_available():
        return found + [Finding("torch.distributed", PROBLEM, "this torch build has no torch.distributed",
                                "install an official torch build (pip install torch)")]
    found.append(Finding("gloo", OK if dist.is_gloo_available() else PROBLEM,
                         "available" if dist.is_gloo_available() else "not built into torch",
                         "" if dist.is_gloo_available() else "install an official torch build"))
    if torch.cuda.is_available():
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if dist.is_nccl_available() else None
        found.append(Finding("CUDA", OK, f"{torch.version.cuda}, driver sees {torch.cuda.device_count()} GPU(s)"))
        found.append(Finding("cuDNN", OK if torch.backends.cudnn.is_available() else WARNING,
                             str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else "not available"))
        found.append(Finding("NCCL", OK if nccl else PROBLEM, nccl or "not built into torch",
                             "" if nccl else "install a CUDA build of torch with NCCL, or use --backend gloo"))
    else:
        built = torch.version.cuda or "none (CPU build)"
        found.append(Finding("CUDA", INFO, f"no CUDA device visible (torch CUDA: {built}); jobs run on CPU with gloo"))
        found.append(Finding("NCCL", INFO, "not usable without CUDA; gloo is the backend"))
    return found


def fork_safety(version: tuple[int, ...]) -> Finding:
    """Can a forked DataLoader worker hang at birth on this Python? CPython before 3.12 took the
    interpreter's thread-list lock in the child before making it anew (gh-112275, fixed in 3.11.10,
    3.10.15 and 3.9.20): a fork while a C++ thread (gloo's, NCCL's) entered Python leaves the child
    waiting forever."""
    major, minor, micro = version[:3]
    fixed = (major, minor) >= (3, 12) or (minor, micro) >= (11, 10) or (minor == 10 and micro >= 15)
    if fixed:
        return Finding("fork safety", OK, "forked loader workers cannot inherit the interpreter's thread-list lock")
    return Finding("fork safety", WARNING,
                   f"on Python {major}.{minor}.{micro} a forked DataLoader worker can hang at birth (CPython "
                   "gh-112275); rt.loader finds and replaces such a worker, a plain DataLoader waits forever",
                   "use Python 3.11.10+ or 3.12+, or pass multiprocessing_context='forkserver' to plain DataLoaders")


def devices() -> list[Finding]:
    """GPUs and their free memory, or the CPU's cores and free memory."""
    import psutil
    import torch

    found = []
    for index in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        free, total = torch.cuda.mem_get_info(index)
        name = torch.cuda.get_device_name(index)
        status = OK if free > 0.1 * total else WARNING
        found.append(Finding(f"cuda:{index}", status, f"{name}, {free / 2**30:.1f} of {total / 2**30:.1f} GiB free",
                             "" if status == OK else "another process holds this GPU's memory (nvidia-smi)"))
    memory = psutil.virtual_memory()
    cores = len(usable_cpus())
    found.append(Finding("cpu", OK, f"{cores} core(s) usable, {memory.available / 2**30:.1f} of "
                                    f"{memory.total / 2**30:.1f} GiB memory free"))
    return found


def environment(environ: dict[str, str] | None = None) -> list[Finding]:
    """The variables that steer a job, and the ones that would mislead one."""
    import psutil

    environ = dict(os.environ if environ is None else environ)
    shown = {k: v for k, v in sorted(environ.items()) if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}
    found = [Finding("environment", INFO, ", ".join(f"{k}={v}" for k, v in shown.items()) or "none of "
                     "MASTER_*, RANK, WORLD_SIZE, *_SOCKET_IFNAME, NCCL_*, OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES set")]
    leftovers = [k for k in _LAUNCHER_VARS if k in environ]
    if leftovers and "TORCHELASTIC_RUN_ID" not in environ:
        found.append(Finding("launcher variables", PROBLEM, f"{', '.join(leftovers)} set in this shell",
                             f"unset {' '.join(leftovers)}: pt.Runtime would try to join a job that is not running"))
    interfaces = set(psutil.net_if_addrs())
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        names = [n for n in environ.get(var, "").lstrip("^=").split(",") if n]
        missing = [n for n in names if n not in interfaces]
        if missing:
            found.append(Finding(var, PROBLEM, f"names interface(s) {', '.join(missing)} that do not exist here "
                                 f"(interfaces: {', '.join(sorted(interfaces))})", f"unset {var} or name one of those"))
    threads = environ.get("OMP_NUM_THREADS")
    if threads is not None and not (threads.isdigit() and int(threads) > 0):
        found.append(Finding("OMP_NUM_THREADS", PROBLEM, f"{threads!r} is not a positive integer",
                             "unset it (paratrain run picks cores / processes) or set a number"))
    return found


def network(master_addr: str | None, master_port: int | None, node_rank: int) -> list[Finding]:
    """Interfaces, the one that routes to the master, and the master port (free on node 0, reachable elsewhere)."""
    import psutil

    from paratrain.errors import ParatrainError
    from paratrain.launch import network as net

    addresses = {name: [a.address for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]
                 for name, addrs in psutil.net_if_addrs().items()}
    found = [Finding("interfaces", INFO, "; ".join(f"{n} {' '.join(a)}" for n, a in sorted(addresses.items()) if a))]
    found.append(Finding("host name", INFO, f"{socket.gethostname()} resolves to {_resolve_or_none(socket.gethostname())}"))
    if not master_addr:
        return found
    try:
        route = net.interface_for(master_addr)
    except ParatrainError as exc:
        return found + [Finding("route to master", PROBLEM, str(exc).split(";")[0], _after_semicolon(str(exc)))]
    found.append(Finding("route to master", OK, f"{master_addr} is reached through {route.name} ({route.address}); "
                                                f"paratrain run exports GLOO_SOCKET_IFNAME={route.name}"))
    if master_port is None:
        return found
    if node_rank == 0:
        busy = net.port_in_use("0.0.0.0", master_port)
        found.append(Finding("master port", PROBLEM if busy else OK,
                             f"{master_port} is {'already in use' if busy else 'free'} on this machine (node 0 listens on it)",
                             "pick another --master-port, or stop the job that holds it" if busy else ""))
    else:
        from paratrain.launch.reachability import reach

        outcome = reach(master_addr, master_port)
        if outcome.ok:
            found.append(Finding("master port", OK, outcome.what))
        else:  # closed is fine before node 0 runs; the others are not
            found.append(Finding("master port", WARNING if outcome.cause == "closed" else PROBLEM,
                                 f"{outcome.cause}: {outcome.what}", outcome.fix))
    return found


def check_hsdp_shape(world_size: int, replicate: int | None, shard: int | None) -> None:
    """Refuse a ``--replicate`` / ``--shard`` that strategy hsdp could not build for ``world_size``
    processes, as a job would. Nothing when neither is given.

    Raises:
        ConfigError: a size below 1, a product that is not the number of processes, or one process.
    """
    if replicate is None and shard is None:
        return
    from paratrain.strategy.hsdp import HSDPStrategy

    given = {name: value for name, value in (("replicate", replicate), ("shard", shard)) if value is not None}
    HSDPStrategy.check(world_size, HSDPStrategy.parse_options(given))


def hsdp_mesh(world_size: int, num_nodes: int, per_node: int | None, replicate: int | None = None,
              shard: int | None = None, seen: str = "") -> Finding:
    """The 2-D mesh strategy hsdp would build for this job (``per_node`` None: the nodes run
    different numbers of processes); ``seen`` says where the shape comes from."""
    from paratrain.arguments import cli_spelling
    from paratrain.errors import ConfigError
    from paratrain.strategy.hsdp import describe_mesh, plan_mesh

    job = f"{world_size} process(es) on {num_nodes} node(s){seen}"
    if world_size < 2:
        return Finding("hsdp mesh", INFO, f"{job}: hsdp shards over 2 or more processes, and replicates across nodes")
    try:
        with cli_spelling():  # the doctor's probe worker too speaks of flags
            replicas, shards = plan_mesh(world_size, num_nodes, per_node, replicate, shard)
    except ConfigError as exc:
        return Finding("hsdp mesh", WARNING, f"{job}: {str(exc).split(';')[0]}", _after_semicolon(str(exc)))
    where = ("one replica: on one node hsdp is fsdp; it pays off across nodes" if replicas == 1 else
             "a node each" if replicate is None and shard is None else "as --replicate/--shard ask")
    return Finding("hsdp mesh", INFO, f"{job} → {describe_mesh(replicas, shards)}, {where}")


def _resolve_or_none(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return "nothing (not in /etc/hosts or DNS)"


def _after_semicolon(text: str) -> str:
    return text.split(";", 1)[1].strip() if ";" in text else ""


def has_problem(findings: list[Finding]) -> bool:
    return any(f.status == PROBLEM for f in findings)
