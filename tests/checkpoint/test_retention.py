"""keep_last, best by metric, the latest pointer, and saving a step again."""

from __future__ import annotations

from paratrain.checkpoint.writer_lock import LOCK_FILE
from paratrain.goodput.ledger import LEDGER_FILE
from paratrain.checkpoint import Checkpointer
from paratrain.checkpoint.manifest import read_manifest
from tests.checkpoint.helpers import train_one_step, trained


def names(directory):
    return sorted(p.name for p in directory.iterdir() if p.name not in (LOCK_FILE, LEDGER_FILE))  # no checkpoints


def test_keeps_the_last_k_plus_the_best_and_points_latest_at_the_newest(tmp_path):
    model, optimizer = trained()
    ckpt = Checkpointer(None, tmp_path, keep_last=2, best_metric="acc", model=model, optimizer=optimizer)
    for step, acc in zip(range(1, 6), [0.5, 0.9, 0.6, 0.7, 0.8]):
        train_one_step(model, optimizer)
        ckpt.save(step=step, epoch=0, metrics={"acc": acc})
    assert names(tmp_path) == ["latest", "step-000002", "step-000004", "step-000005"]
    assert ckpt.best_path().name == "step-000002"
    assert ckpt.latest().name == "step-000005"
    assert [p.name for p in ckpt.checkpoints()] == ["step-000002", "step-000004", "step-000005"]


def test_min_mode_and_keep_all(tmp_path):
    model, _ = trained()
    lowest = Checkpointer(None, tmp_path / "a", keep_last=1, best_metric="loss", mode="min", model=model)
    everything = Checkpointer(None, tmp_path / "b", keep_last=None, model=model)
    for step, loss in zip(range(1, 5), [3.0, 1.0, 2.0, 2.5]):
        lowest.save(step=step, metrics={"loss": loss})
        everything.save(epoch=step)
    assert names(tmp_path / "a") == ["latest", "step-000002", "step-000004"]
    assert names(tmp_path / "b") == ["epoch-0001", "epoch-0002", "epoch-0003", "epoch-0004", "latest"]


def test_saving_a_step_again_after_resuming_an_older_one_replaces_it(tmp_path):
    model, optimizer = trained()
    ckpt = Checkpointer(None, tmp_path, model=model, optimizer=optimizer)
    for step in (1, 2):
        train_one_step(model, optimizer)
        ckpt.save(step=step)
    first = read_manifest(tmp_path / "step-000002")
    ckpt.load(tmp_path / "step-000001")
    train_one_step(model, optimizer)
    ckpt.save(step=2, extra={"attempt": 2})
    second = read_manifest(tmp_path / "step-000002")
    assert names(tmp_path) == ["latest", "step-000001", "step-000002"]
    assert second.sequence > first.sequence and second.extra == {"attempt": 2}
    assert ckpt.resume().extra == {"attempt": 2}


def test_a_checkpoint_pruned_while_another_process_reads_the_list_is_left_out_not_raised(tmp_path, monkeypatch):
    """A reader beside the run (a watcher, `paratrain goodput`) lists the checkpoints while retention removes the
    oldest: the one that vanished between its marker's check and its manifest's read is skipped, not a traceback."""
    from paratrain.checkpoint import catalog, manifest

    model, optimizer = trained()
    ckpt = Checkpointer(None, tmp_path, model=model, optimizer=optimizer, keep_last=3)
    for step in (1, 2):
        ckpt.save(step=step)
    real = manifest.sha256_file

    def pruned_meanwhile(path):
        if path.parent.name == "step-000001":  # retention removes it right after its marker was seen
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real(path)

    monkeypatch.setattr(manifest, "sha256_file", pruned_meanwhile)
    assert [path.name for path, _ in catalog.complete(tmp_path)] == ["step-000002"]
    import pytest

    from paratrain.errors import CheckpointError

    with pytest.raises(CheckpointError, match="was removed while it was read"):
        read_manifest(tmp_path / "step-000001")
