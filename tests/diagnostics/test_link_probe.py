"""The link probe: all-reduce timings between 2 real processes, and its refusals."""

from __future__ import annotations

import math

import pytest

import paratrain as pt
from paratrain.diagnostics.link_probe import LinkMeasurement, measure_allreduce
from tests.diagnostics.workers import probe_link


def test_two_processes_agree_on_one_measurement_with_nccl_tests_bus_bandwidth():
    sizes = (4096, 1 << 16, 1 << 20)
    rank0, rank1 = pt.spawn(probe_link, nprocs=2, args=(sizes, 3))
    assert rank0 == rank1  # the slowest rank's medians, on every rank
    assert rank0["world_size"] == 2 and rank0["sizes_bytes"] == list(sizes)
    assert len(rank0["seconds"]) == 3 and all(s > 0 for s in rank0["seconds"])
    assert rank0["latency_s"] == rank0["seconds"][0]
    # nccl-tests: bus bandwidth = size * 2(n-1)/n / time, at the largest size.
    assert rank0["bus_bandwidth_Bps"] == pytest.approx(sizes[-1] * 2 * (2 - 1) / 2 / rank0["seconds"][-1])
    measured = LinkMeasurement(**{k: tuple(v) if isinstance(v, list) else v for k, v in rank0.items()})
    assert measured.allreduce_seconds(sizes[-1]) == pytest.approx(rank0["latency_s"] + rank0["seconds"][-1])
    assert "over 2 ranks" in measured.describe()


def test_without_a_process_group_nothing_is_sent():
    measured = measure_allreduce((4096, 8192), repeats=1)
    assert measured.world_size == 1 and measured.seconds == (0.0, 0.0)
    assert math.isinf(measured.bus_bandwidth_Bps)
    assert measured.to_dict()["bus_bandwidth_Bps"] is None
    assert measured.allreduce_seconds(1 << 30) == 0.0


@pytest.mark.parametrize(
    ("sizes", "repeats", "message"),
    [((), 5, "one or more sizes"), ((0,), 5, "at least 4 bytes"), (("big",), 5, "must be integers"),
     ((4096,), 0, "repeats must be a positive integer")],
)
def test_bad_arguments_are_refused(sizes, repeats, message):
    with pytest.raises(pt.ConfigError, match=message):
        measure_allreduce(sizes, repeats=repeats)


def test_a_rank_that_never_probes_ends_in_a_timeout_error_not_a_hang():
    """The Runtime's own watchdog (timeout=3) names the rank that stays away, before gloo's timeout."""
    from tests.diagnostics.workers import probe_while_rank1_stays_away

    with pytest.raises(pt.WorkerError, match=r"raised CollectiveTimeoutError: stall: no progress for 3s: rank 1 .* in "
                                             r"probe_while_rank1_stays_away .*\(not in a collective: the others wait "
                                             r"for it\); rank 0 waits .*\(inside a collective\)"):
        pt.spawn(probe_while_rank1_stays_away, nprocs=2)
