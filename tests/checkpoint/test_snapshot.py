"""The blocking part of a background save: torch's state layout read in place, copied into reused buffers."""

from __future__ import annotations

import torch
import torch.distributed.checkpoint.state_dict as dsd

from paratrain.checkpoint.safe_load import load_pt
from paratrain.checkpoint.snapshot import HostBuffers, LiveState, _same_state
from tests.checkpoint.helpers import copy_only_once_the_step_waits


class Tied(torch.nn.Module):
    """Tied input/output embeddings and BatchNorm buffers: keys torch names in its own way."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 6)
        self.norm = torch.nn.BatchNorm1d(6)
        self.head = torch.nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.norm(self.embed(tokens)))


def _train(model, optimizer, steps=2):
    for _ in range(steps):
        loss = model(torch.randint(0, 11, (8,))).logsumexp(-1).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def test_live_state_is_torchs_answer_and_reads_it_without_torch_after_the_first_time(monkeypatch):
    torch.manual_seed(0)
    model = Tied()
    optimizer = torch.optim.AdamW([{"params": [model.embed.weight]}, {"params": model.norm.parameters(), "lr": 0.1}])
    live = LiveState()
    fresh = live.optimizer(model, optimizer)  # before the first step: hyperparameters only, no state created
    assert fresh["state"] == {} and not optimizer.state
    _train(model, optimizer)
    for _ in range(2):
        assert _same_state(live.model(model), dsd.get_model_state_dict(model))
        assert _same_state(live.optimizer(model, optimizer), dsd.get_optimizer_state_dict(model, optimizer))
        _train(model, optimizer)
    assert live._optimizers[optimizer] is True and live._models[model][1] is not None  # both matched torch's layout
    calls = []
    monkeypatch.setattr(dsd, "get_model_state_dict", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(dsd, "get_optimizer_state_dict", lambda *a, **k: calls.append(a))
    state = live.model(model), live.optimizer(model, optimizer)
    assert calls == [] and state[0]["head.weight"].data_ptr() == model.embed.weight.data_ptr()
    assert float(state[1]["state"]["embed.weight"]["step"]) == 6.0  # 2 + 2 × 2 steps
    monkeypatch.undo()
    model.register_buffer("extra", torch.ones(2))  # another layout: read through torch again, then matched anew
    assert _same_state(live.model(model), dsd.get_model_state_dict(model)) and "extra" in live._models[model][0]


def test_a_layout_it_cannot_match_is_read_through_torch_every_time():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train_linear = lambda: (model(torch.ones(1, 3)).sum().backward(), optimizer.step(), optimizer.zero_grad())  # noqa: E731
    _train_linear()
    live = LiveState()
    live._optimizers[optimizer] = False  # as after a failed comparison with torch's answer
    live._models[model] = (tuple(model.state_dict()), None)
    assert _same_state(live.optimizer(model, optimizer), dsd.get_optimizer_state_dict(model, optimizer))
    assert _same_state(live.model(model), dsd.get_model_state_dict(model))
    assert live._optimizers[optimizer] is False and live._models[model][1] is None


def test_host_buffers_hold_the_state_of_the_copy_and_are_reused_by_the_next_one():
    weights = torch.arange(6.0).reshape(2, 3)
    state = {"w": weights, "nested": [weights[0], (torch.tensor(7),)], "note": "x", "n": 3}
    buffers = HostBuffers()
    first = buffers.copy(state)
    buffers.ready()
    weights.add_(100)  # training goes on
    assert first["w"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and first["nested"][0].tolist() == [0.0, 1.0, 2.0]
    assert first["nested"][1][0].item() == 7 and first["note"] == "x" and first["n"] == 3
    second = buffers.copy(state)
    assert second["w"].data_ptr() == first["w"].data_ptr() and second["w"][0, 0].item() == 100.0
    assert buffers.copy({"w": torch.zeros(4)})["w"].data_ptr() != first["w"].data_ptr()  # another shape: a new buffer


def _background_checkpointer(tmp_path, model, optimizer):
    import paratrain as pt

    ckpt = pt.Checkpointer(None, tmp_path / "ckpt", background=True, model=model, optimizer=optimizer)
    ckpt.save(step=1)  # the first save is written in the foreground
    return ckpt


def test_the_optimizer_state_copied_by_the_writing_thread_is_the_state_at_the_save_not_after_the_next_step(
        tmp_path):
    """The writing thread copies the optimizer's state (here only once the step waits); the next ``step()`` waits
    for it: the checkpoint holds the state of the save, the ledger counts the wait as save blocking."""
    import json

    from paratrain.checkpoint import saving
    from paratrain.goodput.ledger import LEDGER_FILE

    torch.manual_seed(0)
    model = Tied()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    _train(model, optimizer)
    ckpt = _background_checkpointer(tmp_path, model, optimizer)
    _train(model, optimizer, 1)
    at_save = {key: value.clone() for key, value in optimizer.state[model.embed.weight].items()}
    with copy_only_once_the_step_waits(ckpt, saving, "_finish_snapshot"):
        ckpt.save(step=3)
        _train(model, optimizer, 1)  # its step() waits for the copy
    assert not torch.equal(optimizer.state[model.embed.weight]["exp_avg"], at_save["exp_avg"])
    ckpt.close()
    saved = load_pt(tmp_path / "ckpt" / "step-000003" / "optimizer.pt")["state"]["embed.weight"]
    assert all(torch.equal(saved[key], at_save[key]) for key in ("exp_avg", "exp_avg_sq", "step"))
    waits = [json.loads(line) for line in (tmp_path / "ckpt" / LEDGER_FILE).read_text().splitlines()
             if '"copy_wait"' in line]
    assert len(waits) == 1 and waits[0]["name"] == "step-000003" and waits[0]["seconds"] > 0


def test_a_state_that_cannot_be_saved_is_still_refused_when_the_writing_thread_copies_it(tmp_path):
    """The checks that a state can be saved run in the writing thread, on its copy: a non-plain object in the
    optimizer's state commits nothing and is raised at the next save, and the step that followed did not wait."""
    import pytest

    import paratrain as pt

    torch.manual_seed(0)
    model = Tied()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    _train(model, optimizer)
    ckpt = _background_checkpointer(tmp_path, model, optimizer)
    optimizer.state[model.embed.weight]["note"] = object()  # not plain data: a checkpoint would need unpickling
    ckpt.save(step=3)
    _train(model, optimizer, 1)  # the hook lets it step: the thread said it was done, though it failed
    with pytest.raises(pt.CheckpointError, match=r"checkpoint step-000003 was not saved: .*optimizer\.state_dict\(\) "
                                                 r"holds a builtins.object at"):
        ckpt.save(step=4)
    del optimizer.state[model.embed.weight]["note"]
    ckpt.save(step=5)
    ckpt.close()
    assert [path.name for path in ckpt.checkpoints()] == ["step-000001", "step-000005"]


def test_the_first_background_save_reads_in_place_into_buffers_the_first_save_made(tmp_path, monkeypatch):
    """The run's first save (in the foreground) also makes what the background saves reuse: the check that the
    state can be read in place, and the host buffers. So the first background save blocks as briefly as the
    later ones: torch's state reads are not called, and no buffer is allocated."""
    torch.manual_seed(0)
    model = Tied()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    _train(model, optimizer)
    ckpt = _background_checkpointer(tmp_path, model, optimizer)
    assert ckpt.live_state._optimizers[optimizer] is True and ckpt.live_state._models[model][1] is not None
    buffers = dict(ckpt.host_buffers._buffers)
    flats = dict(ckpt.host_buffers._flats)
    assert {path[0] for path in buffers} == {"model"} and len(buffers) >= 5  # 2 weights + BN's 3 buffers
    assert list(flats) == [("optimizer",)] and len(flats[("optimizer",)].views) == 3 * 3  # Adam's, packed
    calls = []
    monkeypatch.setattr(dsd, "get_model_state_dict", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(dsd, "get_optimizer_state_dict", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(torch, "empty", lambda *a, **k: calls.append(a))
    _train(model, optimizer, 1)
    ckpt.save(step=3)
    _train(model, optimizer, 1)  # the writing thread's copy of Adam's state, into the buffers made at the first save
    ckpt.finish_writing("the test")
    monkeypatch.undo()
    ckpt.close()
    assert calls == [] and ckpt.host_buffers._buffers.keys() == buffers.keys()
    assert all(ckpt.host_buffers._buffers[path] is buffer for path, buffer in buffers.items())
    assert ckpt.host_buffers._flats == flats
    saved = load_pt(tmp_path / "ckpt" / "step-000003" / "optimizer.pt")["state"]
    assert float(saved["embed.weight"]["step"]) == 3.0  # the state at the save, copied into those buffers


def test_live_state_reads_fsdp_shards_in_place_without_torch_after_the_first_time():
    """2 real fsdp ranks: torch's answer at the first read, then the same keys over the very same DTensor shards
    with neither of torch's readers called (what a background sharded save blocks on)."""
    import paratrain as pt
    from tests.checkpoint import async_shards_workers as workers

    result = pt.spawn(workers.live_sharded_state, 2)
    assert result["first"] and result["fast"] and result["optimizer_matched"] is True
    assert result["torch_calls"] == 0 and result["kinds"] == ["DTensor"]


def test_a_packed_host_copy_is_what_packing_a_copy_gives_and_keeps_its_flats_while_the_shapes_stay():
    """``HostBuffers.packed`` copies straight into the packed form (one ``torch._foreach_copy_``): the same skeleton,
    flats and layout as ``pack(copy(state))``, the flats reused by the next copy of tensors of the same kinds and
    shapes and laid out anew for others; a state ``pack`` leaves as it is gets ``copy``'s answer."""
    from paratrain.checkpoint.packed import pack, unpack

    weights = torch.arange(6.0).reshape(2, 3)
    state = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": weights.t(), "count": torch.tensor([1, 2])},
                       1: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(0)}},
             "param_groups": [{"lr": 0.1, "params": [0, 1], "betas": (0.9, 0.99)}], "note": [object]}
    buffers = HostBuffers()
    packed = buffers.packed(state, ("optimizer",))
    reference = pack(HostBuffers().copy(state))
    assert packed["skeleton"] == reference["skeleton"] and torch.equal(packed["layout"], reference["layout"])
    assert len(packed["flats"]) == 2 and all(torch.equal(a, b) for a, b in zip(packed["flats"], reference["flats"]))
    assert pack(packed) is packed and torch.equal(unpack(packed)["state"][0]["exp_avg"], weights.t())
    weights.add_(10)  # training goes on: the copy holds the values of the save
    assert unpack(packed)["state"][0]["exp_avg"][0, 0].item() == 0.0
    again = buffers.packed(state, ("optimizer",))
    assert [f.data_ptr() for f in again["flats"]] == [f.data_ptr() for f in packed["flats"]]
    assert unpack(again)["state"][0]["exp_avg"][0, 0].item() == 10.0
    state["state"][1]["exp_avg"] = torch.ones(4)  # another shape: laid out anew
    grown = buffers.packed(state, ("optimizer",))
    assert grown["flats"][0].numel() == 1 + 6 + 1 + 4 and torch.equal(unpack(grown)["state"][1]["exp_avg"], torch.ones(4))
    sparse = {"state": {0: {"m": torch.eye(2).to_sparse()}}}
    assert "flats" not in buffers.packed(sparse, ("other",)) and "flats" not in pack(buffers.packed(sparse, ("other",)))
