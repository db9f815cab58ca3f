"""Where processes come from: ``paratrain run`` (scripts) and ``pt.spawn`` (functions).

Flags → :class:`LaunchConfig` (``config``) → validated → argv for
``torch.distributed.run`` (``torchrun``), with the network choices it leaves open
(``network``, ``loopback_store``) and one-line failures (``failures``). The package imports
nothing itself, so that the command line can check its flags before torch is imported.
"""
