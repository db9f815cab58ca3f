"""``paratrain doctor``'s GPU self-test: the CUDA paths paratrain takes, run once on this
machine's GPUs (about a minute, most of it ``torch.compile``).

Each check is one :class:`~paratrain.cli.doctor_checks.Finding`: ``ok`` when the path
works, ``warning`` when it works worse than it could (emulated bf16), ``problem`` with
the error when it fails. The same paths are proven by ``pytest -m gpu`` (tests/gpu).
"""

from __future__ import annotations

from collections.abc import Callable

from paratrain.cli.doctor_checks import OK, PROBLEM, WARNING, Finding


def gpu_self_test() -> list[Finding]:
    """Run every check on ``cuda:0`` (and, with two GPUs or more, DDP over NCCL on two of
    them); nothing when no CUDA GPU is visible. Leaves TF32 as it found it."""
    import torch

    if not torch.cuda.is_available():
        return []
    checks: list[tuple[str, Callable[[torch.device], str | Finding]]] = [
        ("self-test: device", _device),
        ("self-test: tf32 switch", _tf32_switch),
        ("self-test: bf16", _bf16),
        ("self-test: fp16 GradScaler", _fp16_scaler),
        ("self-test: clock sync", _clock_sync),
        ("self-test: torch.compile", _compile),
    ]
    if torch.cuda.device_count() >= 2:
        checks.append(("self-test: ddp on NCCL", _ddp_on_two_gpus))
    device = torch.device("cuda", 0)
    found = []
    for name, check in checks:
        try:
            outcome = check(device)
        except Exception as exc:  # a failing path is the finding, whatever torch raised
            first = str(exc).splitlines()[0] if str(exc) else ""
            found.append(Finding(name, PROBLEM, f"{type(exc).__name__}: {first}", "run `pytest -m gpu` for the details"))
            continue
        found.append(outcome if isinstance(outcome, Finding) else Finding(name, OK, outcome))
    return found


def _device(device) -> str:
    import torch

    from paratrain.runtime.device import use_device

    use_device(device)
    product = torch.ones(64, 64, device=device) @ torch.ones(64, 64, device=device)
    assert float(product[0, 0]) == 64.0, "a matmul gave a wrong result"
    return f"{torch.cuda.get_device_name(device)} is current and computes"


def _tf32_switch(device) -> str:
    import torch

    from paratrain.runtime.tf32 import set_tf32

    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        for enabled in (False, True):
            set_tf32(device, enabled)
            seen = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
                    torch.backends.cudnn.allow_tf32)
            assert seen == ("high" if enabled else "highest", enabled, enabled), f"tf32={enabled} reads back as {seen}"
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]
    return "Runtime(tf32=True/False) reads back the same through every torch getter"


def _bf16(device) -> str | Finding:
    import torch

    if not torch.cuda.is_bf16_supported(including_emulation=False):
        return Finding("self-test: bf16", WARNING, "this GPU has no native bf16: bf16-mixed is refused",
                       "use precision='fp16-mixed' (GradScaler) or '32-true'")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = torch.ones(8, 8, device=device) @ torch.ones(8, 8, device=device)
    assert out.dtype == torch.bfloat16, f"autocast computed in {out.dtype}"
    return "native bf16: bf16-mixed autocasts matmuls to bfloat16"


def _fp16_scaler(device) -> str:
    import torch

    from paratrain.precision import create_precision

    precision = create_precision("fp16-mixed", device)
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scale = precision.scale
    precision.backward(model(torch.randn(3, 4, device=device)).sum() * 1e35)  # overflows once scaled
    precision.unscale(optimizer)
    assert precision.optimizer_step(optimizer) is False and precision.scale == scale / 2, "overflow was not skipped"
    # A skipped step leaves its inf gradients in .grad, as a training loop's would be until its zero_grad;
    # without it the finite backward below adds onto them and is skipped too.
    optimizer.zero_grad(set_to_none=True)
    precision.backward(model(torch.randn(3, 4, device=device)).sum())
    precision.unscale(optimizer)
    assert precision.optimizer_step(optimizer) is True, "a finite step was skipped"
    return f"an overflowing step is skipped (scale {scale:g} -> {precision.scale:g}), a finite one applied"


def _clock_sync(device) -> str:
    import torch

    from paratrain.loop.step_timing import TrainWindow

    window = TrainWindow(device)
    a = torch.randn(1024, 1024, device=device)
    for _ in range(10):
        a = a @ a / 1024
    _ = window.train_seconds
    assert torch.cuda.current_stream(device).query(), "the clock was read with GPU work pending"
    return "the fit loop's clock reads after the GPU finished its queued work"


def _compile(device) -> str:
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
    compiled = torch.compile(model)
    x = torch.randn(4, 32, device=device)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-3, atol=1e-3)
    return "a compiled model gives the eager model's outputs"


def _ddp_on_two_gpus(device) -> str:
    from paratrain.launch.spawn import spawn

    same, backend = spawn(_ddp_steps, nprocs=2, timeout=300)
    assert backend == "nccl" and same, "the two ranks' weights differ after DDP steps"
    return "2 ranks, one GPU each, train with DDP over NCCL and keep identical weights"


def _ddp_steps() -> tuple[bool, str]:
    """Worker: three DDP steps on this rank's GPU; whether every rank holds the same weights."""
    import torch

    from paratrain.errors import DistributedError
    from paratrain.runtime.runtime import Runtime

    with Runtime(strategy="ddp", timeout=120) as rt:
        model = torch.nn.Linear(8, 1)
        model, optimizer = rt.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        for _ in range(3):
            loss = model(torch.randn(4, 8, device=rt.device)).pow(2).mean()
            rt.backward(loss)
            rt.step(optimizer)
        try:
            rt.check_same_weights(model)
            same = True
        except DistributedError:
            same = False
        del model, optimizer
        return same, rt.backend
