"""A plain ``python script.py``: one process, no launcher."""

from __future__ import annotations

from collections.abc import Mapping

from paratrain.env.api import ClusterEnvironment, ProcessInfo


class SingleProcessEnvironment(ClusterEnvironment):
    name = "single"

    def detected(self, environ: Mapping[str, str]) -> bool:
        return True

    def read(self, environ: Mapping[str, str]) -> ProcessInfo:
        return ProcessInfo(
            rank=0, local_rank=0, world_size=1, local_world_size=1, node_rank=0, num_nodes=1,
            master_addr=None, master_port=None, source=self.name,
        )
