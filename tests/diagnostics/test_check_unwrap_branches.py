"""A state dict saved in the branch that runs only for an unwrapped model is no wrapper's state dict.

3D-ResNets-like: ``save_checkpoint`` saves ``model.module.state_dict()`` when ``hasattr(model, "module")`` and
``model.state_dict()`` in the ``else``, which runs only for a model that is no DDP/DataParallel wrapper.
"""

from __future__ import annotations

from paratrain.diagnostics.check import check_source

SCRIPT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def save_checkpoint(path, model):
    if {test}:
        state = model.module.state_dict()
    else:
        state = model.state_dict()
    torch.save({{"state_dict": state}}, path)


def main():
    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(2, 2))
    if dist.get_rank() == 0:
        save_checkpoint("model.pt", model)
"""


def _wrapped(test: str) -> list[int]:
    return [f.line for f in check_source(SCRIPT.format(test=test)) if f.rule == "wrapped-state-dict"]


def test_the_else_of_a_test_for_a_wrapper_saves_the_unwrapped_model():
    assert _wrapped('hasattr(model, "module")') == []
    assert _wrapped("isinstance(model, (DDP, torch.nn.DataParallel))") == []
    inline = SCRIPT.format(test="True").replace(
        "    if True:\n        state = model.module.state_dict()\n    else:\n        state = model.state_dict()\n",
        '    state = model.module.state_dict() if hasattr(model, "module") else model.state_dict()\n')
    assert [f.line for f in check_source(inline) if f.rule == "wrapped-state-dict"] == []


def test_the_branch_taken_for_a_wrapper_or_another_test_still_saves_the_wrapper():
    assert _wrapped('not hasattr(model, "module")') == [10]
    assert _wrapped('hasattr(model, "layers")') == [10]
    assert _wrapped('path.endswith(".pt")') == [10]
