"""paratrain check reads who sets up a script's logging before judging its ``logger.info`` lines.

Readings, each with its quiet counterpart:

* a method named for logging that only returns early off the main process (a metrics logger's ``log``) sets up
  no logger: the root logger made verbose by a project helper still logs the script's lines on every rank;
* a logger helper called only in the parent that starts the workers with ``mp.spawn`` sets up the parent's
  logging, not the workers': the workers' own console setup decides;
* ``from diffusers.utils import logging; logger = logging.get_logger(__name__)`` in a project module is a plain
  logger under the project's name, heard through a root logger set to INFO in every process;
* a project function named like a logger helper that calls nothing of logging (a Lightning logger's config maker)
  does not hide a console logger a project helper set up on every rank; but a module that is no entry point (no
  main block, its work in functions only) or one that a launcher of the project imports after setting the root's level by rank
  leaves its helper's setup unproven.

Each project is written for the test in tmp_path.
"""

from __future__ import annotations

from pathlib import Path

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_project_imports import project


def _logs(script: Path) -> list[int]:
    return [f.line for f in check_file(script) if f.rule == "log-on-every-rank"]


ROOT_HELPER = """\
    import logging
    import sys


    def set_logger(level=logging.INFO):
        root = logging.getLogger()
        root.setLevel(level)
        root.addHandler(logging.StreamHandler(sys.stdout))
    """
METRICS = """\
    class MetricsLogger:
        def __init__(self, is_master):
            self.is_master = is_master

        def log(self, metrics, step):
            if not self.is_master:
                return{value}
            print(step, metrics)
    """
TORCHRUN_SCRIPT = """\
    import logging
    import torch.distributed as dist
    from log_utils import set_logger
    from metrics import MetricsLogger

    logger = logging.getLogger("train")


    def train():
        set_logger(logging.INFO)
        dist.init_process_group("gloo")
        metrics = MetricsLogger(dist.get_rank() == 0)
        logger.info("Going to train")
        metrics.log({"loss": 1.0}, step=0)


    if __name__ == "__main__":
        train()
    """


def test_a_metrics_log_method_that_skips_other_ranks_does_not_hide_a_verbose_root_logger(tmp_path):
    files = {"train.py": TORCHRUN_SCRIPT, "log_utils.py": ROOT_HELPER}
    script = project(tmp_path / "bare", {**files, "metrics.py": METRICS.format(value="")})
    assert _logs(script) == [13]
    # returning another object by rank is a choice of logger this reading does not follow
    script = project(tmp_path / "valued", {**files, "metrics.py": METRICS.format(value=" None")})
    assert _logs(script) == []


SPAWN_SCRIPT = """\
    import logging
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from utils import create_logger, setup_logger


    def main():
        logger, out_dir = create_logger("cfg.yaml")
        logger.info("starting")
        mp.spawn(worker, nprocs=2, args=(2,))


    def worker(rank, world_size):
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        logger, _ = setup_logger("out", rank)
        logger.info("dataset ready")


    if __name__ == "__main__":
        main()
    """
SPAWN_UTILS = """\
    import logging


    def setup_logger(out_dir, rank):
        log_file = f"{out_dir}/train_rank{rank}.log"
        logging.basicConfig(filename=log_file)
        logger = logging.getLogger()
        logger.setLevel(logging.INFO)
        logging.getLogger("").addHandler(logging.StreamHandler())
        return logger, out_dir


    def create_logger(cfg):
        logger = logging.getLogger()
        logger.setLevel(logging.INFO)
        return logger, cfg
    """


def test_a_logger_helper_of_the_launching_parent_leaves_the_workers_setup_to_decide(tmp_path):
    script = project(tmp_path / "parent", {"train.py": SPAWN_SCRIPT, "utils.py": SPAWN_UTILS})
    assert _logs(script) == [16]
    # the same helper called in the worker too may choose its handlers there: unknown, so quiet
    in_worker = SPAWN_SCRIPT.replace('        logger, _ = setup_logger("out", rank)\n',
                                     '        logger, _ = setup_logger("out", rank)\n        create_logger("cfg.yaml")\n')
    script = project(tmp_path / "worker", {"train.py": in_worker, "utils.py": SPAWN_UTILS})
    assert _logs(script) == []


LIBRARY_MODEL = """\
    from diffusers.utils import logging

    logger = logging.get_logger(__name__)


    class UNet3D:
        @classmethod
        def from_pretrained_2d(cls, path):
            logger.info(f"loaded temporal unet's pretrained weights from {path} ...")
            return cls()
    """
ACCELERATE_SCRIPT = """\
    import logging
    from accelerate import Accelerator
    from src.models.unet_3d import UNet3D


    def main():
        accelerator = Accelerator()
        logging.basicConfig(format="%(message)s", level=logging.INFO)
        unet = UNet3D.from_pretrained_2d("base")
        accelerator.print("built")


    if __name__ == "__main__":
        main()
    """


def test_a_library_get_logger_of_a_project_module_logs_through_the_root_logger(tmp_path):
    files = {"train.py": ACCELERATE_SCRIPT, "src/__init__.py": "", "src/models/__init__.py": ""}
    script = project(tmp_path / "project", {**files, "src/models/unet_3d.py": LIBRARY_MODEL})
    [finding] = [f for f in check_file(script) if f.rule == "log-on-every-rank"]
    assert finding.line == 9 and "src/models/unet_3d.py:9" in finding.problem
    # accelerate's get_logger logs on the main process only
    accelerate = LIBRARY_MODEL.replace("from diffusers.utils import logging", "from accelerate import logging")
    script = project(tmp_path / "accelerate", {**files, "src/models/unet_3d.py": accelerate})
    assert _logs(script) == []
    # a copy of the library inside the project: its module names may be in the library's quietened hierarchy
    vendored = {"train.py": ACCELERATE_SCRIPT.replace("src.models.unet_3d", "diffusers.models.unet_3d"),
                "diffusers/__init__.py": "", "diffusers/models/__init__.py": "",
                "diffusers/models/unet_3d.py": LIBRARY_MODEL}
    script = project(tmp_path / "vendored", vendored)
    assert _logs(script) == []


PER_RANK_LOGGER = """\
    import logging


    def set_logger(logfile, name="mainlogger"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        logger.addHandler(logging.FileHandler(logfile))
        logger.addHandler(logging.StreamHandler())
        return logger


    def get_trainer_logger(config, logdir):
        return {"target": "pytorch_lightning.loggers.TensorBoardLogger", "params": {"save_dir": logdir}}
    """
LIGHTNING_SCRIPT = """\
    import pytorch_lightning as pl
    from utils_train import get_trainer_logger, set_logger

    if __name__ == "__main__":
        logger = set_logger("log.txt")
        logger.info("configuring the model")
        trainer = pl.Trainer(devices=8, strategy="ddp", logger=get_trainer_logger({}, "logs"))
    """


def test_a_helper_named_for_loggers_that_calls_nothing_of_logging_hides_nothing(tmp_path):
    script = project(tmp_path, {"main/trainer.py": LIGHTNING_SCRIPT, "main/utils_train.py": PER_RANK_LOGGER})
    assert _logs(script) == [6]


ROOT_INFO_HELPER = """\
    import logging
    import sys


    def get_logger(name=None):
        logging.basicConfig(stream=sys.stdout, level=logging.INFO)
        return logging.getLogger(name)
    """
TRAINING_MODULE = """\
    import torch.distributed as dist
    from src.log_utils import get_logger

    logger = get_logger(__name__)


    def main(args):
        dist.init_process_group("nccl")
        logger.info("iterations per epoch: 10")
    {main_block}"""
LAUNCHER = """\
    import logging
    import torch.multiprocessing as mp
    from src.msn_train import main as msn


    def process_main(rank, args):
        logging.basicConfig()
        logger = logging.getLogger()
        if rank == 0:
            logger.setLevel(logging.INFO)
        else:
            logger.setLevel(logging.ERROR)
        msn(args)


    if __name__ == "__main__":
        mp.spawn(process_main, nprocs=2, args=({},))
    """


def test_a_training_module_run_by_a_launcher_that_sets_levels_by_rank_is_not_judged_on_its_helper(tmp_path):
    run_directly = "\n\n    if __name__ == '__main__':\n        main({})\n"
    alone = project(tmp_path / "alone", {"src/msn_train.py": TRAINING_MODULE.format(main_block=run_directly),
                                         "src/log_utils.py": ROOT_INFO_HELPER})
    assert _logs(alone) == [9]  # run as a script, its helper makes the root verbose on every rank
    no_main = project(tmp_path / "no_main", {"src/msn_train.py": TRAINING_MODULE.format(main_block=""),
                                             "src/log_utils.py": ROOT_INFO_HELPER})
    assert _logs(no_main) == []
    launched = project(tmp_path / "launched", {"src/msn_train.py": TRAINING_MODULE.format(main_block=run_directly),
                                               "src/log_utils.py": ROOT_INFO_HELPER, "main.py": LAUNCHER})
    assert _logs(launched) == []


SCRIPT_SETS_ITS_OWN_LEVEL = """\
import logging
import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)
{own_level}


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    logging.basicConfig(format="%(message)s", level=logging.INFO if rank in [-1, 0] else logging.WARN)
    logger.warning("Process rank: %s", rank)
    logger.info("Training/evaluation parameters")
    torch.nn.Linear(2, 2)


if __name__ == "__main__":
    main()
"""


def test_a_logger_given_info_of_its_own_logs_on_every_rank_whatever_the_roots_level_by_rank(tmp_path):
    """basicConfig's level by rank is the root logger's, not its handler's: a logger set to INFO itself makes its
    records and hands them to the root's handler on every rank (MeZO's ``logger.setLevel(logging.INFO)``)."""
    from paratrain.diagnostics.check import check_source

    def found(own_level):
        return [(f.line, f.rule, f.problem.split("`")[1] if "`" in f.problem else "")
                for f in check_source(SCRIPT_SETS_ITS_OWN_LEVEL.format(own_level=own_level))]

    assert found("logger.setLevel(logging.INFO)") == [(14, "log-on-every-rank", "logger.setLevel(...)")]
    assert found("") == []  # the root's level by rank applies to it
    assert found("logger.setLevel(logging.WARNING)") == []
    assert found("logger.setLevel(logging.INFO)\nlogger.propagate = False") == []  # no handler of its own: silent


SELF_LEVELLED_MODULE = """\
    import logging

    logger = logging.getLogger(__name__)
    logger.setLevel(logging.INFO)


    def train(model):
        logger.info("***** Running training *****")
        return model
    """
LEVEL_BY_RANK_SCRIPT = """\
    import logging
    import torch
    import torch.distributed as dist
    from trainer import train

    if __name__ == "__main__":
        dist.init_process_group("nccl")
        logging.basicConfig(level=logging.INFO if dist.get_rank() == 0 else logging.WARN)
        train(torch.nn.Linear(2, 2))
    """


def test_a_project_logger_set_to_info_in_its_module_logs_on_every_rank_through_a_root_level_by_rank(tmp_path):
    script = project(tmp_path / "own-level", {"train.py": LEVEL_BY_RANK_SCRIPT, "trainer.py": SELF_LEVELLED_MODULE})
    [finding] = [f for f in check_file(script) if f.rule == "log-on-every-rank"]
    assert finding.line == 9 and "trainer.py:8" in finding.problem and "setLevel(INFO)" in finding.fix
    plain = SELF_LEVELLED_MODULE.replace("    logger.setLevel(logging.INFO)\n", "")
    script = project(tmp_path / "root-level", {"train.py": LEVEL_BY_RANK_SCRIPT, "trainer.py": plain})
    assert _logs(script) == []  # the root's level by rank applies to it
    quiet = LEVEL_BY_RANK_SCRIPT.replace("        logging.basicConfig", "        if dist.get_rank() == 0:\n"
                                         "            logging.basicConfig")
    script = project(tmp_path / "handler-on-rank-0", {"train.py": quiet, "trainer.py": SELF_LEVELLED_MODULE})
    assert _logs(script) == []  # a root handler on rank 0 only: the other ranks have nothing to write with


def test_a_function_of_the_script_named_like_a_logger_helper_is_read_not_trusted(tmp_path):
    # CLIP4Clip: `set_seed_logger(args)` of the script itself calls the project's every-rank `get_logger`
    script = project(tmp_path, {"train.py": """\
        import torch.distributed as dist
        from utils import get_logger

        logger = None


        def set_seed_logger(args):
            global logger
            logger = get_logger("train")


        def main():
            dist.init_process_group("nccl")
            set_seed_logger(None)
            logger.info("device ready")


        if __name__ == "__main__":
            main()
        """, "utils.py": ROOT_INFO_HELPER})
    assert _logs(script) == [15]
