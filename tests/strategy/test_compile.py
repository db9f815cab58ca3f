"""``compile=True`` on one process: the losses and weights of eager, a checkpoint that resumes exactly.

ddp and fsdp under compile: tests/strategy/test_fast_defaults_multi.py.
"""

from __future__ import annotations

import torch

from tests.strategy.fast_default_workers import compiled_and_eager

# Inductor's C++ kernels may fuse and reorder float32 arithmetic: a few ulps after 8 steps.
ATOL = 1e-5


def assert_same_training(got: dict, want: dict, atol: float) -> None:
    torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(want["losses"]), rtol=0, atol=atol)
    assert got["state"].keys() == want["state"].keys()
    for name, values in want["state"].items():
        torch.testing.assert_close(torch.tensor(got["state"][name]), torch.tensor(values), rtol=0, atol=atol)


def assert_compile_trains_like_eager(runs: dict) -> None:
    assert runs["frames"] > 0  # dynamo compiled the model (not a silent fall back to eager)
    assert not any("_orig_mod" in key for key in runs["compiled"]["state"])
    assert_same_training(runs["compiled"], runs["eager"], ATOL)
    assert_same_training(runs["resumed"], runs["compiled"], atol=0)  # resume is exact under compile


def test_compile_trains_like_eager_and_resumes_exactly(tmp_path):
    assert_compile_trains_like_eager(compiled_and_eager("single", str(tmp_path)))
