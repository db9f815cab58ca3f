"""Full fp32: no autocast, no scaling (TF32 matmuls on CUDA unless ``Runtime(tf32=False)``)."""

from paratrain.precision.api import Precision


class FP32Precision(Precision):
    name = "32-true"
