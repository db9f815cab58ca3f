"""The environment a fault-tolerant launch gives every replica group, named once.

``paratrain run --fault-tolerance replicas`` (:mod:`paratrain.launch.replica_groups`) writes these
variables and ``strategy="ft-ddp"`` (:mod:`paratrain.strategy.ft_ddp`) reads them; the two sides
live in different layers, so the names live here, below both.
"""

from __future__ import annotations

#: torchft's own names: the Lighthouse's address, this group's index, the number of groups.
LIGHTHOUSE_ENV, GROUP_ENV, GROUPS_ENV = "TORCHFT_LIGHTHOUSE", "REPLICA_GROUP_ID", "NUM_REPLICA_GROUPS"
#: The address of this node that the other groups reach (set by ``paratrain run --fault-tolerance replicas
#: --nnodes M``: the one that routes to node 0); without it a group uses ``MASTER_ADDR``, its own (one node).
ADDRESS_ENV = "PARATRAIN_FT_ADDRESS"
