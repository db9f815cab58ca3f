"""paratrain check follows a script's model into the other files of its project: a training function that
wraps it in DDP and saves the wrapper's state_dict, a model class of BatchNorm layers put into DDP.

Each project is written for the test in tmp_path (two or three files).
"""

from __future__ import annotations

from pathlib import Path

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_project_imports import project, script_text


def findings(script: Path, rule: str) -> list[tuple[int, str]]:
    return [(f.line, f.problem) for f in check_file(script) if f.rule == rule]


TRAIN = """\
    import torch
    import torch.distributed as dist

    def do_train(cfg, model, loader, local_rank):
        if cfg.DIST_TRAIN:
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        for epoch in range(3):
            with open("log.txt", "a") as log:  # a `with` binding on the way
                log.write(str(epoch))
            if cfg.DIST_TRAIN:
                if dist.get_rank() == 0:
                    torch.save(model.state_dict(), f"model_{epoch}.pth")
    """


def test_a_training_function_of_another_file_that_wraps_in_ddp_and_saves_the_wrapper(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from processor import do_train
            dist.init_process_group("nccl")
            model = torch.nn.Linear(2, 2)
            do_train(cfg, model, loader, 0)
            """),
        "processor.py": TRAIN,
    })
    [(line, problem)] = findings(script, "wrapped-state-dict")
    assert line == 6 and "processor.py:12" in problem


def test_the_same_function_saving_the_unwrapped_module_is_quiet(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from processor import do_train
            dist.init_process_group("nccl")
            do_train(cfg, model, loader, 0)
            """),
        "processor.py": TRAIN.replace("model.state_dict()", "model.module.state_dict()"),
    })
    assert findings(script, "wrapped-state-dict") == []


MODEL = """\
    import torch.nn as nn

    def conv_bn(channels):
        result = nn.Sequential()
        result.add_module("bn", nn.BatchNorm2d(channels))
        return result

    class Block(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.body = conv_bn(channels)

    def create_plus(deploy=False):
        return Block(64)

    func_dict = {"plus": create_plus}

    def create_by_name(name, deploy=False):
        return func_dict[name](deploy=deploy)
    """


def test_a_model_of_batchnorm_blocks_built_in_another_file_and_wrapped_in_ddp(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from models import create_by_name
            from processor import do_train
            dist.init_process_group("nccl")
            model = create_by_name("plus")
            do_train(cfg, model, loader, 0)
            """),
        "models.py": MODEL,
        "processor.py": TRAIN,
    })
    [(line, problem)] = findings(script, "batchnorm-without-syncbn")
    assert line == 6 and "models.py:5" in problem


def test_syncbn_in_the_project_or_dataparallel_only_keeps_it_quiet(tmp_path):
    converted = project(tmp_path / "a", {
        "train.py": script_text("""\
            from models import create_by_name
            from utils import prepare
            dist.init_process_group("nccl")
            model = prepare(create_by_name("plus"))
            model = torch.nn.parallel.DistributedDataParallel(model)
            """),
        "models.py": MODEL,
        "utils.py": "import torch\n\ndef prepare(m):\n    return torch.nn.SyncBatchNorm.convert_sync_batchnorm(m)\n",
    })
    threads = project(tmp_path / "b", {
        "train.py": script_text("""\
            from models import create_by_name
            model = create_by_name("plus")
            model = torch.nn.DataParallel(model)
            """),
        "models.py": MODEL,
    })
    assert findings(converted, "batchnorm-without-syncbn") == findings(threads, "batchnorm-without-syncbn") == []


def test_an_aliased_batchnorm_import_in_the_script_counts(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from torch.nn import BatchNorm1d as BatchNorm
            from torch.nn.parallel import DistributedDataParallel

            class GIN(torch.nn.Module):
                def __init__(self, hidden):
                    super().__init__()
                    self.norm = BatchNorm(hidden)

            dist.init_process_group("nccl")
            model = DistributedDataParallel(GIN(8))
            """),
    })
    assert [line for line, _ in findings(script, "batchnorm-without-syncbn")] == [9]


LOADERS = """\
    import torch
    from torch.utils.data import DataLoader

    def build_dataloaders(args, train, valid):
        train_sampler = torch.utils.data.distributed.DistributedSampler(train) if args.distributed else None
        valid_sampler = torch.utils.data.distributed.DistributedSampler(valid) if args.distributed else None
        train_loader = DataLoader(train, sampler=train_sampler, batch_size=8)
        valid_loader = DataLoader(valid, sampler=valid_sampler, batch_size=8)
        return train_loader, valid_loader, train_sampler, valid_sampler

    def build_dist_loaders(args, train, valid):
        return build_dataloaders(args, train, valid)
    """


def test_an_eval_loader_with_a_padding_sampler_from_a_builder_chosen_by_a_flag(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from inputter import build_dataloaders, build_dist_loaders
            dist.init_process_group("nccl")
            loader_class = build_dist_loaders if not args.data_path else build_dataloaders
            train_loader, val_loader, train_sampler, valid_sampler = loader_class(args, train, valid)
            """),
        "inputter.py": LOADERS,
    })
    found = findings(script, "padded-eval-sampler")
    assert [line for line, _ in found] == [6] and "val_loader" in found[0][1]


def test_a_builder_choice_with_one_builder_of_unknown_loaders_is_quiet(tmp_path):
    script = project(tmp_path, {
        "train.py": script_text("""\
            from inputter import build_dataloaders, other_loaders
            dist.init_process_group("nccl")
            loader_class = other_loaders if not args.data_path else build_dataloaders
            train_loader, val_loader, train_sampler, valid_sampler = loader_class(args, train, valid)
            """),
        "inputter.py": LOADERS + "\ndef other_loaders(args, train, valid):\n    return make_them(args)\n",
    })
    assert findings(script, "padded-eval-sampler") == []
