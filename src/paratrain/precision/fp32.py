"""Full fp32: no autocast, no scaling."""

from paratrain.precision.api import Precision


class FP32Precision(Precision):
    name = "32-true"
