"""A BatchNorm model of the project moved on the way to DDP (``backbone = get_model(name).cuda()``) is the
model the build made: ``.cuda()``/``.to(device)``/``.train()`` hand back the same module, so the name bound to
the chain holds the BatchNorm layers. The finding sits at the build and names the DDP line as an also-line.
A chained call that hands back something else (``.features``, ``.head()``) is not the built model.
"""

from __future__ import annotations

from pathlib import Path

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_cross_file_wrappers import MODEL
from tests.diagnostics.test_check_project_imports import project, script_text


def _norms(tmp_path: Path, build: str) -> list[tuple[int, str]]:
    script = project(tmp_path, {
        "train.py": script_text(f"""\
            from models import create_by_name
            dist.init_process_group("nccl")
            backbone = {build}

            backbone = torch.nn.parallel.DistributedDataParallel(
                module=backbone, device_ids=[0])
            """),
        "models.py": MODEL,
    })
    return [(f.line, f.problem) for f in check_file(script) if f.rule == "batchnorm-without-syncbn"]


def test_a_build_moved_to_the_gpu_on_the_same_line_is_followed_to_ddp(tmp_path):
    builds = ('create_by_name("plus").cuda()', 'create_by_name("plus").to(device).train()')
    for number, build in enumerate(builds):
        [(line, problem)] = _norms(tmp_path / str(number), build)
        assert line == 5 and "models.py:5" in problem and "(also lines 7)" in problem


def test_a_chained_call_that_hands_back_another_object_is_not_the_model(tmp_path):
    assert _norms(tmp_path / "a", 'create_by_name("plus").head()') == []
    assert _norms(tmp_path / "b", 'create_by_name("plus").cuda().features') == []
