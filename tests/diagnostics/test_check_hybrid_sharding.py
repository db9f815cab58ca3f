"""paratrain check on hybrid-sharding scripts (FSDP's HYBRID_SHARD, fully_shard on a 2-D DeviceMesh): a
rank chosen by a mesh dimension is not a local rank, and a save by one rank of the mesh is not flagged."""

from __future__ import annotations

import pytest

from paratrain.diagnostics.check import check_source

FULLY_SHARD = '''\
import os
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("nccl")
    per_node = int(os.environ["LOCAL_WORLD_SIZE"])
    mesh = init_device_mesh("cuda", (dist.get_world_size() // per_node, per_node), mesh_dim_names=("replicate", "shard"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)).cuda()
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=8, sampler=sampler):
            loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
            opt.zero_grad()
            loss.backward()
            opt.step()
    if {test}:
        torch.save(model.state_dict(), {path})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''

HYBRID_SHARD = '''\
import os
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.manual_seed(0)
model = FSDP(torch.nn.Linear(8, 1).cuda(), sharding_strategy=ShardingStrategy.HYBRID_SHARD, device_id=local_rank)
state = model.state_dict()
if {test}:
    torch.save(state, "model.pt")
'''


def findings(source: str) -> list[tuple[str, str]]:
    return [(f.rule, f.problem) for f in check_source(source)]


@pytest.mark.parametrize("test, path", [
    ('mesh.get_local_rank("replicate") == 0 and mesh.get_local_rank("shard") == 0', '"model.pt"'),
    ('mesh["replicate"].get_local_rank() == 0 and mesh["shard"].get_local_rank() == 0', '"model.pt"'),
    ('mesh.get_local_rank("replicate") == 0', 'f"model-{mesh.get_local_rank(\'shard\')}.pt"'),  # a file per shard
    ("dist.get_rank() == 0", '"model.pt"'),
])
def test_a_save_by_one_rank_of_the_mesh_or_one_file_per_shard_is_clean(test, path):
    assert findings(FULLY_SHARD.replace("{test}", test).replace("{path}", path)) == []


def test_a_mesh_dimension_is_named_as_such_not_as_a_local_rank():
    [(rule, problem)] = findings(FULLY_SHARD.replace("{test}", 'mesh.get_local_rank("replicate") == 0')
                                 .replace("{path}", '"model.pt"'))
    assert rule == "save-on-every-rank"
    assert problem.startswith("torch.save runs on every rank of the first replica (the mesh's replicate rank is 0)")
    [fix] = [f.fix for f in check_source(FULLY_SHARD.replace("{test}", 'mesh["replicate"].get_local_rank() == 0')
                                                  .replace("{path}", '"model.pt"'))]
    assert "name the file after the shard rank" in fix and "torch.distributed.checkpoint" in fix
    [(_, problem)] = findings(FULLY_SHARD.replace("{test}", 'mesh.get_local_rank(mesh_dim="shard") == 0')
                              .replace("{path}", '"model.pt"'))
    assert problem.startswith("torch.save runs on the first rank of every replica (the mesh's shard rank is 0)")


def test_hybrid_shard_saved_on_rank_zero_is_clean_and_on_local_rank_zero_is_still_once_per_machine():
    assert findings(HYBRID_SHARD.replace("{test}", "dist.get_rank() == 0")) == []
    [(rule, problem)] = findings(HYBRID_SHARD.replace("{test}", "local_rank == 0"))
    assert rule == "save-on-every-rank" and "once per machine" in problem
