"""The gradient reduction of ``strategy="ft-ddp"``: inside a replica group, then across groups, in two levels.

Rank ``i`` of every replica group holds the same part of the gradients (torchft's layout is HSDP's):
the group averages its gradients with a plain all-reduce, rank ``i`` averages only the ``i``-th of
``K`` chunks over its *ring* (rank ``i`` of every group of the quorum, through torchft's Manager), and
a second all-reduce inside the group hands every rank the chunks of the others. Each rank sends ``1/K``
of the gradients across groups. A ring whose peer died fails that rank's all-reduce: the Manager
records it (the group's commit vote is then no) instead of DDP receiving an unfinished future.
"""

from __future__ import annotations

from typing import Any

import torch

from paratrain import comm


def reporting_ddp() -> type:
    """torchft's DDP with the two-level gradient reduction of a replica group of several processes
    (:mod:`paratrain.strategy.ft_ddp`), whose hook reports a failed all-reduce across
    groups to the Manager instead of handing DDP an unfinished future (torchft 0.2.0 returns ``None``
    there when a peer dies inside the all-reduce, and the survivor crashes in C++)."""
    from torchft.ddp import DistributedDataParallel

    class ReportingDistributedDataParallel(DistributedDataParallel):
        @staticmethod
        def _comm_hook(manager, bucket):
            buffer = bucket.buffer()
            size = comm.world_size()
            if size == 1:
                across_groups(manager, buffer)
            else:
                # The group's mean, then this rank's chunk across groups, then every chunk to every rank.
                # The collectives inside the group run whatever happened across: they keep the group's
                # ranks in step, and a step with a failed chunk is dropped by the group's vote.
                torch.distributed.all_reduce(buffer)
                buffer.div_(size)
                chunks = buffer.tensor_split(size)
                across_groups(manager, chunks[comm.rank()])
                for index, chunk in enumerate(chunks):
                    if index != comm.rank():
                        chunk.zero_()
                torch.distributed.all_reduce(buffer)
            done = torch.futures.Future()
            done.set_result(buffer)
            return done

    return ReportingDistributedDataParallel


def across_groups(manager: Any, tensor: torch.Tensor) -> None:
    """Average ``tensor`` in place over this rank's ring. A failure (a peer died inside it) is recorded
    on the Manager (its commit vote is then no) and leaves garbage that the dropped step never applies."""
    if tensor.numel():  # the same on every group: their buckets have the same sizes
        manager.allreduce(tensor).wait()
