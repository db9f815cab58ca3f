"""Each CPU worker of a node computes on cores of its own.

Two CPU ranks that may both run on every core are moved between the cores by the
scheduler, step after step, and each move costs the moved thread its caches; the ranks
meet at every all-reduce, so the slower one sets the pace. Measured on a 2-core machine,
text-cls, 2 ranks × 1 thread (``benchmarks/step_profile.py``): 117–120 ms per step with
each rank's compute thread on a core of its own against 120–127 ms without, three pairs
of runs out of three. Gloo's communication threads (``gloo_tcp_loop``, ``pt_gloo_runloop``)
must stay free: bound to their rank's core as well, they wait for the compute thread to
yield it, and digits' 4 ms steps took 6.8–7.2 ms instead of 4.9–5.0.

So the work is split in two:

* the launcher (``paratrain run``, ``pt.spawn``) plans, with :func:`plan`: this node's
  usable CPUs (``os.sched_getaffinity``, so a SLURM or ``taskset`` mask is kept), in the
  order of their physical cores (hyperthread siblings together), are cut into equal
  contiguous shares, one per local rank — only when there are at least two ranks and
  each rank's ``OMP_NUM_THREADS`` fit in its share — and exported in :data:`CPU_CORES_VAR`
  (``"0;1"``, ``"0-3;4-7"``: a share per local rank);
* ``pt.Runtime`` binds, with :func:`bind_compute_threads`, once its process groups exist:
  only the thread that calls it (the main thread, whose OpenMP pool, started later,
  inherits the binding). Threads started before — gloo's, the watchdog's — keep every
  core. A process group a script or library creates after ``pt.Runtime()`` starts its
  threads from the bound thread; ``rt.setup`` gives the gloo threads among them every CPU
  again (:func:`free_communication_threads`: DeepSpeed makes its groups there). The
  processes a bound thread starts (DataLoader workers) keep its share, which keeps a
  rank's data loading on its own CPUs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from paratrain.errors import ConfigError

#: One share of CPUs per local rank, ``;``-separated, each in ``taskset -c`` form ("0-3,8").
CPU_CORES_VAR = "PARATRAIN_CPU_CORES"
#: The values of ``paratrain run --cpu-binding`` and ``pt.spawn(cpu_binding=)``.
CPU_BINDING_MODES = ("auto", "none")

SYSFS_CPUS = Path("/sys/devices/system/cpu")


def usable_cpus() -> list[int]:
    """The CPUs this process may run on: its affinity mask, which SLURM and taskset set (what
    torch's own CPU count reads). The one place paratrain asks; ``len()`` of it is its core count."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def core_order(cpus: Iterable[int], sysfs: Path = SYSFS_CPUS) -> list[int]:
    """``cpus`` ordered by (socket, physical core, CPU): a hyperthread's siblings are neighbours,
    so a contiguous share never splits a physical core between two ranks when it can be avoided.
    CPUs whose topology cannot be read keep their number's place."""

    def key(cpu: int) -> tuple[int, int, int]:
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            return (int((topology / "physical_package_id").read_text()), int((topology / "core_id").read_text()), cpu)
        except (OSError, ValueError):
            return (0, cpu, cpu)

    return sorted(cpus, key=key)


def plan(local_processes: int, threads: int, cpus: Sequence[int]) -> list[tuple[int, ...]] | None:
    """An equal, contiguous share of ``cpus`` (in their order) per local process; None when
    there is nothing to bind (one process) or a process's ``threads`` exceed its share (the
    node is oversubscribed: binding would only fix which threads take turns)."""
    if local_processes < 2:
        return None
    size = len(cpus) // local_processes
    if size < max(threads, 1):
        return None
    return [tuple(cpus[i * size:(i + 1) * size]) for i in range(local_processes)]


def node_plan(mode: str, local_processes: int, threads: int,
              setting: str = "--cpu-binding") -> list[tuple[int, ...]] | None:
    """The launcher's plan for this node's CPU workers under ``mode`` (given as ``setting``).

    Raises:
        ConfigError: ``mode`` is not one of :data:`CPU_BINDING_MODES`.
    """
    if mode not in CPU_BINDING_MODES:
        raise ConfigError(f"{setting} {mode!r} is not one of {', '.join(CPU_BINDING_MODES)}")
    if mode == "none":
        return None
    return plan(local_processes, threads, core_order(usable_cpus()))


def encode(shares: Sequence[Sequence[int]]) -> str:
    """``[(0, 1, 2, 3), (4, 5, 6, 7)]`` → ``"0-3;4-7"``."""
    return ";".join(_cpu_list(share) for share in shares)


def decode(text: str) -> list[tuple[int, ...]]:
    """``"0-3;4-7"`` → ``[(0, 1, 2, 3), (4, 5, 6, 7)]``. Raises ValueError on anything else."""
    return [_parse_cpu_list(part) for part in text.split(";")]


def describe(shares: Sequence[Sequence[int]]) -> str:
    """``"local rank 0 on CPU 0, local rank 1 on CPU 1"`` for the launcher's line."""
    return ", ".join(f"local rank {i} on CPU {_cpu_list(share)}" for i, share in enumerate(shares))


def share_for(environ: Mapping[str, str], local_rank: int) -> tuple[int, ...] | None:
    """This local rank's share from :data:`CPU_CORES_VAR`; None when unset, empty or planned
    for fewer ranks. Read before the rendezvous, so that a bad value fails every rank at once.

    Raises:
        ConfigError: the variable is not a list of CPU shares, or gives this rank CPUs this
            process may not use (someone set it by hand).
    """
    text = environ.get(CPU_CORES_VAR, "").strip()
    if not text:
        return None
    try:
        shares = decode(text)
    except ValueError:
        raise ConfigError(
            f"{CPU_CORES_VAR}={text!r} is not a ';'-separated list of CPU shares like '0,1;2-3' "
            f"(paratrain run sets it): unset it, or give --cpu-binding none"
        ) from None
    if not 0 <= local_rank < len(shares):
        return None
    share, usable = shares[local_rank], usable_cpus()
    if not set(share) <= set(usable):
        raise ConfigError(
            f"{CPU_CORES_VAR}={text!r} gives local rank {local_rank} CPU {_cpu_list(share)}, which this process may "
            f"not use (it may use CPU {_cpu_list(usable)}): unset it, or give --cpu-binding none"
        )
    return share


#: Name prefixes of the threads torch's gloo process groups start (gloo's event loop, torch's
#: work loop): communication, which must not wait for its rank's compute thread to yield a CPU.
COMMUNICATION_THREADS = ("gloo", "pt_gloo")


def free_communication_threads(cpus: Iterable[int]) -> int:
    """Give every CPU in ``cpus`` back to this process's gloo threads that a bound thread
    started — those of a process group created after the binding (DeepSpeed makes its own
    in ``rt.setup``). Other threads keep theirs. Returns how many threads were moved."""
    cpus = set(cpus)
    moved = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            tid = int(task.name)
            if not (task / "comm").read_text().startswith(COMMUNICATION_THREADS) or os.sched_getaffinity(tid) == cpus:
                continue
            os.sched_setaffinity(tid, cpus)
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
        moved += 1
    return moved


#: The calling thread's CPUs before :func:`bind_compute_threads` first bound it (None: never bound).
_before_binding: list[int] | None = None


def bind_compute_threads(share: Sequence[int] | None) -> tuple[int, ...] | None:
    """Bind the calling thread (and the threads it starts from now on) to ``share``, from
    :func:`share_for`; other threads keep their CPUs. Returns the share bound, or None."""
    global _before_binding
    if not share or not hasattr(os, "sched_setaffinity"):
        return None
    if _before_binding is None:
        _before_binding = usable_cpus()
    os.sched_setaffinity(0, share)  # Linux: pid 0 is the calling thread, not the whole process
    return tuple(share)


def unbound_cpus() -> list[int]:
    """The CPUs this process had before a thread of it was bound (:func:`usable_cpus` until then):
    what communication threads get back. A script's own ``init_process_group`` under ``paratrain
    run`` binds before ``pt.Runtime`` runs (launch/worker_site/plain_scripts.py)."""
    return list(_before_binding) if _before_binding is not None else usable_cpus()


def _cpu_list(cpus: Iterable[int]) -> str:
    """Sorted CPUs in ``taskset -c`` form: runs of neighbours as ranges."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def _parse_cpu_list(text: str) -> tuple[int, ...]:
    """``"0-3,8"`` → (0, 1, 2, 3, 8). Raises ValueError on anything else (or an empty share)."""
    cpus: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        first, last = int(low), int(high) if dash else int(low)
        if first < 0 or last < first:
            raise ValueError(part)
        cpus.extend(range(first, last + 1))
    return tuple(cpus)
