"""What a rank records about its memory: every GPU it computes on (faked CUDA queries)."""

from __future__ import annotations

import torch

from paratrain.bench.record import RankRecord, StepRecorder, rank_file


def test_dataparallel_memory_counts_every_gpu_it_replicates_onto(monkeypatch, tmp_path):
    peaks = {0: 3 << 20, 1: 2 << 20}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: peaks[torch.device(device).index])
    gpus = [torch.device("cuda", 0), torch.device("cuda", 1)]
    recorder = StepRecorder(tmp_path, 0, 1, samples_per_step=8, device="cuda:0", memory_devices=gpus)
    recorder.step(1.0)
    recorder.finish()
    assert RankRecord.read(rank_file(tmp_path, 0)).peak_gpu_bytes == 5 << 20
    one = StepRecorder(tmp_path, 0, 1, samples_per_step=8, device="cuda:1")  # a DDP rank: its own GPU
    one.finish()
    assert RankRecord.read(rank_file(tmp_path, 0)).peak_gpu_bytes == 2 << 20
