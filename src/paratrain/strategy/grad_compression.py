"""Which gradient compression a DDP job uses, and why: ``grad_compression="…"``.

=================  ==========================================================================
``none``           fp32 all-reduce (DDP's own)
``bf16``, ``fp16`` gradients cast to 16 bits for the all-reduce: half the bytes
                   (torch's ``default_hooks.bf16_compress_hook`` / ``fp16_compress_hook``)
``powersgd[:R]``   rank-R PowerSGD with error feedback and warm start (torch's
                   ``powerSGD_hook``); default rank 4
``auto``           one of the above from the measured link and the gradient size
                   (:func:`choose_compression`); one node keeps ``none``
=================  ==========================================================================

:func:`choose_compression` is a pure function of a link measurement (latency and bus
bandwidth, see :mod:`paratrain.diagnostics.link_probe`) and the gradient size, so the
rule can be read and tested on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from paratrain.errors import ConfigError

MODES = ("none", "bf16", "fp16", "powersgd", "auto")
DEFAULT_POWERSGD_RANK = 4

#: ``auto`` keeps fp32 while one fp32 all-reduce of the gradients is predicted to take at most
#: this long: a step of a small model on one CPU core takes ~100 ms, so 10 ms is ≤ 10 % of it.
FAST_ENOUGH_S = 0.010
#: ``auto`` takes bf16 while the halved all-reduce is predicted at most this long; beyond it the
#: link is so slow that only PowerSGD's 10-100× smaller messages keep two nodes ahead of one.
BF16_ENOUGH_S = 0.030


@dataclass(frozen=True)
class Compression:
    """A gradient compression: ``mode`` in ``none|bf16|fp16|powersgd``, ``rank`` for PowerSGD."""

    mode: str
    rank: int | None = None

    def __str__(self) -> str:
        return f"{self.mode}:{self.rank}" if self.mode == "powersgd" else self.mode

    def message_bytes(self, gradient_bytes: int, shapes: list[torch.Size] | None = None) -> float:
        """Bytes one rank sends into the all-reduce per step for fp32 gradients of ``gradient_bytes``.

        PowerSGD's size depends on the matrix shapes (``shapes``); without them it is
        estimated as a 1/16 of fp32, the ratio of a rank-4 approximation of a 128-wide layer.
        """
        if self.mode in ("bf16", "fp16"):
            return gradient_bytes / 2
        if self.mode == "powersgd":
            if not shapes:
                return gradient_bytes / 16
            return 4 * sum(powersgd_elements(shape, self.rank or DEFAULT_POWERSGD_RANK) for shape in shapes)
        return float(gradient_bytes)


def powersgd_elements(shape: torch.Size, rank: int, min_compression_rate: float = 2.0) -> int:
    """Elements PowerSGD all-reduces for one gradient of ``shape`` (P and Q, or the tensor
    itself when compressing would not save ``min_compression_rate``; torch's ``_should_compress``)."""
    numel = 1
    for size in shape:
        numel *= size
    if len(shape) == 0:
        return 1
    rows = shape[0]
    cols = numel // rows if rows else 0
    effective = min(rows, cols, rank)
    compressed = (rows + cols) * effective
    return compressed if compressed * min_compression_rate < numel else numel


def parse_compression(spec: str) -> Compression | None:
    """``"none" | "bf16" | "fp16" | "powersgd[:RANK]"`` → :class:`Compression`; ``"auto"`` → ``None``.

    Raises:
        ConfigError: anything else (names the accepted values).
    """
    if not isinstance(spec, str):
        raise ConfigError(f"grad_compression must be a string such as 'bf16' or 'powersgd:4', got {spec!r}")
    mode, _, rank_text = spec.strip().lower().partition(":")
    if mode not in MODES or (rank_text and mode != "powersgd"):
        raise ConfigError(
            f"grad_compression {spec!r} is not one of: none, bf16, fp16, powersgd[:RANK] (e.g. powersgd:4), auto"
        )
    if mode == "auto":
        return None
    if mode != "powersgd":
        return Compression(mode)
    if not rank_text:
        return Compression(mode, DEFAULT_POWERSGD_RANK)
    if not rank_text.isdigit() or int(rank_text) < 1:
        raise ConfigError(f"grad_compression {spec!r}: the PowerSGD rank must be a positive integer, e.g. powersgd:4")
    return Compression(mode, int(rank_text))


class Link(Protocol):
    """What the choice needs of a link measurement (``LinkMeasurement`` has it)."""

    world_size: int
    latency_s: float
    bus_bandwidth_Bps: float

    def allreduce_seconds(self, nbytes: float) -> float: ...


@dataclass(frozen=True)
class Choice:
    """What ``auto`` picked and the one-line reason it logs."""

    compression: Compression
    reason: str


def choose_compression(link: Link | None, gradient_bytes: int, num_nodes: int) -> Choice:
    """Pick a compression for ``gradient_bytes`` of fp32 gradients over ``link``.

    * one node (or no measurement): ``none`` — processes on one machine share memory
      or PCIe/NVLink, and compression would only cost accuracy and compute;
    * a predicted fp32 all-reduce ≤ :data:`FAST_ENOUGH_S`: ``none``;
    * a predicted bf16 all-reduce ≤ :data:`BF16_ENOUGH_S`: ``bf16`` (half the bytes,
      the same exponent range as fp32, no state);
    * slower: ``powersgd:4``.

    The prediction is ``latency + bytes · 2(n−1)/n / bus bandwidth`` (the ring all-reduce
    that the bus bandwidth is defined against).
    """
    if num_nodes <= 1 or link is None or link.world_size <= 1:
        return Choice(Compression("none"), "one node: gradients stay uncompressed fp32")
    fp32_s = link.allreduce_seconds(gradient_bytes)
    bf16_s = link.allreduce_seconds(gradient_bytes / 2)
    seen = (
        f"{_megabytes(gradient_bytes)} of fp32 gradients over {_gbits(link.bus_bandwidth_Bps)} "
        f"(latency {link.latency_s * 1e3:.2f} ms): fp32 all-reduce ~{fp32_s * 1e3:.0f} ms per step"
    )
    if fp32_s <= FAST_ENOUGH_S:
        return Choice(Compression("none"), f"{seen}, within {FAST_ENOUGH_S * 1e3:.0f} ms: no compression needed")
    if bf16_s <= BF16_ENOUGH_S:
        return Choice(Compression("bf16"), f"{seen}, bf16 ~{bf16_s * 1e3:.0f} ms: bf16 halves it")
    return Choice(
        Compression("powersgd", DEFAULT_POWERSGD_RANK),
        f"{seen}, bf16 still ~{bf16_s * 1e3:.0f} ms (> {BF16_ENOUGH_S * 1e3:.0f} ms): "
        f"PowerSGD rank {DEFAULT_POWERSGD_RANK} sends low-rank factors instead",
    )


def gradient_shapes(module: torch.nn.Module) -> list[torch.Size]:
    """Shapes of the gradients DDP all-reduces (trainable parameters)."""
    return [p.shape for p in module.parameters() if p.requires_grad]


def gradient_bytes(module: torch.nn.Module) -> int:
    """Bytes of one full gradient of ``module`` in its parameters' dtype."""
    return sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)


def _megabytes(nbytes: float) -> str:
    return f"{nbytes / 1e6:.2f} MB"


def _gbits(bytes_per_s: float) -> str:
    return f"{bytes_per_s * 8 / 1e9:.3g} Gbit/s"
