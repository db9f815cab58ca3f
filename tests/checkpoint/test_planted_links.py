"""A run directory's files are opened without following links, and a manifest reads only its own files.

Real files, one process (``pt.fit(model, out_dir=...)``): a symbolic link planted as ``.paratrain-lock``,
``metrics.jsonl`` or ``logs/rank0.log`` is refused in one line and what it points to is untouched; a
manifest naming ``../../other/model.safetensors`` is refused. Before: the lock's target was truncated
and rewritten (and the link removed), the logs appended outside the folder, and the other file was read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest
import torch
from torch.utils.data import TensorDataset

import paratrain as pt
from paratrain.checkpoint import catalog
from paratrain.errors import CheckpointError, ParatrainError


def _fit(out, **options):
    torch.manual_seed(0)
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(1))
    data = TensorDataset(x, (x[:, 0] > 0).long())
    return pt.fit(torch.nn.Linear(4, 2), data, data, batch_size=8, max_steps=2, progress=False, out_dir=str(out),
                  tensorboard=False, **options)


@pytest.mark.parametrize("planted", [".paratrain-lock", "metrics.jsonl", "logs/rank0.log"])
def test_a_planted_link_is_refused_and_its_target_untouched(tmp_path, planted):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "run"
    (out / planted).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(victim, out / planted)
    with pytest.raises(ParatrainError, match=f"{planted} is a symbolic link .*never follows a link"):
        _fit(out)
    assert victim.read_text() == "precious\n" and (out / planted).is_symlink()


def test_a_manifest_naming_a_file_outside_its_checkpoint_is_refused(tmp_path):
    out = tmp_path / "run"
    _fit(out)
    (checkpoint, manifest), = catalog.complete(out / "checkpoints")
    other = tmp_path / "other"
    other.mkdir()
    shutil.move(checkpoint / "model.safetensors", other / "model.safetensors")
    text = (checkpoint / "manifest.json").read_text().replace('"model.safetensors"', '"../../../other/model.safetensors"')
    (checkpoint / "manifest.json").write_text(text)
    (checkpoint / "COMPLETE").write_text(f"sha256 {hashlib.sha256(text.encode()).hexdigest()}\n")  # a consistent edit
    assert json.loads(text)["files"]
    with pytest.raises(CheckpointError, match="names '../../../other/model.safetensors', outside its checkpoint"):
        catalog.resolve(checkpoint)  # an explicit checkpoint: verified when loaded
        pt.Checkpointer(None, out / "checkpoints", model=torch.nn.Linear(4, 2)).load(checkpoint)
