"""How a DDP job's gradients cross the network: measured, chosen, registered, reported.

At wrap time on a multi-node job the link is measured (a few all-reduces, see
:mod:`paratrain.diagnostics.link_probe`) and logged; ``grad_compression="auto"``
picks from that measurement and the gradient size (:func:`choose_compression`);
the chosen compression is one of torch's DDP communication hooks. After the first
steps :meth:`GradientCommunication.report` compares the predicted communication time
with the measured step and says whether the job is communication-bound, by how
much, and what gradient accumulation would buy.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from paratrain import comm
from paratrain.strategy.grad_compression import (
    Choice,
    Compression,
    choose_compression,
    gradient_bytes,
    gradient_shapes,
    parse_compression,
)
from paratrain.strategy.powersgd_state import PowerSGDComm, powersgd_hook, waits_per_bucket

#: Communication above this share of a step is called communication-bound.
BOUND_SHARE = 0.5


def bf16_compress(process_group, bucket):  # unannotated: DDP checks hook annotations as objects, not strings
    """torch's ``bf16_compress_hook`` under another name.

    DDP refuses a hook *named* ``bf16_compress_hook`` unless CUDA with NCCL ≥ 2.10 is
    present, a guard for NCCL; gloo reduces bfloat16 tensors on CPU, so the same hook
    works there when registered under this name.
    """
    return default_hooks.bf16_compress_hook(process_group, bucket)


class GradientCommunication:
    """One DDP job's gradient communication: the requested compression, what it became, the link.

    Args:
        spec: ``"none" | "bf16" | "fp16" | "powersgd[:RANK]" | "auto"``.
        num_nodes: nodes in the job (one node never measures and ``auto`` keeps fp32).

    Raises:
        ConfigError: an unknown ``spec``.
    """

    def __init__(self, spec: str, num_nodes: int):
        self.requested = parse_compression(spec)  # None: auto
        self.num_nodes = num_nodes
        self.buckets = 1  # DDP's buckets: all-reduce calls per step (each of PowerSGD's three phases); see register
        self.link: Any = None
        self.choice: Choice | None = None
        self.powersgd: PowerSGDComm | None = None
        self.gradient_bytes = 0
        self.shapes: list[torch.Size] = []

    @property
    def compression(self) -> Compression:
        return self.choice.compression if self.choice else (self.requested or Compression("none"))

    def choose(self, module: torch.nn.Module, group: Any = None) -> None:
        """Measure the link (several nodes) and choose the compression. Collective over ``group``
        (DDP's, default: the whole job); before DDP is built, so that the choice can shape
        its buckets (:meth:`ddp_bucket_cap_mb`)."""
        log = comm.get_logger()
        self.gradient_bytes = gradient_bytes(module)
        self.shapes = gradient_shapes(module)
        if self.num_nodes > 1:
            from paratrain.diagnostics.link_probe import measure_allreduce

            size = int(min(max(self.gradient_bytes, 1 << 16), 16 << 20))
            self.link = measure_allreduce((4096, size), repeats=3, group=group)
            log.info(f"link between the {self.num_nodes} nodes: {self.link.describe()}")
        if self.requested is None:
            # Every rank has the same measurement (the probe reduces it), so all choose alike.
            self.choice = choose_compression(self.link, self.gradient_bytes, self.num_nodes)
            log.info(f"grad_compression auto → {self.choice.compression}: {self.choice.reason}")
        else:
            self.choice = Choice(self.requested, "as requested")
            if self.requested.mode != "none":
                log.info(f"grad_compression {self.requested}")

    def ddp_bucket_cap_mb(self, backend: str, requested: float | None) -> float | None:
        """DDP's bucket size for the chosen compression: ``requested`` when the user gave one.

        PowerSGD on gloo gets one bucket for all gradients. Its hook must wait for a bucket's
        three all-reduces before the next bucket starts (see ``powersgd_hook``), so a bucket
        that fills during the backward stops the backward for three round trips and lines
        the ranks up mid-step; with one bucket that happens once, at the end of the backward,
        where DDP waits anyway.
        """
        if requested is not None or self.compression.mode != "powersgd" or not waits_per_bucket(backend):
            return requested
        return self.gradient_bytes / 2**20 + 1  # DDP counts MiB; the first bucket too, once a size is given

    def register(self, ddp: torch.nn.parallel.DistributedDataParallel, module: torch.nn.Module) -> None:
        """Register the chosen compression's communication hook on ``ddp`` (after :meth:`choose`).

        Raises:
            RuntimeError: called before :meth:`choose` (a programming error, not a user's).
        """
        if self.choice is None:
            raise RuntimeError("GradientCommunication.register called before choose")
        mode = self.compression.mode
        if mode == "bf16":
            ddp.register_comm_hook(ddp.process_group, bf16_compress)
        elif mode == "fp16":
            ddp.register_comm_hook(ddp.process_group, default_hooks.fp16_compress_hook)
        elif mode == "powersgd":
            self.powersgd = PowerSGDComm(module, self.compression.rank or 1, ddp.process_group)
            ddp.register_comm_hook(self.powersgd, powersgd_hook)
        small_first = getattr(ddp, "bucket_bytes_cap_default", True)  # DDP's own sizes: a 1 MiB first bucket
        first = dist._DEFAULT_FIRST_BUCKET_BYTES if small_first else ddp.bucket_bytes_cap
        self.buckets = bucket_count(self.gradient_bytes, first, ddp.bucket_bytes_cap)

    # ---- state (PowerSGD's error feedback and warm start; differs per rank) ------------------
    def state_dict(self) -> dict[str, Any]:
        return {"powersgd": self.powersgd.state_dict()} if self.powersgd is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.powersgd is not None and "powersgd" in state:
            self.powersgd.load_state_dict(state["powersgd"])

    # ---- after the first steps ---------------------------------------------------------------
    def communication_seconds(self) -> float:
        """Predicted gradient communication per optimizer step over the measured link."""
        if self.link is None or self.link.world_size <= 1:
            return 0.0
        message = self.compression.message_bytes(self.gradient_bytes, self.shapes)
        calls = self.buckets * (3 if self.compression.mode == "powersgd" else 1)  # PowerSGD: rest, P, Q
        factor = 2 * (self.link.world_size - 1) / self.link.world_size
        return calls * self.link.latency_s + message * factor / self.link.bus_bandwidth_Bps

    def report(self, step_seconds: float) -> str | None:
        """Plain words on communication vs compute for a measured ``step_seconds``; None on one node."""
        if self.link is None or step_seconds <= 0:
            return None
        comm_s = min(self.communication_seconds(), step_seconds)
        compute_s = step_seconds - comm_s
        share = comm_s / step_seconds
        head = (
            f"gradient communication ({self.compression}) ~{comm_s * 1e3:.0f} ms of each {step_seconds * 1e3:.0f} ms "
            f"step ({share:.0%}), compute ~{compute_s * 1e3:.0f} ms"
        )
        if share < BOUND_SHARE:
            return f"{head}: compute-bound, the link keeps up"
        # Advice that the next run would contradict is worse than none: give it only when the
        # step is communication-bound even at the fastest the link was measured.
        spread = max(self.link.spread, 1.0)
        if min(comm_s / spread, step_seconds) / step_seconds < BOUND_SHARE:
            low, high = comm_s / spread / step_seconds, min(comm_s * spread / step_seconds, 1.0)
            return (f"{head}; the link's speed varied {spread:.1f}x between measurements, so communication is "
                    f"~{low:.0%}-{high:.0%} of each step: no advice from so noisy a measurement "
                    "(paratrain doctor measures the link again)")
        slower = step_seconds / max(compute_s, 1e-9)
        advice = []
        for micro in (2, 4, 8):
            # Accumulating N micro-batches: N computes, one all-reduce per optimizer step.
            speedup = micro * step_seconds / (micro * compute_s + comm_s)
            advice.append(f"--grad-accum {micro}: ~{speedup:.2f}x samples/s")
        text = (
            f"{head}: COMMUNICATION-BOUND, each step takes {slower:.1f}x its compute time. "
            f"Fewer all-reduces per sample: {', '.join(advice)} (a larger global batch)"
        )
        if self.compression.mode in ("none", "fp16", "bf16"):
            text += "; or --grad-compression powersgd:4 (~10-100x fewer bytes)"
        return text


def bucket_count(gradient_bytes: int, first_cap_bytes: int, cap_bytes: int) -> int:
    """About how many buckets (all-reduce calls per step) DDP makes of ``gradient_bytes``: a first
    bucket of up to ``first_cap_bytes`` (DDP's 1 MiB when the size is its default), then
    ``cap_bytes`` each (tensors are not split, so this is a lower bound)."""
    if gradient_bytes <= first_cap_bytes:
        return 1
    return 1 + math.ceil((gradient_bytes - first_cap_bytes) / cap_bytes)
