"""Writing the pieces of a checkpoint: a model's safetensors file from a description kept between writes."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from paratrain.checkpoint.writer import ModelDescriptions, write_model


def test_a_kept_description_writes_the_values_the_tensors_hold_at_each_write_and_is_made_anew_for_other_tensors(
        tmp_path):
    """A background save hands the writer the same host buffers every time: safetensors' description of them (its
    per-tensor Python) is kept, and each write reads the bytes as they are then. Other tensors (new memory, another
    shape or name) get a description of their own; a file is what ``save_file`` would write."""
    buffers = {"w": torch.zeros(2, 3), "b": torch.arange(4, dtype=torch.int64), "s": torch.tensor(1.5)}
    described = ModelDescriptions()
    assert described.can_keep
    (tmp_path / "a").mkdir()
    write_model(tmp_path / "a", "model", buffers, checked=True, described=described)
    kept = described._kept["model"]
    buffers["w"].add_(7)  # the next save's copy, into the same buffers
    (tmp_path / "b").mkdir()
    write_model(tmp_path / "b", "model", buffers, checked=True, described=described)
    assert described._kept["model"] is kept
    first, second = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert first["w"].sum().item() == 0 and torch.equal(second["w"], torch.full((2, 3), 7.0))
    assert torch.equal(second["b"], buffers["b"]) and second["s"].item() == 1.5
    buffers["w"] = torch.ones(2, 3)  # another tensor under the same name: described anew
    (tmp_path / "c").mkdir()
    write_model(tmp_path / "c", "model", buffers, checked=True, described=described)
    assert described._kept["model"] is not kept and torch.equal(load_file(tmp_path / "c" / "model.safetensors")["w"],
                                                                torch.ones(2, 3))
    (tmp_path / "d").mkdir()
    write_model(tmp_path / "d", "model", buffers)  # no description kept: save_file's own file, the same bytes
    assert (tmp_path / "d" / "model.safetensors").read_bytes() == (tmp_path / "c" / "model.safetensors").read_bytes()
