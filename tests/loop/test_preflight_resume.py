"""check_resumable with the job's global order: the split of the run's global batch may change on
resume (another world size, or another batch size × accumulation that makes up the same global
batch); another global batch is refused in one line, as another batch size is without the global order."""

from __future__ import annotations

import pytest
import torch

from paratrain.data import make_loader
from paratrain.data.global_order import GlobalBatchSampler, Split
from paratrain.errors import ConfigError
from paratrain.loop.preflight import check_resumable
from paratrain.loop.state import FitState
from tests.data.workers import roundtrip

DATASET = torch.utils.data.TensorDataset(torch.arange(30))
SAVED = FitState(step=1, batch_size=3, grad_accum=2, dev_samples=8)  # saved by 2 processes: global batch 12


def loader_resumed(batch_size: int, grad_accum: int, global_order: bool = True):
    """A one-process loader that restored the 2-process run's state (of the global order, or an older per-rank one)."""
    loader = make_loader(None, DATASET, batch_size, shuffle=True, global_order=True, grad_accum=grad_accum)
    if global_order:
        sampler = GlobalBatchSampler(len(DATASET), Split(2, 3, 2), 0).state_dict(position=1)
        state = {"epoch": 0, "batches": 1, "batch_size": 3, "sampler": sampler}
    else:
        state = make_loader(None, DATASET, 3, shuffle=True).state_dict()
    loader.load_state_dict(roundtrip(state))
    return loader


@pytest.mark.filterwarnings("ignore::paratrain.data.ElasticResumeWarning")
@pytest.mark.parametrize("batch_size,grad_accum", [(3, 2), (4, 3), (12, 1)])
def test_a_new_split_of_the_saved_global_batch_is_allowed(batch_size, grad_accum):
    # (3, 2): the same command on 1 process (the loader makes it 1 × 3 × 4); (4, 3) and (12, 1): 12 asked for otherwise.
    loader = loader_resumed(batch_size, grad_accum)
    check_resumable(SAVED, batch_size, grad_accum, 8, "runs/x", loader)
    assert loader.global_batch == 12


@pytest.mark.filterwarnings("ignore::paratrain.data.ElasticResumeWarning")
def test_another_global_batch_is_refused_in_one_line():
    loader = loader_resumed(4, 1)
    with pytest.raises(ConfigError) as refused:
        check_resumable(SAVED, 4, 1, 8, "runs/x", loader)
    message = str(refused.value)
    assert "\n" not in message
    assert "was trained with batch_size=3 × accumulation 2, this one has batch_size=4 × 1" in message
    assert "on 1 process(es) that is a global batch of 4 samples, the run's is 12" in message
    assert "values whose product with the number of processes is 12" in message and "fresh=True" in message


def test_without_the_global_order_the_batch_size_must_be_the_saved_one():
    loader = loader_resumed(4, 3, global_order=False)  # an older checkpoint: its world size decided the batches
    assert not loader.keeps_trajectory
    with pytest.raises(ConfigError, match="this one has batch_size=4 × 3; a step would hold another number"):
        check_resumable(SAVED, 4, 3, 8, "runs/x", loader)
    check_resumable(SAVED, 3, 2, 8, "runs/x", loader)
