"""Who am I? Rank, local rank, world size and rendezvous address of this process.

One detector per launcher (torchrun, SLURM, OpenMPI/PMI, plain single process);
:func:`detect` asks them in order of precedence and returns a :class:`ProcessInfo`.
"""

from paratrain.env.api import ClusterEnvironment, ProcessInfo
from paratrain.env.detect import ENVIRONMENTS, detect, detect_position, register_environment

__all__ = ["ClusterEnvironment", "ProcessInfo", "ENVIRONMENTS", "detect", "detect_position", "register_environment"]
