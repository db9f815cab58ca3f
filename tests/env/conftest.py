"""The real SLURM cluster, shared by every test of the session that needs it."""

from __future__ import annotations

import pytest

from tests.env.slurm_cluster import COMMANDS, DAEMONS, SlurmCluster, ensure_installed


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running one-node SLURM cluster (munged, slurmctld, slurmd); stopped at the end."""
    why_not = ensure_installed(DAEMONS + COMMANDS)
    if why_not:
        pytest.skip(f"SLURM tests need slurm-wlm and munge: {why_not}")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
