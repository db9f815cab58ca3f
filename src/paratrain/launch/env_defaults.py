"""Flags not given on the command line, read from the environment: torchrun's ``PET_*``
variables (as Kubeflow's PyTorchJob sets them), then what the launcher's environment gives
(a SLURM step's variables; any registered environment's ``launch_defaults``)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping


# torchrun takes each flag's default from PET_<FLAG> (torch.distributed.argparse_util.env);
# Kubeflow's PyTorchJob sets PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR,
# PET_MASTER_PORT (and PET_RDZV_* for elastic jobs), so `paratrain run` reads them the same way.
PET_FLAGS = (
    "nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port", "max_restarts",
    "rdzv_backend", "rdzv_endpoint", "rdzv_id", "rdzv_conf", "log_dir", "redirects", "tee",
    "local_ranks_filter", "local_addr",
)
# torchrun's on/off flags (argparse_util.check_env): PET_<NAME> set to anything but 0 turns them on.
PET_SWITCHES = ("module", "standalone", "no_python")


def with_pet_defaults(args: argparse.Namespace, environ: Mapping[str, str]) -> argparse.Namespace:
    """``args`` with every flag that was not given taken from its ``PET_*`` variable.

    A flag on the command line wins over the variable, as in torchrun. ``PET_MODULE``
    set to ``1`` means ``-m``, like torchrun's ``check_env`` flags.
    """
    filled = argparse.Namespace(**vars(args))
    for name in PET_FLAGS:
        value = environ.get(f"PET_{name.upper()}")
        if getattr(filled, name, None) is None and value:
            setattr(filled, name, value)
    for name in PET_SWITCHES:
        if not getattr(filled, name, False) and environ.get(f"PET_{name.upper()}", "0") not in ("0", ""):
            setattr(filled, name, True)
    return filled


def slurm_cpus(environ: Mapping[str, str]) -> int | None:
    """CPUs of this node in the SLURM step that runs us (``srun paratrain run``), else None."""
    from paratrain.env.slurm import SlurmEnvironment
    from paratrain.env.torchelastic import TorchElasticEnvironment

    if not SlurmEnvironment().detected(environ) or TorchElasticEnvironment().detected(environ):
        return None
    raw = environ.get("SLURM_CPUS_ON_NODE", "")
    return int(raw) if raw.isdigit() else None


def environment_defaults(environ: Mapping[str, str]) -> dict | None:
    """nnodes, node_rank, master address and port that the environment this launcher runs in
    gives (``srun paratrain run``: SLURM's step), from the first registered environment detected
    (:meth:`~paratrain.env.ClusterEnvironment.launch_defaults`); None when it gives none.

    Raises:
        ConfigError: the environment describes a job one launcher per node cannot run.
    """
    from paratrain.env.detect import ENVIRONMENTS

    for environment in ENVIRONMENTS:
        if environment.detected(environ):
            return environment.launch_defaults(environ)
    return None
