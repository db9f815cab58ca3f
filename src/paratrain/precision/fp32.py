"""Full fp32: no autocast, no scaling (TF32 matmuls on CUDA unless ``Runtime(tf32=False)``)."""

from paratrain.precision import register_precision
from paratrain.precision.api import Precision


@register_precision
class FP32Precision(Precision):
    name = "32-true"
