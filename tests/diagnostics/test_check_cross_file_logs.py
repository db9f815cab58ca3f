"""paratrain check follows a script's calls into its project to the logging lines they run on every rank.

A project module that runs ``logging.basicConfig(level=DEBUG)`` to stdout when imported (glow-tts's and RVC's
``utils.py``) makes every process that imports it log INFO lines of loggers reaching the root logger; a
project helper that gives its logger a console handler made at import (OpenRLHF's ``init_logger``) does the
same without the root logger. The call is reported at the script's line; a rank test on the way, a level set
by rank, a module started by a launcher the reading does not see, keep it quiet.
Each project is written for the test in tmp_path.
"""

from __future__ import annotations

from pathlib import Path

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_project_imports import project

SCRIPT = """\
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import utils


    def run(rank, world_size):
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        model = utils.load_checkpoint("G_0.pth")


    if __name__ == "__main__":
        mp.spawn(run, nprocs=2, args=(2,))
    """
UTILS = """\
    import logging
    import sys

    logging.basicConfig(stream=sys.stdout, level=logging.{level})
    logger = logging


    def load_checkpoint(path):
        model = {{}}
        logger.info("Loaded checkpoint '{{}}'".format(path))
        return model
    """


def _logs(script: Path) -> list[int]:
    return [f.line for f in check_file(script) if f.rule == "log-on-every-rank"]


def test_a_call_that_logs_through_a_root_logger_set_verbose_at_import_is_reported(tmp_path):
    script = project(tmp_path, {"train.py": SCRIPT, "utils.py": UTILS.format(level="DEBUG")})
    assert _logs(script) == [8]
    [finding] = [f for f in check_file(script) if f.rule == "log-on-every-rank"]
    assert "utils.py:10" in finding.problem


def test_a_quiet_level_a_guarded_call_or_a_module_without_main_is_quiet(tmp_path):
    warning = project(tmp_path / "a", {"train.py": SCRIPT, "utils.py": UTILS.format(level="WARNING")})
    guarded = SCRIPT.replace('        model = utils', '        if rank == 0:\n            model = utils')
    launched = SCRIPT.split("\n\n\n    if __name__")[0] + "\n"  # a module a launcher imports
    by_rank = SCRIPT.replace(
        "dist.init_process_group(", "logging.getLogger().setLevel(logging.INFO if rank == 0 else logging.WARNING)\n"
        "        dist.init_process_group(").replace("import utils\n", "import logging\n    import utils\n")
    for name, text in (("b", guarded), ("c", launched), ("d", by_rank)):
        script = project(tmp_path / name, {"train.py": text, "utils.py": UTILS.format(level="DEBUG")})
        assert _logs(script) == [], name
    assert _logs(warning) == []


HELPER = """\
    import logging
    import sys

    _root_logger = logging.getLogger("pkg")
    _default_handler = None


    def _setup_logger():
        global _default_handler
        if _default_handler is None:
            _default_handler = logging.StreamHandler(sys.stdout)
            _default_handler.setLevel(logging.INFO)
            _root_logger.addHandler(_default_handler)


    _setup_logger()


    def init_logger(name):
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG)
        logger.addHandler(_default_handler)
        logger.propagate = False
        return logger
    """
MODEL = """\
    from logging_utils import init_logger

    logger = init_logger(__name__)


    def get_llm(path, value_head_prefix="score"):
        logger.info(f"set value_head_prefix to `{value_head_prefix}`")
        return path
    """


def test_a_logger_made_by_a_project_helper_with_its_own_console_handler_is_reported(tmp_path):
    script = project(tmp_path, {
        "train.py": """\
            import deepspeed
            import torch.distributed as dist
            from model import get_llm

            def train():
                deepspeed.init_distributed()
                model = get_llm("llama")

            if __name__ == "__main__":
                train()
            """,
        "model.py": MODEL,
        "logging_utils.py": HELPER,
    })
    assert _logs(script) == [7]
    chosen = HELPER.replace("logger.setLevel(logging.DEBUG)",
                            "logger.setLevel(logging.DEBUG if dist.get_rank() == 0 else logging.ERROR)")
    script = project(tmp_path / "by_rank", {
        "train.py": (tmp_path / "train.py").read_text(), "model.py": MODEL, "logging_utils.py": chosen})
    assert _logs(script) == []
