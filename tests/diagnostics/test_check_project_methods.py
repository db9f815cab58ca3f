"""paratrain check follows what a script builds and calls from its project's other files: a parser-building
function's ``--local_rank``, a class whose methods or constructor wrap the model in DataParallel, a loader
builder's samplers.

Each project is written for the test, in tmp_path (a script and the modules it imports); each test also
checks the quiet twin, where the other file's code does not prove the pitfall.
"""

from __future__ import annotations

from pathlib import Path

from tests.diagnostics.test_check_project_imports import project, rules, script_text


def test_a_local_rank_flag_of_a_project_parser_is_reported_where_the_script_reads_it(tmp_path):
    parser = """\
        import argparse
        import os

        def get_args():
            parser = argparse.ArgumentParser()
            parser.add_argument('--config', type=str)
            parser.add_argument('--local_rank', type=int, default=0)
            args = parser.parse_args()
            if 'LOCAL_RANK' not in os.environ:
                os.environ['LOCAL_RANK'] = str(args.local_rank)
            return args
        """
    script = project(tmp_path / "flag", {
        "main.py": script_text("""\
            from utils import parser

            args = parser.get_args()
            dist.init_process_group("nccl")
            if args.local_rank == 0:
                print("writer")
            torch.cuda.set_device(args.local_rank)
            """),
        "utils/__init__.py": "",
        "utils/parser.py": parser,
    })
    assert (7, "local-rank-argument") in rules(script)
    # The same parser, where the script takes the device from the environment torchrun sets: quiet.
    quiet = project(tmp_path / "env", {
        "main.py": script_text("""\
            import os
            from utils import parser

            args = parser.get_args()
            dist.init_process_group("nccl")
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            """),
        "utils/__init__.py": "",
        "utils/parser.py": parser,
    })
    assert "local-rank-argument" not in {rule for _, rule in rules(quiet)}
    # A project helper that tries LOCAL_RANK among other variables, then writes it back: read, quiet.
    tried = project(tmp_path / "tried", {
        "main.py": script_text("""\
            from utils import parser, distributed

            args = parser.get_args()
            device = distributed.init_distributed_device(args)
            torch.cuda.set_device(args.local_rank)
            """),
        "utils/__init__.py": "",
        "utils/parser.py": parser,
        "utils/distributed.py": """\
            import os

            def world_info_from_env():
                local_rank = 0
                for v in ("LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"):
                    if v in os.environ:
                        local_rank = int(os.environ[v])
                        break
                return local_rank

            def init_distributed_device(args):
                args.local_rank = world_info_from_env()
                os.environ["LOCAL_RANK"] = str(args.local_rank)
                return f"cuda:{args.local_rank}"
            """,
    })
    assert "local-rank-argument" not in {rule for _, rule in rules(tried)}
    # A project helper that sets the option from another launcher's variable: which value is read is unknown.
    stored = project(tmp_path / "stored", {
        "main.py": script_text("""\
            from utils import parser, distributed

            args = parser.get_args()
            distributed.parse_gpu(args)
            torch.cuda.set_device(args.local_rank)
            """),
        "utils/__init__.py": "",
        "utils/parser.py": parser,
        "utils/distributed.py": """\
            import os

            def parse_gpu(args):
                if args.config == "k8s":
                    args.local_rank = int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
            """,
    })
    assert "local-rank-argument" not in {rule for _, rule in rules(stored)}


def _experiment_project(root: Path, build_model: str) -> Path:
    """A task switch binding ``Exp`` to a project class whose base's ``__init__`` keeps what the subclass's
    ``_build_model`` returns."""
    return project(root, {
        "run.py": script_text("""\
            import argparse
            args = argparse.Namespace(task="forecast", use_multi_gpu=True, device_ids=[0, 1])
            if args.task == "forecast":
                from exp.forecast import Exp_Forecast
                Exp = Exp_Forecast
            else:
                from exp.forecast import Exp_Forecast
                Exp = Exp_Forecast
            exp = Exp(args)
            exp.train()
            """),
        "exp/__init__.py": "",
        "exp/basic.py": """\
            import torch

            class Exp_Basic(object):
                def __init__(self, args):
                    self.args = args
                    self.model = self._build_model().to("cuda")

                def _build_model(self):
                    raise NotImplementedError
            """,
        "exp/forecast.py": f"""\
            import torch.nn as nn
            from exp.basic import Exp_Basic

            class Exp_Forecast(Exp_Basic):
                def __init__(self, args):
                    super(Exp_Forecast, self).__init__(args)

                def _build_model(self):
                    model = nn.Linear(4, 4)
                    {build_model}
                    return model

                def train(self):
                    pass
            """,
    })


def test_building_a_project_class_whose_constructor_wraps_the_model_in_data_parallel(tmp_path):
    wrapping = "if self.args.use_multi_gpu:\n                        model = nn.DataParallel(model, device_ids=self.args.device_ids)"
    assert (11, "data-parallel") in rules(_experiment_project(tmp_path / "dp", wrapping))
    assert "data-parallel" not in {rule for _, rule in rules(_experiment_project(tmp_path / "one", "model = model.float()"))}


def _model_project(root: Path, parallelize: str) -> Path:
    """A factory function returning an object of a class found at run time, built on the ``BaseModel`` its
    module imports, whose ``parallelize`` method the script calls."""
    return project(root, {
        "train.py": script_text("""\
            from models import create_model
            opt = {"gpu_ids": [0, 1]}
            model = create_model(opt)
            model.setup(opt)
            model.parallelize()
            """),
        "models/__init__.py": """\
            import importlib
            from models.base_model import BaseModel

            def create_model(opt):
                lib = importlib.import_module("models.cut_model")
                model = [c for c in vars(lib).values() if isinstance(c, type) and issubclass(c, BaseModel)][0]
                return model(opt)
            """,
        "models/base_model.py": f"""\
            import torch

            class BaseModel:
                def __init__(self, opt):
                    self.opt = opt
                    self.model_names = ["G"]

                def setup(self, opt):
                    pass

                def parallelize(self):
                    for name in self.model_names:
                        net = getattr(self, "net" + name)
                        {parallelize}
            """,
    })


def test_a_method_of_the_object_a_project_factory_returns_that_wraps_its_networks_in_data_parallel(tmp_path):
    wrapping = 'setattr(self, "net" + name, torch.nn.DataParallel(net, self.opt["gpu_ids"]))'
    assert (7, "data-parallel") in rules(_model_project(tmp_path / "dp", wrapping))
    moving = 'setattr(self, "net" + name, net.to(self.opt["gpu_ids"][0]))'
    assert "data-parallel" not in {rule for _, rule in rules(_model_project(tmp_path / "one", moving))}


def _loader_project(root: Path, eval_sampler: str) -> Path:
    """A builder of the project choosing its sampler by the ``is_train`` the script passes as a constant, and a
    second one handing back a tuple of loaders through a dispatching function."""
    return project(root, {
        "train.py": script_text("""\
            from dataset.build import build_dataloader, build_loader
            distributed = dist.is_initialized()
            train_loader = build_dataloader({}, True, distributed)
            valid_loader = build_dataloader({}, False, distributed)
            train_set, val_set, loader_train, loader_val = build_loader({}, pretrain=False)
            for epoch in range(10):
                train_loader.sampler.set_epoch(epoch)
                for batch in train_loader:
                    pass
            """),
        "dataset/__init__.py": "",
        "dataset/build.py": f"""\
            import torch
            from torch.utils.data import DataLoader, DistributedSampler, SequentialSampler
            from .finetune import build_loader_finetune

            def build_dataloader(cfg, is_train=True, distributed=False):
                dataset = list(range(10))
                if distributed:
                    if is_train:
                        sampler = DistributedSampler(dataset, shuffle=True)
                    else:
                        sampler = {eval_sampler}
                else:
                    sampler = None
                if cfg.get("timm") and is_train:
                    data_loader = make_timm_loader(dataset)
                else:
                    data_loader = torch.utils.data.DataLoader(dataset, batch_size=2, sampler=sampler)
                return data_loader

            def build_loader(cfg, pretrain):
                if pretrain:
                    return None
                else:
                    return build_loader_finetune(cfg)
            """,
        "dataset/finetune.py": f"""\
            from torch.utils.data import DataLoader, DistributedSampler, SequentialSampler

            def build_loader_finetune(cfg):
                train_set, val_set = list(range(10)), list(range(5))
                sampler_train = DistributedSampler(train_set, shuffle=True)
                sampler_val = {eval_sampler.replace("dataset", "val_set")}
                loader_train = DataLoader(train_set, sampler=sampler_train)
                loader_val = DataLoader(val_set, sampler=sampler_val)
                return train_set, val_set, loader_train, loader_val
            """,
    })


def test_an_evaluation_loader_a_project_builder_gives_a_distributed_sampler_pads_the_evaluation(tmp_path):
    found = rules(_loader_project(tmp_path / "padded", "DistributedSampler(dataset, shuffle=False)"))
    assert (6, "padded-eval-sampler") in found and (7, "padded-eval-sampler") in found
    assert {line for line, rule in found if rule == "padded-eval-sampler"} == {6, 7}  # not the training loaders
    quiet = rules(_loader_project(tmp_path / "whole", "SequentialSampler(dataset)"))
    assert "padded-eval-sampler" not in {rule for _, rule in quiet}


def _state_project(root: Path, save_body: str) -> Path:
    """The script saves through a method of an object a project function builds (``return TrainState(...)``)."""
    return project(root, {
        "train.py": script_text("""\
            import os
            import utils
            dist.init_process_group("nccl")
            local_rank = int(os.environ["LOCAL_RANK"])
            train_state = utils.initialize_train_state({"lr": 1})
            if local_rank == 0:
                train_state.save("ckpt")
            """),
        "utils.py": f"""\
            import os
            import torch
            import torch.distributed as dist

            class TrainState:
                def __init__(self, step):
                    self.step = step

                def save(self, path):
                    {save_body}

            def initialize_train_state(config):
                train_state = TrainState(step=0)
                return train_state
            """,
    })


def test_a_method_of_a_project_object_that_saves_with_no_rank_test_saves_where_the_script_calls_it(tmp_path):
    found = rules(_state_project(tmp_path / "machine", 'torch.save(self.step, os.path.join(path, "step.pth"))'))
    assert (9, "save-on-every-rank") in found
    guarded = 'torch.save(self.step, os.path.join(path, "step.pth")) if dist.get_rank() == 0 else None'
    assert "save-on-every-rank" not in {rule for _, rule in rules(_state_project(tmp_path / "first", guarded))}
    # an inner function that saves, called only under a rank test of the method
    inner = ("def write(step):\n                        torch.save(step, path)\n"
             "                    if self.main_process:\n                        write(self.step)")
    assert "save-on-every-rank" not in {rule for _, rule in rules(_state_project(tmp_path / "inner", inner))}


def test_a_loader_builder_with_the_projects_own_distributed_sampler_is_not_read_as_torchs(tmp_path):
    script = _loader_project(tmp_path / "own", "DistributedSampler(dataset, pad=False)")
    build = script.parent / "dataset" / "build.py"
    build.write_text(build.read_text().replace(
        "from torch.utils.data import DataLoader, DistributedSampler, SequentialSampler",
        "from torch.utils.data import DataLoader, SequentialSampler\nfrom dataset.samplers import DistributedSampler"))
    (script.parent / "dataset" / "samplers.py").write_text("class DistributedSampler:\n    pass\n")
    assert {line for line, rule in rules(script) if rule == "padded-eval-sampler"} == {7}  # the tuple's, torch's


def _metrics_project(root: Path, saving: str) -> Path:
    """The script hands its DataParallel model to a project function that puts a parameter's state dict in
    the checkpoint's dict."""
    return project(root, {
        "train.py": script_text("""\
            from utils.misc import eval_metrics
            dist.init_process_group("nccl")
            net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
            optim = torch.optim.SGD(net.parameters(), lr=0.1)
            eval_metrics(0.5, net, optim)
            """),
        "utils/__init__.py": "",
        "utils/misc.py": f"""\
            import torch
            import torch.distributed as dist

            def eval_metrics(iou, net, optim, distributed=True):
                if dist.get_rank() != 0:
                    return
                save_dict = {{"state_dict": {saving}, "optimizer": optim.state_dict()}}
                torch.save(save_dict, "best.pth")
            """,
    })


def test_a_project_function_saving_the_state_dict_of_the_wrapper_it_is_given(tmp_path):
    assert (7, "wrapped-state-dict") in rules(_metrics_project(tmp_path / "wrapped", "net.state_dict()"))
    unwrapping = "net.module.state_dict() if distributed else net.state_dict()"
    assert "wrapped-state-dict" not in {rule for _, rule in rules(_metrics_project(tmp_path / "inner", unwrapping))}
