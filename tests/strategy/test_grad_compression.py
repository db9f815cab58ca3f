"""grad_compression: parsing, and auto's choice from injected link measurements (a pure function)."""

from __future__ import annotations

import pytest
import torch

import paratrain as pt
from paratrain.diagnostics.link_probe import LinkMeasurement
from paratrain.strategy.grad_compression import (
    Choice,
    Compression,
    choose_compression,
    parse_compression,
    powersgd_elements,
)
from paratrain.strategy.gradient_comm import GradientCommunication, bucket_count

TEXT_CLS_GRADIENT = 2_228_000  # bytes: the text-cls model's 557 k fp32 parameters


def link(gbit_per_s: float, latency_ms: float = 0.2, world_size: int = 2, spread: float = 1.0) -> LinkMeasurement:
    """What the probe would report for a link of that speed."""
    return LinkMeasurement(world_size, (4096, 1 << 20), (latency_ms / 1e3, 0.01), latency_ms / 1e3, gbit_per_s * 1e9 / 8,
                           spread)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("none", Compression("none")), ("BF16", Compression("bf16")), ("fp16", Compression("fp16")),
     ("powersgd", Compression("powersgd", 4)), ("powersgd:8", Compression("powersgd", 8)), ("auto", None)],
)
def test_specs_parse(spec, expected):
    assert parse_compression(spec) == expected


@pytest.mark.parametrize("spec", ["int8", "bf16:2", "powersgd:0", "powersgd:x", "", 4])
def test_bad_specs_name_the_accepted_values(spec):
    with pytest.raises(pt.ConfigError, match=r"grad_compression .*(powersgd\[:RANK\]|positive integer|string)"):
        parse_compression(spec)


def test_one_node_keeps_fp32_whatever_the_link():
    for measured in (None, link(0.1), link(100)):
        choice = choose_compression(measured, TEXT_CLS_GRADIENT, num_nodes=1)
        assert choice.compression == Compression("none") and "one node" in choice.reason


@pytest.mark.parametrize(
    ("gbit", "gradient", "expected"),
    [
        (10.0, TEXT_CLS_GRADIENT, "none"),  # ~3.6 ms per all-reduce: nothing to gain
        (1.0, TEXT_CLS_GRADIENT, "bf16"),  # ~18 ms fp32, ~9 ms bf16
        (0.1, TEXT_CLS_GRADIENT, "powersgd:4"),  # ~90 ms even in bf16
        (10.0, 440_000_000, "powersgd:4"),  # BERT-base: 0.35 s per fp32 all-reduce at 10 Gbit/s
        (1.0, 20_000, "none"),  # a tiny model: latency only
    ],
)
def test_auto_picks_from_bandwidth_and_gradient_size(gbit, gradient, expected):
    choice = choose_compression(link(gbit), gradient, num_nodes=2)
    assert str(choice.compression) == expected
    assert "Gbit/s" in choice.reason and "ms per step" in choice.reason


def test_latency_counts_too():
    # A fast but high-latency link: fp32 needs 30 ms of latency alone, bf16 cannot fix that either.
    assert str(choose_compression(link(10.0, latency_ms=30), TEXT_CLS_GRADIENT, num_nodes=2).compression) == "powersgd:4"


def test_powersgd_message_size_follows_torchs_rule():
    assert powersgd_elements(torch.Size([512, 128]), 4) == (512 + 128) * 4
    assert powersgd_elements(torch.Size([128]), 4) == 128  # vectors go uncompressed
    assert powersgd_elements(torch.Size([3, 3]), 4) == 9  # compressing would not save


def test_report_says_communication_bound_with_numbers():
    comm = GradientCommunication("none", num_nodes=2)
    comm.link, comm.gradient_bytes = link(0.1), TEXT_CLS_GRADIENT
    text = comm.report(step_seconds=0.3)
    assert "COMMUNICATION-BOUND" in text and "--grad-accum 4" in text and "powersgd" in text
    assert "~178 ms of each 300 ms step (59%), compute ~122 ms" in text  # 2.228 MB at 12.5 MB/s + 0.2 ms
    assert "each step takes 2.5x its compute time" in text
    fast = GradientCommunication("bf16", num_nodes=2)
    fast.link, fast.gradient_bytes = link(10), TEXT_CLS_GRADIENT
    assert "compute-bound" in fast.report(step_seconds=0.3)
    assert GradientCommunication("auto", num_nodes=1).report(0.3) is None  # one node: nothing measured


def test_no_advice_when_the_link_measurement_is_too_noisy_to_stand():
    # Seen: 126-793 MB/s on one loaded link, and the advice flipped between identical runs.
    comm = GradientCommunication("none", num_nodes=2)
    comm.link, comm.gradient_bytes = link(0.1, spread=1.1), TEXT_CLS_GRADIENT  # 54% even at 1.1x faster: bound
    assert "COMMUNICATION-BOUND" in comm.report(step_seconds=0.3)
    comm.link = link(0.1, spread=6.3)  # 178 ms could be 28 ms: bound or not, nobody knows
    text = comm.report(step_seconds=0.3)
    assert "COMMUNICATION-BOUND" not in text and "--grad-accum" not in text
    assert "varied 6.3x between measurements" in text and "~9%-100% of each step: no advice" in text


def test_bucket_count_follows_ddps_first_small_bucket():
    mib = 2**20
    assert bucket_count(TEXT_CLS_GRADIENT, mib, 25 * mib) == 2  # 2.2 MB: 1 MiB first, then the rest
    assert bucket_count(TEXT_CLS_GRADIENT, 25 * mib, 25 * mib) == 1
    assert bucket_count(6 * mib, 2 * mib, 2 * mib) == 3


def test_powersgd_asks_gloo_for_one_bucket_and_keeps_a_users_size():
    comm = GradientCommunication("powersgd:4", num_nodes=2)
    comm.choice, comm.gradient_bytes = Choice(comm.requested, "as requested"), 3 * 2**20
    assert comm.ddp_bucket_cap_mb("gloo", None) == 4.0  # all gradients and a MiB to spare
    assert comm.ddp_bucket_cap_mb("gloo", 2.0) == 2.0
    assert comm.ddp_bucket_cap_mb("nccl", None) is None  # NCCL needs no ordering wait
    bf16 = GradientCommunication("bf16", num_nodes=2)
    bf16.choice = Choice(bf16.requested, "as requested")
    assert bf16.ddp_bucket_cap_mb("gloo", None) is None
