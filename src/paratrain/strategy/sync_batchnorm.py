"""BatchNorm statistics over the whole global batch (``sync_batchnorm=True``).

On CUDA this is torch's ``SyncBatchNorm``. Torch refuses it on CPU ("SyncBatchNorm
expected input tensor to be on GPU": its kernels ``batch_norm_stats`` & co. are
CUDA-only; CPU support was proposed in pytorch/pytorch#78078 and not merged), and
DDP refuses any ``SyncBatchNorm`` instance in a CPU module. So on CPU the BatchNorm
layers become :class:`CPUSyncBatchNorm` (a ``_BatchNorm``, not a ``SyncBatchNorm``),
which computes the same statistics with two differentiable all-reduces over gloo.
State-dict keys are those of the original BatchNorm, so checkpoints move freely
between devices and strategies.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.modules.batchnorm import _BatchNorm


class _AllReduceSum(torch.autograd.Function):
    """Sum over ranks; the gradient of every rank's copy is the sum of all ranks' gradients."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        out = tensor.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class CPUSyncBatchNorm(_BatchNorm):
    """BatchNorm over the global batch for CPU tensors (gloo); any input with >= 2 dims.

    In training mode, forward is collective: all ranks of the process group must
    run it together, with the same number of BatchNorm layers.
    """

    def __init__(self, *args, process_group=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_available() and dist.is_initialized()):
            return super().forward(input)
        self._check_input_dim(input)
        group = self.process_group or dist.group.WORLD
        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average, as in torch's BatchNorm
                factor = 1.0 / float(self.num_batches_tracked)
        dtype = input.dtype
        input = input.float()  # statistics in fp32 even when autocast hands us bf16/fp16
        dims = [0, *range(2, input.dim())]
        shape = [1, -1] + [1] * (input.dim() - 2)
        # Two passes (mean, then squared deviations) rather than E[x^2] - E[x]^2, which
        # cancels catastrophically when the mean is large next to the spread.
        count = torch.tensor([input.numel() // input.size(1)], dtype=input.dtype, device=input.device)
        sums = _AllReduceSum.apply(torch.cat([input.sum(dims), count]), group)
        total = sums[-1]
        mean = sums[:-1] / total
        centered = input - mean.reshape(shape)
        var = _AllReduceSum.apply((centered * centered).sum(dims), group) / total
        out = centered * torch.rsqrt(var + self.eps).reshape(shape)
        if self.affine:
            out = out * self.weight.reshape(shape) + self.bias.reshape(shape)
        if self.track_running_stats:
            with torch.no_grad():
                unbiased = var * total / (total - 1).clamp(min=1)
                self.running_mean.lerp_(mean.detach(), factor)
                self.running_var.lerp_(unbiased.detach(), factor)
        return out.to(dtype)


def convert_sync_batchnorm(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """Replace every ``BatchNorm*d`` by a synchronised one for ``device``'s type.

    The new layers hold the original layers' parameters and buffers (not copies),
    so optimizers built before ``setup`` stay valid.
    """
    if device.type != "cpu":
        return torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)
    return _convert_for_cpu(module)


def _convert_for_cpu(module: torch.nn.Module) -> torch.nn.Module:
    # Mirrors torch.nn.SyncBatchNorm.convert_sync_batchnorm, building CPUSyncBatchNorm instead.
    if isinstance(module, _BatchNorm) and not isinstance(module, CPUSyncBatchNorm):
        converted = CPUSyncBatchNorm(
            module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats
        )
        if module.affine:
            converted.weight = module.weight
            converted.bias = module.bias
        converted.running_mean = module.running_mean
        converted.running_var = module.running_var
        converted.num_batches_tracked = module.num_batches_tracked
        converted.training = module.training
        return converted
    for name, child in module.named_children():
        module.add_module(name, _convert_for_cpu(child))
    return module
