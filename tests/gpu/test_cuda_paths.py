"""One GPU: TF32, bf16, fp16 with GradScaler and its checkpoint, compile, the fit loop's
clock, ``nproc auto``, metrics on bf16 logits — each CUDA path paratrain takes."""

from __future__ import annotations

import pytest
import torch

import paratrain as pt
from tests.runtime.fake_cuda import tf32_restored  # noqa: F401 - the fixture

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("tf32", [True, False])
def test_tf32_follows_the_runtime_and_compile_reads_it(tf32_restored, tf32):
    rt = pt.Runtime(strategy="single", tf32=tf32, compile=True)
    assert rt.device.type == "cuda" and torch.cuda.current_device() == rt.device.index
    # Every getter answers (none raises "mix of the legacy and new APIs") and agrees.
    assert torch.get_float32_matmul_precision() == ("high" if tf32 else "highest")
    assert torch.backends.cuda.matmul.allow_tf32 is tf32 and torch.backends.cudnn.allow_tf32 is tf32
    model = rt.setup(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    assert torch.isfinite(model(torch.randn(8, 64, device=rt.device)).sum())  # inductor reads the getters
    rt.close()


def test_bf16_mixed_runs_only_where_the_gpu_has_bf16(tf32_restored):
    native = torch.cuda.get_device_capability()[0] >= 8  # Ampere and newer
    if not native:  # V100, T4: torch's default check counts emulation; paratrain does not
        with pytest.raises(pt.ConfigError, match="fp16-mixed"):
            pt.Runtime(strategy="single", precision="bf16-mixed")
        return
    rt = pt.Runtime(strategy="single", precision="bf16-mixed")
    layer = torch.nn.Linear(4, 4).to(rt.device)
    with rt.autocast():
        logits = layer(torch.randn(3, 4, device=rt.device))
    assert logits.dtype == torch.bfloat16
    assert 0.0 <= pt.accuracy(logits, torch.tensor([0, 1, 2])) <= 1.0  # metrics take bf16 logits
    rt.close()


def test_fp16_skips_an_overflowing_step_and_its_scaler_is_checkpointed(tf32_restored, tmp_path):
    rt = pt.Runtime(strategy="single", precision="fp16-mixed")
    model = torch.nn.Linear(4, 1)
    model, optimizer = rt.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    before = [p.detach().clone() for p in model.parameters()]
    rt.backward(model(torch.randn(3, 4, device=rt.device)).sum() * 1e35)  # inf once scaled
    rt.step(optimizer)
    assert rt.precision.skipped_steps == 1 and rt.precision.scale == 32768.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the step was skipped
    pt.Checkpointer(rt, tmp_path, model=model, optimizer=optimizer).save(step=1)
    fresh = pt.Runtime(strategy="single", precision="fp16-mixed")
    other = torch.nn.Linear(4, 1)
    other, other_optimizer = fresh.setup(other, torch.optim.SGD(other.parameters(), lr=0.1))
    assert pt.Checkpointer(fresh, tmp_path, model=other, optimizer=other_optimizer).resume() is not None
    assert fresh.precision.scale == 32768.0 and fresh.precision.skipped_steps == 1
    rt.close()
    fresh.close()


def test_the_fit_loop_clock_reads_after_the_gpu_finished():
    from paratrain.loop.step_timing import TrainWindow

    window = TrainWindow(torch.device("cuda", torch.cuda.current_device()))
    a = torch.randn(2048, 2048, device="cuda")
    for _ in range(20):
        a = a @ a / 2048  # queued: the host runs ahead of the GPU
    assert window.train_seconds > 0
    assert torch.cuda.current_stream().query()  # nothing left pending when the clock was read


def test_nproc_auto_is_the_number_of_visible_gpus():
    from paratrain.launch.config import parse_nproc

    assert parse_nproc("auto") == torch.cuda.device_count()
