"""paratrain check reads the functions a script imports from its own project, in their files.

Each project here is written for the test, in tmp_path: a script and the module it imports, for each fact
the rules take from another file (a rank test, a sampler maker, a logger helper, a saver, a wrapper maker,
builtins.print replaced, --local_rank read), and the bounds of the reading (a broken, unreadable or huge
module, an import cycle, modules outside the project).
"""

from __future__ import annotations

import ast
import os
import textwrap
from pathlib import Path

from paratrain.diagnostics.check import check_file, check_source
from paratrain.diagnostics.project_imports import MAX_BYTES, ProjectImports

HEADER = "import torch\nimport torch.distributed as dist\n"


def project(root: Path, files: dict[str, str]) -> Path:
    """Write the files (the first one is the script) under ``root``, marked as a project, and return the script."""
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / next(iter(files))


def git_project(root: Path, files: dict[str, str]) -> Path:
    """Write the files under ``root``, marked as a checkout (``.git``), and return its ``train.py``."""
    (root / ".git").mkdir()
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / "train.py"


def script_text(body: str) -> str:
    """A script's text: the torch imports, then ``body``."""
    return HEADER + textwrap.dedent(body)


def rules(script: Path) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in check_file(script)]


def test_a_rank_test_helper_of_another_file_guards_like_one_of_the_script(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from helpers import first_worker, node_leader
            dist.init_process_group("gloo")
            state = {"step": 1}
            if first_worker():
                torch.save(state, "last.pt")
            if node_leader(args):
                torch.save(state, "node.pt")
            """),
        "helpers.py": """\
            import torch.distributed as dist

            def first_worker():
                return dist.get_rank() == 0

            def node_leader(args):
                return args.rank % args.gpus_per_node == 0
            """,
    })
    findings = check_file(script)
    assert [(f.line, f.rule) for f in findings] == [(9, "save-on-every-rank")]
    assert "once per machine" in findings[0].problem


def test_a_sampler_made_in_another_file_is_read_as_the_script_s_own(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from torch.utils.data import DataLoader
            import data.samplers as smp
            dist.init_process_group("gloo")
            sampler = smp.make_sampler(train_set, shuffle=True)
            loader = DataLoader(train_set, sampler=sampler)
            val_loader = DataLoader(val_set, sampler=smp.make_sampler(val_set, shuffle=False))
            for epoch in range(10):
                for batch in loader:
                    pass
            """),
        "data/__init__.py": "",
        "data/samplers.py": """\
            from torch.utils.data.distributed import DistributedSampler

            def make_sampler(dataset, shuffle):
                return DistributedSampler(dataset, shuffle=shuffle)
            """,
    })
    assert rules(script) == [(6, "no-set-epoch"), (8, "padded-eval-sampler")]


def test_a_logger_helper_is_read_for_its_level_and_console_handler(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from tools.log import get_logger
            logger = get_logger("train")
            dist.init_process_group("gloo")
            logger.info("starting")
            """),
        "tools/log.py": """\
            import logging

            def get_logger(name, level=logging.INFO):
                logger = logging.getLogger(name)
                logger.setLevel(level)
                logger.addHandler(logging.StreamHandler())
                return logger
            """,
    })
    assert rules(script) == [(6, "log-on-every-rank")]
    by_rank = """\
        import logging

        def get_logger(name, rank=0):
            logger = logging.getLogger(name)
            logger.setLevel(logging.INFO)
            if rank == 0:
                logger.addHandler(logging.StreamHandler())
            return logger
        """
    (tmp_path / "tools/log.py").write_text(textwrap.dedent(by_rank))
    assert rules(script) == []


def test_a_save_helper_of_another_file_is_reported_where_the_script_calls_it(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from ckpt import save_checkpoint, save_on_main, save_rank_file, copy_in_memory
            dist.init_process_group("gloo")
            state = {"step": 1}
            save_checkpoint(state, "last.pt")
            save_on_main(state, "main.pt")
            if dist.get_rank() == 0:
                save_checkpoint(state, "best.pt")
            save_rank_file(state, "shard", str(dist.get_rank()))
            copy_in_memory(state)
            """),
        "ckpt.py": """\
            import io
            import torch
            import torch.distributed as dist

            def save_checkpoint(state, path):
                torch.save(state, path)

            def save_on_main(state, path):
                if dist.get_rank() == 0:
                    torch.save(state, path)

            def save_rank_file(state, prefix, rank_str):
                path = f"{prefix}.rank_{rank_str}.pt"
                torch.save(state, path)

            def copy_in_memory(state):
                buffer = io.BytesIO()
                torch.save(state, buffer)
                return buffer
            """,
    })
    findings = check_file(script)
    assert [(f.line, f.rule) for f in findings] == [(6, "save-on-every-rank")]
    assert "save_checkpoint" in findings[0].problem
    assert check_source(script.read_text()) == []  # without the path: the script alone, as before


def test_a_wrapper_made_in_another_file_saves_prefixed_keys(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from models import wrap
            dist.init_process_group("gloo")
            model = wrap(torch.nn.Linear(2, 2), 0)
            if dist.get_rank() == 0:
                torch.save(model.state_dict(), "model.pt")
            """),
        "models.py": """\
            from torch.nn.parallel import DistributedDataParallel

            def wrap(module, local_rank):
                if local_rank >= 0:
                    module = DistributedDataParallel(module, device_ids=[local_rank])
                return module
            """,
    })
    assert rules(script) == [(7, "wrapped-state-dict")]


def test_print_replaced_by_a_called_function_of_another_file_quiets_the_print_rule(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from launch_utils import start
            start(args)
            dist.barrier()
            print("epoch done")
            """),
        "launch_utils.py": """\
            import builtins
            import torch.distributed as dist

            def start(args):
                dist.init_process_group("gloo")
                _quiet(dist.get_rank() == 0)

            def _quiet(is_main):
                plain = builtins.print
                def print_on_main(*args, **kwargs):
                    if is_main:
                        plain(*args, **kwargs)
                builtins.print = print_on_main
            """,
    })
    assert rules(script) == []
    (tmp_path / "launch_utils.py").write_text("import torch.distributed as dist\n\ndef start(args):\n"
                                              "    dist.init_process_group('gloo')\n")
    assert rules(script) == [(6, "print-on-every-rank")]  # the same start, without the replacement


def test_local_rank_read_in_another_file_decides_the_flag(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            import argparse
            from slurm import init_distributed
            parser = argparse.ArgumentParser()
            parser.add_argument("--local_rank", type=int, default=-1)
            params = parser.parse_args()
            init_distributed(params)
            """),
        "slurm.py": """\
            import torch
            import torch.distributed as dist

            def init_distributed(params):
                if params.local_rank != -1:
                    torch.cuda.set_device(params.local_rank)
                    dist.init_process_group("nccl")
            """,
    })
    assert rules(script) == [(6, "local-rank-argument")]
    (tmp_path / "slurm.py").write_text(textwrap.dedent("""\
        import os

        def init_distributed(params):
            params.gpu = int(os.environ["LOCAL_RANK"])
        """))
    script.write_text(script.read_text() + "if params.local_rank == 0:\n    pass\ndist.init_process_group('nccl')\n")
    assert rules(script) == []  # the device comes from LOCAL_RANK there: the flag's default changes nothing


def test_a_directory_the_script_puts_on_sys_path_is_searched(tmp_path):
    script = project(tmp_path, {
        "tools/train.py": script_text("""\
            import _init_paths
            from utils.ckpt import save_checkpoint
            dist.init_process_group("gloo")
            save_checkpoint({}, "last.pt")
            """),
        "tools/_init_paths.py": """\
            import os.path as osp
            import sys

            def add_path(path):
                if path not in sys.path:
                    sys.path.insert(0, path)

            this_dir = osp.dirname(__file__)
            add_path(osp.join(this_dir, "..", "lib"))
            """,
        "lib/utils/__init__.py": "",
        "lib/utils/ckpt.py": "import torch\n\ndef save_checkpoint(state, path):\n    torch.save(state, path)\n",
    })
    assert rules(script) == [(6, "save-on-every-rank")]


SAVER_SCRIPT = HEADER + """\
from ckpt import save_checkpoint
dist.init_process_group("gloo")
save_checkpoint({}, "last.pt")
"""


def test_a_broken_unreadable_or_huge_module_is_skipped(tmp_path):
    script = project(tmp_path, {"train.py": SAVER_SCRIPT, "ckpt.py": "def save_checkpoint(state, path:\n"})
    assert rules(script) == []
    (tmp_path / "ckpt.py").write_bytes(b"import torch\n\x00\xff\xfe def save_checkpoint(")
    assert rules(script) == []
    (tmp_path / "ckpt.py").unlink()
    os.mkfifo(tmp_path / "ckpt.py")  # never opened: a reader would wait for a writer
    assert rules(script) == []
    (tmp_path / "ckpt.py").unlink()
    saver = "import torch\n\ndef save_checkpoint(state, path):\n    torch.save(state, path)\n"
    (tmp_path / "ckpt.py").write_text(saver + "#" * MAX_BYTES + "\n")
    assert rules(script) == []  # too large to read: what it does is unknown
    (tmp_path / "ckpt.py").write_text(saver)
    assert rules(script) == [(5, "save-on-every-rank")]


def test_an_import_cycle_ends(tmp_path):
    script = project(tmp_path, {
        "train.py": SAVER_SCRIPT,
        "ckpt.py": "from io_utils import save_checkpoint\n",
        "io_utils.py": "from ckpt import save_checkpoint\n",
    })
    assert rules(script) == []
    imports = ProjectImports(script, ast.parse(script.read_text()))
    assert imports.function("save_checkpoint") is None


def test_modules_outside_the_project_are_not_read(tmp_path):
    outside = "import torch\n\ndef save_checkpoint(state, path):\n    torch.save(state, path)\n"
    (tmp_path / "ckpt.py").write_text(outside)  # above the project's root: an installed package's place
    root = tmp_path / "proj"
    script = project(root, {"scripts/train.py": SAVER_SCRIPT.replace("from ckpt", "import logging\nfrom ckpt")})
    (root / "logging.py").write_text(outside)  # named like the standard library, at the root
    assert rules(script) == []
    imports = ProjectImports(script, ast.parse(script.read_text()))
    assert imports.function("save_checkpoint") is None
    assert imports.function("logging.save_checkpoint") is None
    assert imports.modules() == []
