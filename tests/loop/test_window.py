"""The fit loop's clock: on CUDA every read waits for the GPU first (faked device calls)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from paratrain.loop.window import TrainWindow


@pytest.fixture
def events(monkeypatch):
    """What happened, in order: ``"sync"`` (torch.cuda.synchronize) and ``"read"`` (the clock)."""
    seen: list[str] = []
    ticks = iter(range(1000))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: seen.append("sync"))
    monkeypatch.setattr("paratrain.loop.window.time",
                        SimpleNamespace(perf_counter=lambda: seen.append("read") or float(next(ticks))))
    return seen


def use_a_window(window: TrainWindow) -> None:
    window.add(torch.tensor(2.0), samples=8)
    window.pause(lambda: None)  # evaluation, logging
    assert window.train_seconds > 0
    loss, samples_per_second = window.take()
    assert float(loss) == 2.0 and samples_per_second > 0


def test_on_cuda_every_clock_read_comes_after_the_gpu_finished(events):
    # Kernels run asynchronously: without the wait, samples/s and the step time that the
    # communication report compares with the link count steps the GPU has not done yet.
    use_a_window(TrainWindow(torch.device("cuda", 0)))
    reads = [i for i, event in enumerate(events) if event == "read"]
    assert len(reads) == 5 and all(events[i - 1] == "sync" for i in reads)


def test_on_cpu_the_clock_is_read_without_synchronising(events):
    use_a_window(TrainWindow(torch.device("cpu")))
    assert events == ["read"] * 5
