"""The GPU suite: ``pytest -m gpu`` on a machine with CUDA GPUs.

Every test here is marked ``gpu`` (``pytestmark`` in each file). Without a CUDA GPU
they all skip for the one reason below, which ``-ra`` reports as a single line.
"""

from __future__ import annotations

import inspect

import pytest
import torch

NO_CUDA = "GPU suite: no CUDA GPU visible to torch here (run `pytest -m gpu` on a machine with one)"
_NO_CUDA_LINE = inspect.currentframe().f_lineno - 1  # where -ra says the skips come from


@pytest.fixture(autouse=True)
def cuda_gpu():
    if not torch.cuda.is_available():
        pytest.skip(NO_CUDA)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Report every no-CUDA skip at this file's line, so ``-ra`` folds them into one line."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(report.longrepr, tuple) and report.longrepr[2].endswith(NO_CUDA):
        report.longrepr = (__file__, _NO_CUDA_LINE, report.longrepr[2])


@pytest.fixture
def two_gpus():
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs two CUDA GPUs, {torch.cuda.device_count()} visible")
