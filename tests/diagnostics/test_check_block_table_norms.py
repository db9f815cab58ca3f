"""A model built from a module-level block table (YOLOP's ``MCnet(block_cfg)`` with rows ``[from, Conv, args]``)
holds the layers of every class the table names, when the class's ``__init__`` builds what it iterates
(``for f, block, args in rows: block(*args)``). A class that only keeps the table builds nothing of it.
"""

from __future__ import annotations

from pathlib import Path

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_project_imports import project, script_text

COMMON = """\
    import torch.nn as nn

    class Conv(nn.Module):
        def __init__(self, c1, c2):
            super().__init__()
            self.conv = nn.Conv2d(c1, c2, 3)
            self.bn = nn.BatchNorm2d(c2)
    """
MODELS = """\
    import torch.nn as nn
    from common import Conv

    BLOCKS = [
        [-1, Conv, [3, 32]],
        [-1, Conv, [32, 64]],
    ]

    class Net(nn.Module):
        def __init__(self, block_cfg):
            super().__init__()
            layers = []
            for from_, block, args in block_cfg:
                {body}
            self.model = nn.Sequential(*layers)

    def get_net(cfg):
        block_cfg = BLOCKS
        return Net(block_cfg)
    """


def _norms(root: Path, body: str) -> list[tuple[int, str]]:
    script = project(root, {
        "train.py": script_text("""\
            from models import get_net
            dist.init_process_group("nccl")
            model = get_net(cfg)
            model = torch.nn.parallel.DistributedDataParallel(model)
            """),
        "models.py": MODELS.replace("{body}", body),
        "common.py": COMMON,
    })
    return [(f.line, f.problem) for f in check_file(script) if f.rule == "batchnorm-without-syncbn"]


def test_a_model_built_from_a_block_table_of_batchnorm_classes(tmp_path):
    [(line, problem)] = _norms(tmp_path, "layers.append(block(*args))")
    assert line == 5 and "common.py:7" in problem and "(also lines 6)" in problem


def test_a_class_that_keeps_the_table_without_building_it_says_nothing(tmp_path):
    assert _norms(tmp_path, "layers.append((from_, block, args))") == []
