"""Where processes come from: ``paratrain run`` (scripts) and ``pt.spawn`` (functions).

Flags → :class:`LaunchConfig` (``config``) → validated → argv for
``torch.distributed.run`` (``torchrun``), with the network choices it leaves open
(``network``, ``loopback_store``) and one-line failures (``failures``).
"""

from paratrain.launch.config import LaunchConfig
from paratrain.launch.spawn import spawn
from paratrain.launch.torchrun import launch

__all__ = ["LaunchConfig", "launch", "spawn"]
