"""A module's prints that a multi-process program of its project runs on every rank are reported where they are
written (``importer_prints``), and a module's self-test block does not make its imported functions dead code."""

from __future__ import annotations

from tests.diagnostics.test_check_project_imports import project, rules, script_text

TRAIN = """\
    from data.loaders import get_loader
    dist.init_process_group("nccl")
    loader = get_loader(args)
    """

LOADERS = """\
import torch

def get_loader(args):
    data = list(range(10))
    print("train len {}".format(len(data)))
    print("val len {}".format(len(data)))
    return torch.utils.data.DataLoader(data)
"""


def test_a_modules_print_run_by_a_multi_process_importer_is_every_ranks(tmp_path):
    train = project(tmp_path / "a", {"train.py": script_text(TRAIN), "data/loaders.py": LOADERS})
    module = train.parent / "data" / "loaders.py"
    found = rules(module)
    assert found == [(5, "print-on-every-rank")]
    from paratrain.diagnostics.check import check_file
    problem = check_file(module)[0].problem
    assert "train.py:5 calls into this module" in problem and problem.endswith("(also lines 6)")


def test_an_importer_that_calls_it_on_rank_0_or_runs_alone_leaves_it_alone(tmp_path):
    guarded = TRAIN.replace("    loader = get_loader(args)\n", "    if dist.get_rank() == 0:\n        loader = get_loader(args)\n")
    module = project(tmp_path / "b", {"train.py": script_text(guarded), "data/loaders.py": LOADERS}).parent
    assert rules(module / "data" / "loaders.py") == []
    alone = "from data.loaders import get_loader\nloader = get_loader(None)\nif __name__ == '__main__':\n    pass\n"
    module = project(tmp_path / "c", {"train.py": alone, "data/loaders.py": LOADERS}).parent
    assert rules(module / "data" / "loaders.py") == []


def test_a_self_test_block_does_not_make_an_imported_function_dead(tmp_path):
    with_self_test = LOADERS.replace("import torch\n", "import torch\nimport torch.distributed as dist\n") + (
        "\nif __name__ == '__main__':\n    dist.init_process_group('gloo')\n")
    train = project(tmp_path / "d", {"train.py": script_text(TRAIN), "data/loaders.py": with_self_test})
    assert rules(train.parent / "data" / "loaders.py") == [(6, "print-on-every-rank")]
    unused = project(tmp_path / "e", {"train.py": script_text("dist.init_process_group('nccl')\n"),
                                      "data/loaders.py": with_self_test})
    assert rules(unused.parent / "data" / "loaders.py") == []  # nothing imports it: the self-test alone runs it


EXECUTOR = """\
import logging

class Executor:
    def train_one_epoch(self, model, loader):
        logging.info("using accumulate grad, new batch size is 8 times larger than before")
        for batch in loader:
            model(batch)
"""


def test_a_modules_logging_line_heard_on_every_rank_of_its_importer(tmp_path):
    train = """\
        import logging
        from utils.executor import Executor
        def main():
            logging.basicConfig(level=logging.DEBUG)
            dist.init_process_group("nccl")
            executor = Executor()
            for epoch in range(3):
                executor.train_one_epoch(model, loader)
        if __name__ == "__main__":
            main()
        """
    root = project(tmp_path / "f", {"train.py": script_text(train), "utils/executor.py": EXECUTOR}).parent
    assert rules(root / "utils" / "executor.py") == [(5, "log-on-every-rank")]
    quiet = train.replace("level=logging.DEBUG", "level=logging.INFO if dist.get_rank() == 0 else logging.WARNING")
    root = project(tmp_path / "g", {"train.py": script_text(quiet), "utils/executor.py": EXECUTOR}).parent
    assert rules(root / "utils" / "executor.py") == []  # the other ranks drop INFO
    unset = train.replace("        logging.basicConfig(level=logging.DEBUG)\n", "")
    root = project(tmp_path / "h", {"train.py": script_text(unset), "utils/executor.py": EXECUTOR}).parent
    assert rules(root / "utils" / "executor.py") == []  # the root logger stays at WARNING
