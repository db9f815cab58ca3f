"""An own loop's Checkpointer with ``every="auto"`` and background writes, in one process: when it saves,
what it waits for, and what its ledger holds."""

from __future__ import annotations

import torch

import paratrain as pt
from paratrain.goodput import ledger


def test_auto_interval_and_background_writes_of_an_own_loop(tmp_path, capsys):
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = pt.Checkpointer(None, tmp_path / "ckpt", model=model, optimizer=optimizer, background=True,
                           every="auto", mtbf=3600.0)
    try:
        assert ckpt.resume() is None
        first = ckpt.interval.steps  # no step time known yet: a first save early, to measure the cost
        assert [step for step in range(1, 2 * first) if ckpt.due(step)][:1] == [first]
        for step in range(1, 3):
            model.weight.data += 1.0
            ledger.step_done()
            ckpt.save(step=step)
        weights = model.weight.detach().clone()
        model.weight.data += 1.0  # after the snapshot: not in the checkpoint being written
        ckpt.finish_writing("the check")
        from safetensors.torch import load_file

        saved = load_file(str(tmp_path / "ckpt" / "step-000002" / "model.safetensors"))
        assert torch.equal(saved["weight"], weights)
        assert ckpt.interval.costs and ckpt.interval.steps >= 1
        assert "checkpoint interval auto: every" in capsys.readouterr().err
    finally:
        ckpt.close()
    records = ledger.read_records(tmp_path / "ckpt" / ledger.LEDGER_FILE)
    kinds = [r["event"] for r in records]
    assert kinds[0] == "attempt" and kinds.count("save") == 2 and "written" in kinds
    assert [r for r in records if r["event"] == "save"][1]["background"] is True
    assert records[-1]["event"] == "ledger" and records[-1]["ended"]


def test_the_auto_interval_counts_the_steps_a_background_write_slowed(tmp_path, monkeypatch):
    """A GPU step's training thread needs the interpreter lock that the writing thread holds: the steps beside a
    write are slower. Here they are made slower (a longer sleep while the write runs, held open by the test
    hook): the save's cost is what it blocked plus what those steps took beyond the steps after the write."""
    import time

    from paratrain.checkpoint.files import PAUSE_ENV

    monkeypatch.setenv(PAUSE_ENV, "0.4@2:prepared")  # the write of step 2 waits 0.4 s before its first file
    model = torch.nn.Linear(4, 2)
    ckpt = pt.Checkpointer(None, tmp_path / "ckpt", model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                           background=True, every="auto", mtbf=3600.0)
    try:
        ckpt.resume()
        for step in range(1, 40):
            writing = ckpt._writing is not None and ckpt._writing.running
            time.sleep(0.04 if writing else 0.005)
            ledger.step_done()
            if step in (1, 2, 39):  # the first save is written in the foreground; the second in the background
                ckpt.save(step=step)
        slowed = ckpt.interval.slowdowns[-1]
        assert slowed > 0 and ckpt.interval.slowdowns[:-1] == [0.0, 0.0]
        assert ckpt.interval.costs[-1] > slowed  # what the save blocked, plus the slowed steps
    finally:
        ckpt.close()
