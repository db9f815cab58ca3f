"""Damaged and unfinished checkpoints are detected; resume falls back to the previous good one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from paratrain.checkpoint.writer_lock import LOCK_FILE
from paratrain.goodput.ledger import LEDGER_FILE
from paratrain.checkpoint import CheckpointWarning, describe
from paratrain.errors import CheckpointError
from tests.checkpoint.helpers import flip_byte, fresh_checkpointer, same_weights, save_steps, truncate
from tests.support import ROOT, clean_env


@pytest.mark.parametrize(
    ("damage", "file", "problem"),
    [
        (truncate, "model.safetensors", "truncated"),
        (flip_byte, "optimizer.pt", "checksum mismatch"),
        (flip_byte, "manifest.json", "does not match its COMPLETE marker"),
    ],
)
def test_damaged_newest_checkpoint_falls_back_to_previous_with_a_warning(tmp_path, damage, file, problem):
    weights = save_steps(tmp_path)
    damage(tmp_path / "step-000002" / file)
    model, ckpt = fresh_checkpointer(tmp_path)
    with pytest.warns(CheckpointWarning) as caught:
        state = ckpt.resume()
    message = " ".join(str(w.message) for w in caught)
    assert "step-000002" in message and file in message and problem in message
    assert state.step == 1 and state.path.name == "step-000001"
    assert same_weights(model, weights[1])
    # Never deleted: set aside, where the warning says, out of the way of rotation.
    damaged = tmp_path / "damaged" / "step-000002"
    assert not (tmp_path / "step-000002").exists() and f"moved to {damaged}" in message
    # An explicit path gets no fallback: the damage is an error naming the file.
    with pytest.raises(CheckpointError, match=f"{file}.*{problem}|{problem}"):
        ckpt.load(damaged)
    assert describe(tmp_path / "step-000001")["verified"]
    if file == "manifest.json":
        with pytest.raises(CheckpointError, match="does not match its COMPLETE marker"):
            describe(damaged)
    else:  # inspect describes the damage instead of refusing
        report = describe(damaged)
        assert not report["verified"]
        assert {f["file"]: f["status"] for f in report["files"]}[file].startswith(problem)


def test_checkpoint_without_marker_is_not_a_checkpoint(tmp_path):
    weights = save_steps(tmp_path)
    (tmp_path / "step-000002" / "COMPLETE").unlink()
    model, ckpt = fresh_checkpointer(tmp_path)
    with pytest.warns(CheckpointWarning, match="step-000002.*no COMPLETE marker"):
        state = ckpt.resume()
    assert state.step == 1 and same_weights(model, weights[1])
    with pytest.raises(CheckpointError, match="no COMPLETE marker"):
        describe(tmp_path / "step-000002")


def test_every_checkpoint_damaged_is_an_error_naming_them_and_nothing_is_deleted(tmp_path):
    # Before: a silent fresh start from step 0, and rotation then deleted the damaged checkpoints.
    save_steps(tmp_path, steps=(1, 2))
    truncate(tmp_path / "step-000001" / "model.safetensors")
    truncate(tmp_path / "step-000002" / "model.safetensors")
    _, ckpt = fresh_checkpointer(tmp_path)
    with pytest.raises(CheckpointError, match=r"holds 2 checkpoint\(s\) and none is intact \(step-000002: .*model.safetensors: "
                                              r"truncated.*; step-000001: .*nothing was deleted.*--fresh"):
        ckpt.resume()
    assert (tmp_path / "step-000001").is_dir() and (tmp_path / "step-000002").is_dir()


def test_writer_killed_during_save_leaves_previous_checkpoint_loadable(tmp_path):
    env = clean_env(PARATRAIN_TEST_PAUSE_IN_SAVE="120@2")
    writer = subprocess.Popen([sys.executable, "-m", "tests.checkpoint.writer_script", str(tmp_path)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in writer.stderr:  # the hook announces the pause once the data files of step 2 are written
            if "pausing" in line:
                break
        else:
            pytest.fail(f"the writer exited without pausing: {writer.wait()}")
        os.kill(writer.pid, signal.SIGKILL)
        assert writer.wait() == -signal.SIGKILL
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        writer.stdout.close()
        writer.stderr.close()
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".step-000002.tmp-")]
    assert len(leftovers) == 1 and (leftovers[0] / "model.safetensors").exists()
    assert not (leftovers[0] / "COMPLETE").exists()
    assert (tmp_path / "latest").read_text().strip() == "step-000001"
    assert not (tmp_path / "step-000002").exists()

    model, ckpt = fresh_checkpointer(tmp_path)
    state = ckpt.resume()
    assert state.step == 1
    from safetensors.torch import load_file

    assert same_weights(model, load_file(str(tmp_path / "step-000001" / "model.safetensors")))
    # The next save clears what the killed one left.
    ckpt.save(step=2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in (LOCK_FILE, LEDGER_FILE)) == \
        ["latest", "step-000001", "step-000002"]


def _rewrite_manifest(checkpoint, edit) -> None:
    """Edit ``manifest.json``'s file table and reseal ``COMPLETE`` (a consistent edit)."""
    import hashlib
    import json

    manifest = json.loads((checkpoint / "manifest.json").read_text())
    edit(manifest["files"])
    text = json.dumps(manifest)
    (checkpoint / "manifest.json").write_text(text)
    (checkpoint / "COMPLETE").write_text(f"sha256 {hashlib.sha256(text.encode()).hexdigest()}\n")


@pytest.mark.parametrize("older", ["sha256", "crc32"])
def test_a_checkpoint_checksummed_as_an_older_format_did_is_still_verified(tmp_path, older):
    """Data files carry a CRC-32C now (the CPU's instruction; google-crc32c); a checkpoint written with SHA-256
    (format 1) or CRC-32 (formats 2, 3) still verifies, and a flipped byte in it is still found; a file entry with
    no checksum at all is damage."""
    import hashlib
    import zlib

    from paratrain.checkpoint.manifest import verify

    save_steps(tmp_path)
    checkpoint = tmp_path / "step-000002"
    assert all(set(entry) == {"bytes", "crc32c"} for entry in verify(checkpoint).files.values())
    rewrite = {"sha256": lambda data: hashlib.sha256(data).hexdigest(), "crc32": lambda data: f"{zlib.crc32(data):08x}"}

    def as_older_format(files):
        for name, entry in files.items():
            entry[older] = rewrite[older]((checkpoint / name).read_bytes())
            del entry["crc32c"]

    _rewrite_manifest(checkpoint, as_older_format)
    assert older in verify(checkpoint).files["optimizer.pt"]
    flip_byte(checkpoint / "optimizer.pt")
    with pytest.raises(CheckpointError, match="optimizer.pt: checksum mismatch"):
        verify(checkpoint)
    _rewrite_manifest(tmp_path / "step-000001", lambda files: files["optimizer.pt"].pop("crc32c"))
    with pytest.raises(CheckpointError, match="optimizer.pt: no checksum listed for it"):
        verify(tmp_path / "step-000001")


@pytest.mark.parametrize("kind", ["crc32c", "crc32"])
def test_the_checksum_finds_a_flipped_bit_and_a_zeroed_block_anywhere_in_a_file(tmp_path, kind):
    from paratrain.checkpoint import files

    checksum_file = {"crc32c": files.crc32c_file, "crc32": files.crc32_file}[kind]
    path = tmp_path / "data"
    path.write_bytes(b"123456789")  # the check value of each (CRC-32C is Castagnoli's polynomial, not zlib's)
    assert checksum_file(path) == {"crc32c": "e3069283", "crc32": "cbf43926"}[kind]
    data = bytearray(os.urandom(3 << 20))
    path.write_bytes(bytes(data))
    whole = checksum_file(path)
    for offset in (0, 1 << 20, len(data) - 1):  # either side of the 1 MiB chunks it reads
        damaged = bytearray(data)
        damaged[offset] ^= 0x10
        path.write_bytes(bytes(damaged))
        assert checksum_file(path) != whole, offset
    damaged = bytearray(data)
    damaged[4096:8192] = bytes(4096)  # a torn write: one page of zeros
    path.write_bytes(bytes(damaged))
    assert checksum_file(path) != whole


def test_without_a_hardware_crc32c_a_checkpoint_is_checksummed_with_crc32(tmp_path, monkeypatch):
    """google-crc32c's pure-Python fallback is far slower than zlib: where the CPU has no CRC instruction the
    data files get a CRC-32, and the checkpoint verifies and finds damage as before."""
    from paratrain.checkpoint import files
    from paratrain.checkpoint.manifest import verify

    monkeypatch.setattr(files, "_hardware_crc32c", lambda: False)
    save_steps(tmp_path)
    checkpoint = tmp_path / "step-000002"
    assert all(set(entry) == {"bytes", "crc32"} for entry in verify(checkpoint).files.values())
    flip_byte(checkpoint / "optimizer.pt")
    with pytest.raises(CheckpointError, match="optimizer.pt: checksum mismatch"):
        verify(checkpoint)


def test_without_google_crc32c_a_crc32c_checkpoint_is_not_taken_for_damaged(tmp_path, monkeypatch):
    """A checkout run with PYTHONPATH=src may lack google-crc32c: verifying a CRC-32C checkpoint then stops with one
    line naming the package, and resuming sets nothing aside as damaged (the files are fine)."""
    import builtins

    from paratrain.checkpoint import catalog
    from paratrain.checkpoint.manifest import verify
    from paratrain.errors import MissingDependencyError

    save_steps(tmp_path)
    real_import = builtins.__import__

    def no_crc32c(name, *args, **kwargs):
        if name == "google_crc32c":
            raise ImportError("No module named 'google_crc32c'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_crc32c)
    with pytest.raises(MissingDependencyError, match="pip install google-crc32c"):
        verify(tmp_path / "step-000002")
    with pytest.raises(MissingDependencyError):
        catalog.resume_point(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("step-")) == ["step-000001", "step-000002"]
    assert not (tmp_path / catalog.DAMAGED_DIR).exists()
