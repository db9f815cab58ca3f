"""Loading never unpickles arbitrary objects: files holding them are refused and nothing runs."""

from __future__ import annotations

import pickle

import pytest
import torch

from paratrain.checkpoint.writer_lock import LOCK_FILE
from paratrain.goodput.ledger import LEDGER_FILE
from paratrain.checkpoint import Checkpointer, describe, export
from paratrain.checkpoint.layout import COMPLETE
from paratrain.checkpoint.manifest import read_manifest, seal
from paratrain.errors import CheckpointError
from tests.checkpoint.evil import Evil
from tests.checkpoint.helpers import fresh_checkpointer, save_steps, trained


def reseal(directory):
    """Re-checksum a tampered checkpoint, as someone crafting a malicious one could."""
    manifest = read_manifest(directory)
    (directory / COMPLETE).unlink()
    seal(directory, manifest)


def test_pt_file_with_a_pickled_class_is_refused_and_nothing_executes(tmp_path):
    marker = tmp_path / "code-ran"
    model, _ = trained()
    evil_file = tmp_path / "weights.pt"
    torch.save({"model": model.state_dict(), "hook": Evil(str(marker))}, evil_file)

    _, ckpt = fresh_checkpointer(tmp_path / "checkpoints")
    for attempt in (lambda: ckpt.load(evil_file), lambda: describe(evil_file),
                    lambda: export(evil_file, tmp_path / "out.safetensors")):
        with pytest.raises(CheckpointError, match=r"pickled Python object \(it refers to tests\.checkpoint\.evil"):
            attempt()
    assert not marker.exists()
    assert not (tmp_path / "out.safetensors").exists()


def test_checkpoint_whose_state_file_holds_a_pickled_class_is_refused(tmp_path):
    marker = tmp_path / "code-ran"
    save_steps(tmp_path / "checkpoints", steps=(1,))
    step = tmp_path / "checkpoints" / "step-000001"
    torch.save({"state": {}, "param_groups": [Evil(str(marker))]}, step / "optimizer.pt")
    reseal(step)
    _, ckpt = fresh_checkpointer(tmp_path / "checkpoints")
    with pytest.raises(CheckpointError, match="optimizer.pt holds a pickled Python object.*arbitrary code"):
        ckpt.resume()
    assert not marker.exists()


def test_sharded_metadata_holding_a_pickled_class_is_refused(tmp_path):
    marker = tmp_path / "code-ran"
    model, optimizer = trained()
    ckpt = Checkpointer(None, tmp_path / "checkpoints", model=model, optimizer=optimizer)
    ckpt.sharded = True  # the DCP layout, written by this one process
    path = ckpt.save(step=1)
    assert (path / "sharded" / ".metadata").exists()
    with open(path / "sharded" / ".metadata", "wb") as handle:
        pickle.dump(Evil(str(marker)), handle)
    reseal(path)
    for attempt in (ckpt.resume, lambda: export(path, tmp_path / "out.safetensors"), lambda: describe(path)):
        with pytest.raises(CheckpointError, match=r"\.metadata holds a pickled Python object.*touch_marker"):
            attempt()
    assert not marker.exists()


def test_state_that_would_need_unpickling_is_refused_when_saving(tmp_path):
    class Counter:
        def __init__(self, value):
            self.value = value

        def state_dict(self):
            return {"history": [1, 2, {"best": self.value}]}

        def load_state_dict(self, state):
            self.value = state["history"][2]["best"]

    import numpy as np

    model, optimizer = trained()
    ckpt = Checkpointer(None, tmp_path, model=model, counter=Counter(3))
    ckpt.save(step=1)
    ckpt.by_name["counter"].obj.value = np.float64(0.5)
    with pytest.raises(CheckpointError, match=r"counter.state_dict\(\) holds a numpy.float64 at \['history'\]\[2\]\['best'\]"):
        ckpt.save(step=2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in (LOCK_FILE, LEDGER_FILE)) == ["latest", "step-000001"]
