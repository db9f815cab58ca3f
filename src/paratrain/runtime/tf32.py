"""TF32 for float32 matmuls and convolutions on CUDA: the one place paratrain sets it.

TF32 keeps float32's range with a 10-bit mantissa: on Ampere and newer GPUs matmuls run
several times faster, and training converges as in float32 (the reason torch enables it
by default for cuDNN convolutions). The setting is process-wide, as torch's is.

Which torch switches: ``torch.set_float32_matmul_precision`` and
``torch.backends.cudnn.allow_tf32``, as in every torch 2.x. Torch 2.9 added per-backend
strings (``torch.backends.cuda.matmul.fp32_precision``, ``torch.backends.cudnn.conv.fp32_precision``)
and keeps the two families in step only in one direction: the older switches also write
the new strings, while the new strings alone leave the older state behind, and torch's
older getters then raise "mix of the legacy and new APIs" — getters that ``torch.compile``'s
inductor still reads (``torch.get_float32_matmul_precision()``, ``torch.backends.cudnn.allow_tf32``,
torch 2.13) and user code too. Setting only the older switches keeps both families true.
"""

from __future__ import annotations

import warnings

import torch

#: The start of torch 2.9's one-time notice on the older TF32 switches (a regex for warnings filters).
DEPRECATION_NOTICE = "Please use the new API settings to control TF32 behavior"


def set_tf32(device: torch.device, enabled: bool = True) -> None:
    """On a CUDA ``device``, let float32 matmuls and cuDNN convolutions use TF32
    (``enabled``) or keep them in full float32; on other devices change nothing."""
    if device.type != "cuda":
        return
    with warnings.catch_warnings():
        # torch 2.9 announces, once, that these switches "will be deprecated after 2.9"; they
        # are the ones that keep every getter true (above), so the notice is not the user's.
        warnings.filterwarnings("ignore", message=DEPRECATION_NOTICE, category=UserWarning)
        torch.set_float32_matmul_precision("high" if enabled else "highest")
        torch.backends.cudnn.allow_tf32 = enabled
