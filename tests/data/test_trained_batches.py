"""What a training loader saves as consumed when a Runtime tells it about forwards and steps
(``runtime/trained_batches.py``): the batches an optimizer step trained, not those drawn ahead."""

from __future__ import annotations

import warnings

import pytest
import torch

from paratrain.data import RankPlace, make_loader
from paratrain.runtime.trained_batches import TrainedBatches

PLACE = RankPlace(rank=0, world_size=1, seed=0)


def tracked(batch_size: int = 2):
    loader = make_loader(PLACE, torch.utils.data.TensorDataset(torch.arange(12.0)), batch_size=batch_size)
    trained = TrainedBatches()
    trained.track(loader)
    model = torch.nn.Identity()
    trained.watch(model)
    return loader, trained, model


def test_a_batch_drawn_between_forward_and_step_is_not_consumed():
    loader, trained, model = tracked()
    batches = iter(loader)
    x = next(batches)[0]
    model(x)  # forward of batch 0
    next(batches)  # batch 1 drawn ahead (nanoGPT), before the step
    trained.stepped()
    assert loader.state_dict()["batches"] == 1


def test_without_a_forward_a_step_trains_every_batch_handed_out():
    loader, trained, _ = tracked()
    batches = iter(loader)
    next(batches), next(batches)
    trained.stepped()
    next(batches)  # drawn at the end of the body; the save comes before its step
    assert loader.state_dict()["batches"] == 2


def test_a_save_before_any_step_keeps_the_one_drawn_batch():
    loader, _, _ = tracked()
    next(iter(loader))
    assert loader.state_dict()["batches"] == 0


def test_a_loop_that_never_calls_rt_step_counts_what_was_handed_out_and_says_so_once():
    loader, _, _ = tracked()
    batches = iter(loader)
    next(batches), next(batches), next(batches)
    with pytest.warns(UserWarning, match=r"handed out 3 batches that no rt\.step trained"):
        assert loader.state_dict()["batches"] == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader.state_dict()


def test_a_step_right_after_the_next_pass_began_leaves_that_pass_at_its_start():
    loader, trained, model = tracked(batch_size=6)  # two batches an epoch
    batches = iter(loader)
    next(batches)
    trained.stepped()
    model(next(batches)[0])  # the epoch's last batch runs forward...
    assert next(batches, None) is None
    batches = iter(loader)  # ...the loop draws the next epoch's first batch before the step
    next(batches)
    trained.stepped()
    assert (loader.state_dict()["epoch"], loader.state_dict()["batches"]) == (1, 0)
