"""A state's tensors written as a few flat ones (checkpoint/packed.py) read back exactly as they were."""

from __future__ import annotations

import torch

from paratrain.checkpoint.packed import PACKED, pack, unpack
from paratrain.checkpoint.safe_load import load_pt
from paratrain.checkpoint.writer import write_state


def _same(a, b) -> bool:
    """Equal values and the same types all the way down (a tuple stays a tuple, an int key an int key)."""
    if isinstance(a, torch.Tensor):
        return (type(b) is torch.Tensor and a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
                and torch.equal(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _adam_state() -> dict:
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.8, 0.9))
    model(torch.randn(2, 5)).sum().backward()
    optimizer.step()
    return optimizer.state_dict()


def test_an_optimizers_state_is_written_packed_and_read_back_exactly(tmp_path):
    state = _adam_state()
    state["extra"] = {"none": None, "ints": [1, 2, (3, torch.tensor([4], dtype=torch.int64))], "flag": True,
                      "half": torch.ones(2, 2, dtype=torch.float16), "empty": torch.empty(0, 3)}
    write_state(tmp_path, "optimizer", "optimizer", state)
    raw = torch.load(tmp_path / "optimizer.pt", weights_only=True)
    assert raw[PACKED] == 1 and len(raw["flats"]) == 3  # float32, int64, float16: one flat each
    loaded = load_pt(tmp_path / "optimizer.pt")
    assert _same(state, loaded)
    assert isinstance(loaded["param_groups"][0]["betas"], tuple)
    # every tensor is its own: changing one changes no other
    first, second = (loaded["state"][0]["exp_avg"], loaded["state"][0]["exp_avg_sq"])
    first.add_(1.0)
    assert torch.equal(second, state["state"][0]["exp_avg_sq"])


def test_a_state_it_cannot_pack_is_saved_as_it_is():
    transposed = {"w": torch.randn(3, 4).t()}  # not contiguous: its strides would not come back
    assert pack(transposed) is transposed
    assert pack({"n": 1, "s": "x"}) == {"n": 1, "s": "x"}
    parameter = {"p": torch.nn.Parameter(torch.ones(2))}
    assert pack(parameter) is parameter
    assert unpack({"plain": 1}) == {"plain": 1}


def test_a_damaged_packed_file_is_an_error_naming_it(tmp_path):
    import pytest

    from paratrain.errors import CheckpointError

    packed = pack(_adam_state())
    packed["layout"][0, 2] = 10**9  # an offset past the end of its flat tensor
    torch.save(packed, tmp_path / "optimizer.pt")
    with pytest.raises(CheckpointError, match="optimizer.pt is not a readable torch.save file.*do not fit together"):
        load_pt(tmp_path / "optimizer.pt")
