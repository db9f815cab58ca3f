"""Kubernetes: what a Kubeflow PyTorchJob sets in its two pods, and `paratrain run script.py` unchanged.

The two pods are two network namespaces joined by a veth pair. Each gets only the
variables the training operator sets (PET_* for torchrun, plus MASTER_*, WORLD_SIZE and
RANK for scripts without a launcher); the command has no flags at all.
"""

from __future__ import annotations

from tests.launch.processes import finish, start
from tests.support import EXAMPLES, clean_env, paratrain_cmd


def _pod_env(node_rank: int, master: str) -> dict[str, str]:
    return clean_env(
        PET_NNODES="2", PET_NPROC_PER_NODE="1", PET_NODE_RANK=str(node_rank),
        PET_MASTER_ADDR=master, PET_MASTER_PORT="23456",
        MASTER_ADDR=master, MASTER_PORT="23456", WORLD_SIZE="2", RANK=str(node_rank),
    )


def test_pytorchjob_pods_train_with_paratrain_run_and_no_flags(two_hosts, tmp_path):
    (ns0, if0, addr0), (ns1, if1, _) = two_hosts
    command = paratrain_cmd("run", str(EXAMPLES / "migrate" / "two_machines.py"), "--epochs", "1",
                            "--out", str(tmp_path), "--timeout", "60")  # the volume both pods mount
    pods = [start(["ip", "netns", "exec", ns, *command], _pod_env(rank, addr0)) for rank, ns in enumerate((ns0, ns1))]
    pod0, pod1 = finish(pods)
    assert pod0.returncode == 0 and pod1.returncode == 0, pod0.stderr[-2000:] + pod1.stderr[-2000:]
    assert "2 processes started by torchrun, backend gloo" in pod0.stdout
    assert "epoch 1/1:" in pod0.stdout
    # Each pod found its own interface towards the master from PET_MASTER_ADDR.
    assert f"GLOO_SOCKET_IFNAME={if0}" in pod0.stderr and f"GLOO_SOCKET_IFNAME={if1}" in pod1.stderr
    assert (tmp_path / "checkpoints" / "epoch-0000").is_dir()
