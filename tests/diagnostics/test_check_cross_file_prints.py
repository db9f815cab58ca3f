"""paratrain check follows a script's calls into the other files of its project to the prints they run.

Each project is written for the test in tmp_path (two or three files): a print one, two or three calls deep
(a function, a class built and the class its ``__init__`` builds, a classmethod), reported at the script's
call with the file and line of the print; and what keeps it quiet (a rank test in the script or on the way,
a rank flag passed down, a decorated function).
"""

from __future__ import annotations

from pathlib import Path

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_project_imports import project, script_text


def prints(script: Path) -> list[tuple[int, str]]:
    return [(f.line, f.problem) for f in check_file(script) if f.rule == "print-on-every-rank"]


def test_a_print_three_calls_deep_is_reported_at_the_call_of_the_script(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from data.loaders import create_dataloader
            dist.init_process_group("nccl")
            loader = create_dataloader("train")
            """),
        "data/__init__.py": "",
        "data/loaders.py": """\
            from data.reader import SimpleImageDataset

            def create_dataloader(split):
                dataset = SimpleImageDataset(split)
                return dataset
            """,
        "data/reader.py": """\
            class ImageTransform:
                def __init__(self, size):
                    self.size = size
                    print("self.train_transform", size)

            class SimpleImageDataset:
                def __init__(self, split):
                    self.transform = ImageTransform(256)
            """,
    })
    [(line, problem)] = prints(script)
    assert line == 5 and "data/reader.py:4" in problem and "create_dataloader" in problem


def test_a_classmethod_and_a_package_reexport_are_followed_one_finding_per_printing_file(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from models import UNet
            from datasets import make_dataloader
            dist.init_process_group("nccl")
            loader = make_dataloader(cfg)
            unet = UNet.from_pretrained_2d("path")
            other = UNet.from_pretrained_2d("other")
            """),
        # `from .make_dataloader import make_dataloader`: the package's function, not its submodule
        "datasets/__init__.py": "from .make_dataloader import make_dataloader\n",
        "datasets/make_dataloader.py": """\
            def make_dataloader(cfg):
                if cfg.DIST_TRAIN:
                    print("DIST_TRAIN START")
                return []
            """,
        "models.py": """\
            class UNet:
                @classmethod
                def from_pretrained_2d(cls, path):
                    print(f"loaded 3D unet's pretrained weights from {path} ...")
                    return cls()
            """,
    })
    found = prints(script)
    assert [line for line, _ in found] == [6, 7]
    assert "datasets/make_dataloader.py:3" in found[0][1]
    assert "models.py:4" in found[1][1] and "also lines 8" in found[1][1]


def test_a_rank_test_in_the_script_or_on_the_way_keeps_it_quiet(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from utils import load_checkpoint, build_optimizer, banner, Logged, download
            dist.init_process_group("nccl")
            if dist.get_rank() == 0:
                load_checkpoint("last.pt")
            build_optimizer(cfg)
            banner()
            Logged()
            download("https://example.com/data", "data.bin")
            """),
        "utils.py": """\
            import os
            import torch.distributed as dist

            def download(url, path):
                with FileLock(path + ".lock"):
                    if os.path.exists(path):
                        return path  # another rank downloaded it first
                    print(f"Downloading {url}...")

            def rank_zero_only(fn):
                return fn

            def load_checkpoint(path):
                print("loading", path)

            def set_weight_decay(params, echo=False):
                if echo:
                    print("no decay:", params)

            def build_optimizer(config):
                echo = config.LOCAL_RANK == 0
                set_weight_decay([], echo=echo)
                if dist.get_rank() != 0:
                    return None
                print("optimizer built")

            @rank_zero_only
            def banner():
                print("====")

            class Logged:
                def __init__(self):
                    try:
                        self.x = 1
                    except Exception as exc:
                        print("failed", exc)
                    print(f"rank {dist.get_rank()} ready")
            """,
    })
    assert prints(script) == []


def test_a_single_process_script_is_not_told_about_its_projects_prints(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from utils import load_checkpoint
            load_checkpoint("last.pt")
            """),
        "utils.py": """\
            def load_checkpoint(path):
                print("loading", path)
            """,
    })
    assert prints(script) == []


def test_a_print_after_a_deit_style_init_distributed_mode_on_the_way_is_quieted(tmp_path):
    """dust3r's ``train(args)`` calls croco's ``misc.init_distributed_mode(args)`` (a submodule not checked out),
    which replaces print on the other ranks: the prints after it are quieted, those before it are not."""
    training = """\
        import torch.distributed as dist
        import croco.utils.misc as misc


        def train(args):
            {before}
            misc.init_distributed_mode(args)
            print("output_dir: " + args.output_dir)
        """
    files = {"train.py": script_text("""\
                from training import train
                dist.init_process_group("nccl")
                train(None)
                """)}
    quiet = project(tmp_path / "quiet", {**files, "training.py": training.format(before="pass")})
    assert prints(quiet) == []
    loud = project(tmp_path / "loud", {**files, "training.py": training.format(before='print("starting")')})
    [(line, problem)] = prints(loud)
    assert "training.py:6" in problem
