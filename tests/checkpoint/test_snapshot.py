"""The blocking part of a background save: torch's state layout read in place, copied into reused buffers."""

from __future__ import annotations

import torch
import torch.distributed.checkpoint.state_dict as dsd

from paratrain.checkpoint.snapshot import HostBuffers, LiveState, _same_state


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
