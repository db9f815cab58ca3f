"""Bad input: clear one-line errors, and nothing lost or overwritten."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import tempfile
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from paratrain.checkpoint.writer_lock import LOCK_FILE
from paratrain.goodput.ledger import LEDGER_FILE
from paratrain.checkpoint import Checkpointer
from paratrain.checkpoint.manifest import verify
from paratrain.errors import CheckpointError, ConfigError
from tests.checkpoint.helpers import fresh_checkpointer, save_steps, trained
from tests.checkpoint.workers import Net


def assert_untouched(directory: Path, names=("latest", "step-000001")) -> None:
    assert sorted(p.name for p in directory.iterdir() if p.name not in (LOCK_FILE, LEDGER_FILE)) == sorted(names)
    assert (directory / "latest").read_text().strip() == "step-000001"
    verify(directory / "step-000001")


def test_path_that_does_not_exist_or_is_not_a_checkpoint(tmp_path):
    _, ckpt = fresh_checkpointer(tmp_path / "checkpoints")
    with pytest.raises(CheckpointError, match="does not exist; pass a checkpoint directory"):
        ckpt.load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="is not a paratrain checkpoint"):
        ckpt.load(tmp_path / "empty")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        ckpt.load(tmp_path / "notes.txt")
    torch.save({"lr": 0.1, "epoch": 3}, tmp_path / "settings.pt")
    with pytest.raises(CheckpointError, match="holds no model state dict"):
        ckpt.load(tmp_path / "settings.pt")
    assert ckpt.resume() is None  # an empty or missing directory is a fresh start


class Renamed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(6, 16), torch.nn.Linear(16, 16)])
        self.head = torch.nn.Linear(16, 3)


def test_checkpoint_from_another_model_names_keys_shapes_and_closest_matches(tmp_path):
    save_steps(tmp_path, steps=(1,))
    narrower = Net(hidden=8)
    with pytest.raises(CheckpointError) as caught:
        Checkpointer(None, tmp_path, model=narrower).resume()
    message = str(caught.value)
    assert "\n" not in message
    assert "does not fit this model" in message
    assert "blocks.0.weight saved [16, 6] vs model [8, 6]" in message
    with pytest.raises(CheckpointError) as caught:
        Checkpointer(None, tmp_path, model=Renamed()).resume()
    message = str(caught.value)
    assert "4 missing in the checkpoint: layers.0.bias [16] (closest saved: blocks.0.bias [16])" in message
    assert "4 unexpected: blocks.0.bias [16] (closest in the model: layers.0.bias [16])" in message
    assert "build the model the checkpoint was saved from" in message


@contextlib.contextmanager
def unprivileged():
    """Root ignores file permissions; act as 'nobody' for the block when running as root."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)


def test_read_only_directory_is_a_clear_error_and_old_checkpoints_stay(tmp_path):
    base = Path(tempfile.mkdtemp())  # outside pytest's root-only tree, so 'nobody' can reach it
    try:
        base.chmod(0o755)
        directory = base / "checkpoints"
        save_steps(directory, steps=(1,))
        model, optimizer = trained()
        ckpt = Checkpointer(None, directory, model=model, optimizer=optimizer)
        directory.chmod(0o555)
        with unprivileged(), pytest.raises(CheckpointError, match="Permission denied; the directory is read-only"):
            ckpt.save(step=2)
        directory.chmod(0o755)
        assert_untouched(directory)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_disk_full_while_writing_is_a_clear_error_and_old_checkpoints_stay(tmp_path, monkeypatch):
    save_steps(tmp_path, steps=(1,))
    model, optimizer = trained()
    ckpt = Checkpointer(None, tmp_path, model=model, optimizer=optimizer)

    def no_space(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 10)  # a partial file, as a real full disk leaves
        raise OSError(errno.ENOSPC, "No space left on device", filename)

    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, "save_file", no_space)
    with pytest.raises(CheckpointError, match="No space left on device; free disk space, lower keep_last"):
        ckpt.save(step=2)
    assert_untouched(tmp_path)
    monkeypatch.undo()

    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr("paratrain.checkpoint.writer.shutil.disk_usage", lambda path: Usage(100, 90, 10))
    with pytest.raises(CheckpointError, match=r"not enough disk space .* needs about 0\.\d MiB, 0\.0 MiB free"):
        ckpt.save(step=2)
    assert_untouched(tmp_path)


def test_invalid_options_are_config_errors(tmp_path):
    model, optimizer = trained()
    (tmp_path / "file").write_text("")
    cases = [
        (dict(keep_last=0), "keep_last=0: keep at least 1"),
        (dict(keep_last=-2), "keep_last=-2"),
        (dict(keep_last=True), "keep_last=True"),
        (dict(mode="best"), "mode='best'"),
        (dict(directory=tmp_path / "file"), "is a file"),
        (dict(thing=object()), "has no state_dict"),
        (dict(rng=model), "cannot be used"),
        (dict(model=None, optimizer=optimizer), "trains parameters of no model"),
        (dict(model=None), "nothing to save"),
    ]
    for options, message in cases:
        kwargs = {"directory": tmp_path / "ok", "model": model, **options}
        with pytest.raises(ConfigError, match=message):
            Checkpointer(None, **kwargs)
    ckpt = Checkpointer(None, tmp_path / "ok", model=model)
    for kwargs, message in [
        ({}, "needs step= or epoch="),
        ({"step": -1}, "non-negative integer"),
        ({"step": 1, "metrics": {"acc": "high"}}, "not a number"),
        ({"step": 1, "extra": {"t": torch.ones(1)}}, "JSON-serialisable"),
    ]:
        with pytest.raises(ConfigError, match=message):
            ckpt.save(**kwargs)
    assert not (tmp_path / "ok").exists()  # nothing was written


class _History:
    """Non-tensor state of a few MB (a metrics history): written by torch.save."""

    def __init__(self):
        self.values = list(range(300_000))

    def state_dict(self):
        return {"values": self.values}

    def load_state_dict(self, state):
        self.values = state["values"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root (CI runs as root)")
def test_a_disk_that_fills_during_a_save_of_non_tensor_state_is_named(tmp_path):
    # Before: torch.save's own words, "unexpected pos 64 vs 0", and nothing about the disk.
    disk = tmp_path / "small"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)], check=True)
    try:
        ckpt = Checkpointer(None, disk / "ckpt", model=torch.nn.Linear(2, 2), history=_History())
        with pytest.raises(CheckpointError, match=r"history.pt: No space left on device; free disk space"):
            ckpt.save(step=1)
        assert not [p for p in (disk / "ckpt").iterdir() if p.name not in (LOCK_FILE, LEDGER_FILE)]  # nothing half-written
        ckpt.close()
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)  # the failed write's traceback may still hold a file


def test_export_racing_rotation_reads_the_checkpoint_left_and_calls_nothing_damaged(tmp_path, monkeypatch):
    # Before: a checkpoint removed (rotated) while `ckpt export RUN` read it was reported as damaged.
    import importlib
    import shutil
    import warnings

    from tests.checkpoint.helpers import save_steps

    export_module = importlib.import_module("paratrain.checkpoint.export")
    save_steps(tmp_path / "ckpt", steps=(1, 2), keep_last=5)
    read = export_module.read_full_model
    removed = []

    def removed_during_read(source, manifest, name):
        if not removed:  # a live run's rotation (or a user) removes it while export reads it
            removed.append(source.name)
            shutil.rmtree(source)
            (source.parent / "latest").write_text("step-000001")
        return read(source, manifest, name)

    monkeypatch.setattr(export_module, "read_full_model", removed_during_read)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        summary = export_module.export(tmp_path / "ckpt", tmp_path / "model.safetensors")
    assert removed == ["step-000002"] and summary["source"].endswith("step-000001")
    assert not [w for w in said if "damaged" in str(w.message)]
    assert not (tmp_path / "ckpt" / "damaged").exists()
    # Named itself, the checkpoint that went away is said to be gone, not damaged.
    removed.clear()
    save_steps(tmp_path / "other", steps=(1,))
    with pytest.raises(CheckpointError, match="was removed while it was being read .* nothing is damaged"):
        export_module.export(tmp_path / "other" / "step-000001", tmp_path / "model2.safetensors")


def test_an_mtbf_without_the_auto_interval_is_refused_before_anything_is_written(tmp_path):
    model = torch.nn.Linear(2, 1)
    for every in (None, 10):  # mtbf shapes every="auto" only: beside anything else it would set nothing
        with pytest.raises(ConfigError, match=rf"mtbf=60.0 sets the interval of every='auto' only, got every={every!r}; "
                                              r"pass every='auto' or drop mtbf"):
            Checkpointer(None, tmp_path / "ckpt", model=model, every=every, mtbf=60.0)
    assert not (tmp_path / "ckpt").exists()
