"""Which update kernel an optimizer uses: fused, foreach, or torch's per-parameter loop.

torch's optimizers take ``fused=True`` (one kernel updates every parameter) or
``foreach=True`` (one call per operation over all parameters) but leave both unset,
and unset means a Python loop over the parameters on CPU. On the text-cls model
(992 k parameters in 41 tensors, one thread) an AdamW step took 5.2-7.7 ms that way
and 1.0-1.6 ms fused.
paratrain builds its own optimizers with :func:`kernel_options`, and
:func:`fusable_hint` tells a user whose optimizer could be fused which argument to
add (once per process, on rank 0; ``PARATRAIN_OPTIMIZER_HINT=0`` silences it).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable

import torch
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

from paratrain import comm

#: Set to ``0`` to silence the one-time hint about a user's optimizer that could be fused.
HINT_VARIABLE = "PARATRAIN_OPTIMIZER_HINT"


def _takes(optimizer_class: type, argument: str) -> bool:
    return argument in inspect.signature(optimizer_class.__init__).parameters


def _fused_supported(device_type: str, dtypes: Iterable[torch.dtype]) -> bool:
    # torch's own check (optimizer._device_dtype_check_for_fused): a listed device, floating point.
    return device_type in _get_fused_kernels_supported_devices() and all(d.is_floating_point for d in dtypes)


def kernel_options(
    optimizer_class: type[torch.optim.Optimizer], parameters: Iterable[torch.Tensor], enabled: bool = True
) -> dict[str, bool]:
    """Keyword arguments for ``optimizer_class`` that pick its fastest kernel for ``parameters``.

    ``{"fused": True}`` where torch has a fused kernel for the class, the parameters'
    device and dtype (Adam, AdamW, SGD, Adagrad on CPU and CUDA), else
    ``{"foreach": True}`` where the class takes it, else ``{}``. Parameters still on
    the CPU before ``rt.setup`` moves them get the same answer as on CUDA: both have
    the fused kernels. ``enabled=False`` gives torch's default explicitly
    (``fused=False``; torch then picks foreach on CUDA, the loop on CPU), so
    :func:`fusable_hint` stays quiet for it.
    """
    parameters = list(parameters)
    if not enabled:
        return {"fused": False} if _takes(optimizer_class, "fused") else {}
    device_types = {p.device.type for p in parameters}
    if (_takes(optimizer_class, "fused") and len(device_types) == 1
            and _fused_supported(device_types.pop(), (p.dtype for p in parameters))):
        return {"fused": True}
    return {"foreach": True} if _takes(optimizer_class, "foreach") else {}


_hinted = False


def fusable_hint(optimizer: torch.optim.Optimizer, device: torch.device) -> str | None:
    """The hint for ``optimizer`` training on ``device``, or None when there is nothing to say:
    its class has no fused kernel, the user chose ``fused``/``foreach`` (either value), or
    torch has no fused kernel for the device and parameter dtypes."""
    optimizer_class = type(optimizer)
    if not _takes(optimizer_class, "fused"):
        return None
    if any(group.get("fused") is not None or group.get("foreach") is not None for group in optimizer.param_groups):
        return None
    if not _fused_supported(device.type, (p.dtype for g in optimizer.param_groups for p in g["params"])):
        return None
    name = optimizer_class.__name__
    return (f"{name} could update all parameters in one fused kernel on {device.type}: build it with "
            f"torch.optim.{name}(..., fused=True) (pass fused=False to keep the loop; "
            f"{HINT_VARIABLE}=0 silences this line)")


def hint_fusable(optimizers: Iterable[torch.optim.Optimizer], device: torch.device) -> None:
    """Log :func:`fusable_hint` for the first optimizer that has one: once per process, rank 0 only."""
    global _hinted
    if _hinted or os.environ.get(HINT_VARIABLE, "1") == "0" or not comm.is_main():
        return
    for optimizer in optimizers:
        if not isinstance(optimizer, torch.optim.Optimizer):
            continue  # setup refuses it with the argument named
        hint = fusable_hint(optimizer, device)
        if hint is not None:
            comm.get_logger().info(hint)
            _hinted = True
            return
