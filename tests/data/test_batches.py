"""``rt.loader`` hands out batches on ``rt.device``: every tensor of nested dicts, lists, tuples,
namedtuples and dataclasses, the rest left alone; ``move_to_device=False`` keeps them on the CPU.
``meta`` stands for the GPU a CPU machine does not have."""

from __future__ import annotations

import collections
import dataclasses

import torch

from paratrain.data import RankPlace, make_loader
from paratrain.data.batches import move_to

META = RankPlace(rank=0, world_size=1, seed=0, device=torch.device("meta"))
Pair = collections.namedtuple("Pair", "inputs label")


@dataclasses.dataclass
class Example:
    features: torch.Tensor
    source: str


def test_every_tensor_of_a_nested_batch_moves_and_the_rest_stays():
    batch = {"pair": Pair(torch.ones(2), 3), "items": [torch.ones(1), ("text", torch.zeros(1))],
             "example": Example(torch.ones(2), "corpus"), "none": None}
    moved = move_to(batch, torch.device("meta"))
    assert isinstance(moved["pair"], Pair) and moved["pair"].inputs.is_meta and moved["pair"].label == 3
    assert moved["items"][0].is_meta and moved["items"][1][0] == "text" and moved["items"][1][1].is_meta
    assert isinstance(moved["example"], Example) and moved["example"].features.is_meta
    assert moved["example"].source == "corpus" and moved["none"] is None
    assert not batch["pair"].inputs.is_meta  # the batch given is left as it was


def collate_examples(samples):
    return {"x": torch.stack([x for x, _ in samples]), "meta": [Example(y, "row") for _, y in samples]}


def test_training_and_exact_loaders_hand_out_batches_on_the_device_unless_told_not_to():
    data = torch.utils.data.TensorDataset(torch.arange(10.0).unsqueeze(1), torch.arange(10))
    for options in ({"shuffle": True}, {"exact": True}, {"global_order": True}):
        batches = list(make_loader(META, data, batch_size=4, **options))
        assert all(x.is_meta and y.is_meta for x, y in batches), options
    kept = list(make_loader(META, data, batch_size=4, move_to_device=False))
    assert all(x.device.type == "cpu" for x, _ in kept)
    nested = next(iter(make_loader(META, data, batch_size=4, collate_fn=collate_examples)))
    assert nested["x"].is_meta and all(example.features.is_meta for example in nested["meta"])
