"""``paratrain doctor`` on a GPU machine runs its self-test, and every path passes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.gpu


def test_doctor_self_test_passes_on_this_gpu(cli_env):
    done = subprocess.run([sys.executable, "-m", "paratrain", "doctor", "--json"], env=cli_env,
                          capture_output=True, text=True, timeout=600)
    findings = {f["check"]: f for f in json.loads(done.stdout)["findings"] if f["check"].startswith("self-test")}
    expected = {"device", "tf32 switch", "bf16", "fp16 GradScaler", "clock sync", "torch.compile"}
    if torch.cuda.device_count() >= 2:
        expected.add("ddp on NCCL")
    assert {name.removeprefix("self-test: ") for name in findings} == expected
    assert all(f["status"] in ("ok", "warning") for f in findings.values()), findings  # warning: emulated bf16
