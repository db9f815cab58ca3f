"""How fast is the link between the ranks? Time a few all-reduces and say.

``measure_allreduce`` all-reduces float32 buffers of a few sizes (a latency-sized one
and gradient-sized ones) and reports the median time per size, the latency (the
smallest size's time) and the *bus bandwidth* as nccl-tests defines it for
all_reduce (``docs/PERFORMANCE.md`` of nccl-tests)::

    bus bandwidth = size · 2(n − 1)/n / time

so that the figure is comparable with the link's line rate whatever the number of
ranks: a ring all-reduce moves ``2(n − 1)/n`` times the buffer over each link.

The module imports only torch and :mod:`paratrain.comm`, so the strategy layer (the
``auto`` gradient compression) and ``paratrain doctor`` can both use it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from paratrain import comm
from paratrain.errors import CollectiveTimeoutError, ConfigError

DEFAULT_SIZES_BYTES = (4096, 1 << 20, 16 << 20)
_FLOAT32_BYTES = 4


@dataclass(frozen=True)
class LinkMeasurement:
    """What :func:`measure_allreduce` found; identical on every rank.

    Attributes:
        world_size: ranks that took part.
        sizes_bytes: buffer sizes timed (bytes actually sent: whole float32 elements).
        seconds: median all-reduce time per size (the slowest rank's median).
        latency_s: the smallest size's time: per-collective overhead of the link.
        bus_bandwidth_Bps: bytes per second at the largest size, nccl-tests' bus
            bandwidth (``size · 2(n−1)/n / time``); ``math.inf`` with one rank
            (nothing crosses a link).
        spread: slowest / fastest repeat at the largest size (the largest on any rank):
            how far one measurement of this link may be from the next (1.0: steady).
    """

    world_size: int
    sizes_bytes: tuple[int, ...]
    seconds: tuple[float, ...]
    latency_s: float
    bus_bandwidth_Bps: float
    spread: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (an infinite bandwidth becomes ``None``)."""
        out = asdict(self)
        out["sizes_bytes"] = list(self.sizes_bytes)
        out["seconds"] = list(self.seconds)
        if math.isinf(self.bus_bandwidth_Bps):
            out["bus_bandwidth_Bps"] = None
        return out

    def allreduce_seconds(self, nbytes: float) -> float:
        """Predicted time of one all-reduce of ``nbytes``: latency + bytes over the bus bandwidth."""
        if self.world_size <= 1:
            return 0.0
        factor = 2 * (self.world_size - 1) / self.world_size
        return self.latency_s + nbytes * factor / self.bus_bandwidth_Bps

    def describe(self) -> str:
        """One line: ``latency 0.21 ms, bus bandwidth 112.3 MB/s (0.90 Gbit/s) over 2 ranks``."""
        if math.isinf(self.bus_bandwidth_Bps):
            return f"one rank: no link to measure ({self.world_size} rank)"
        mbytes = self.bus_bandwidth_Bps / 1e6
        gbits = self.bus_bandwidth_Bps * 8 / 1e9
        return (
            f"latency {self.latency_s * 1e3:.2f} ms, bus bandwidth {mbytes:.1f} MB/s ({gbits:.3g} Gbit/s) "
            f"over {self.world_size} ranks"
        )


def measure_allreduce(
    sizes_bytes: Sequence[int] = DEFAULT_SIZES_BYTES,
    repeats: int = 5,
    group: Any = None,
    device: torch.device | str | None = None,
) -> LinkMeasurement:
    """Time all-reduces of ``sizes_bytes`` over ``group`` and return the link's figures.

    Collective: every rank of ``group`` (default: the whole job) must call it together
    with the same ``sizes_bytes`` and ``repeats``, or the others wait until the timeout.
    Every rank returns the same :class:`LinkMeasurement` (per size, the slowest rank's
    median), so decisions taken from it agree across ranks.

    For each size one untimed all-reduce warms the connection up, then ``repeats``
    timed ones follow, each after a one-element all-reduce that lines the ranks up (so
    a late rank's lag is not counted as transfer time). Buffers are float32 on
    ``device`` (default: the current CUDA device for NCCL, else CPU). Without a process
    group, or with one rank, nothing is sent: times are 0 and the bandwidth infinite.

    Every wait ends after the process group's timeout (``pt.Runtime(timeout=…)``), or
    ``PARATRAIN_TIMEOUT`` seconds when that is shorter and the backend honours a
    per-wait timeout (NCCL; gloo's waits end at the group's timeout).

    Raises:
        ConfigError: empty or non-positive ``sizes_bytes``, or ``repeats`` < 1.
        CollectiveTimeoutError: an all-reduce did not finish in time (a rank did not
            call ``measure_allreduce``, or the link is down).
    """
    sizes = _validated_sizes(sizes_bytes)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"measure_allreduce: repeats must be a positive integer, got {repeats!r}")
    if not comm.is_initialized() or dist.get_world_size(group) == 1:
        zeros = tuple(0.0 for _ in sizes)
        return LinkMeasurement(1, sizes, zeros, 0.0, math.inf)

    world_size = dist.get_world_size(group)
    device = torch.device(device) if device is not None else _default_device(group)
    timeout = timedelta(seconds=comm.DEFAULT_TIMEOUT_S)
    line_up = torch.zeros(1, device=device)
    medians = []
    for size in sizes:
        buffer = torch.zeros(size // _FLOAT32_BYTES, device=device)
        _all_reduce(buffer, group, timeout, device, size)  # warm-up: connection setup, allocations
        times = []
        for _ in range(repeats):
            _all_reduce(line_up, group, timeout, device, line_up.numel() * _FLOAT32_BYTES)
            start = time.perf_counter()
            _all_reduce(buffer, group, timeout, device, size)
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    spread = max(times) / min(times) if min(times) > 0 else 1.0  # the largest size's repeats
    slowest = torch.tensor([*medians, spread], dtype=torch.float64, device=device)
    _all_reduce(slowest, group, timeout, device, slowest.numel() * 8, op=dist.ReduceOp.MAX)
    *seconds, spread = (float(s) for s in slowest.cpu())
    factor = 2 * (world_size - 1) / world_size
    bandwidth = sizes[-1] * factor / seconds[-1] if seconds[-1] > 0 else math.inf
    return LinkMeasurement(world_size, sizes, tuple(seconds), seconds[0], bandwidth, spread)


def _validated_sizes(sizes_bytes: Sequence[int]) -> tuple[int, ...]:
    try:
        sizes = tuple(sorted(int(s) for s in sizes_bytes))
    except (TypeError, ValueError):
        raise ConfigError(f"measure_allreduce: sizes_bytes must be integers, got {sizes_bytes!r}") from None
    if not sizes or sizes[0] < _FLOAT32_BYTES:
        raise ConfigError(
            f"measure_allreduce: sizes_bytes must be one or more sizes of at least {_FLOAT32_BYTES} bytes, "
            f"got {sizes_bytes!r}"
        )
    # Whole float32 elements: the sizes reported are the bytes actually sent.
    return tuple(s - s % _FLOAT32_BYTES for s in sizes)


def _default_device(group: Any) -> torch.device:
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _all_reduce(
    tensor: torch.Tensor,
    group: Any,
    timeout: timedelta,
    device: torch.device,
    nbytes: int,
    op: Any = dist.ReduceOp.SUM,
) -> None:
    work = dist.all_reduce(tensor, op=op, group=group, async_op=True)
    try:
        work.wait(timeout)
    except RuntimeError as exc:
        raise CollectiveTimeoutError(
            f"link probe: an all-reduce of {nbytes} bytes did not finish in time; "
            "every rank must call measure_allreduce together — look for a rank that crashed, took another "
            f"code path, or lost its network link ({exc})"
        ) from exc
    if device.type == "cuda":
        torch.cuda.synchronize(device)
