"""A project function that replaces builtins.print on the other ranks quiets the prints that run after its call,
not those of the same function that run before it (3detr's `main`: two prints, then `init_distributed(...)`)."""

from __future__ import annotations

import textwrap

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_project_imports import project

DIST = """\
import builtins
import torch.distributed as dist

def init_distributed(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    setup_print(rank == 0)

def setup_print(is_primary):
    builtin_print = builtins.print

    def print(*args, **kwargs):
        if is_primary:
            builtin_print(*args, **kwargs)

    builtins.print = print
"""


def _prints(tmp_path, body: str) -> list[tuple[int, str]]:
    script = project(tmp_path, {"main.py": "import torch.multiprocessing as mp\nfrom dist import init_distributed\n"
                                           + textwrap.dedent(body), "dist.py": DIST})
    return [(f.line, f.problem) for f in check_file(script) if f.rule == "print-on-every-rank"]


def test_prints_of_the_worker_before_its_call_that_replaces_print_run_on_every_rank(tmp_path):
    found = _prints(tmp_path, """\
        def main(rank, world_size):
            if world_size > 1:
                print("Initializing distributed training")
                print("Consider fewer evaluations")
                init_distributed(rank, world_size)
            print("training")

        if __name__ == "__main__":
            mp.spawn(main, args=(2,), nprocs=2)
        """)
    assert [line for line, _ in found] == [5]
    assert "before `init_distributed` (line 7)" in found[0][1] and "(also lines 6)" in found[0][1]


def test_prints_after_it_in_another_branch_or_in_another_function_stay_quiet(tmp_path):
    assert _prints(tmp_path, """\
        def report(step):
            print("step", step)

        def main(rank, world_size):
            if world_size == 1:
                print("one process")
            else:
                init_distributed(rank, world_size)
            for step in range(3):
                report(step)
            print("done")

        if __name__ == "__main__":
            mp.spawn(main, args=(2,), nprocs=2)
        """) == []


def test_a_print_replaced_by_the_script_itself_quiets_every_print_as_before(tmp_path):
    assert _prints(tmp_path, """\
        import builtins

        def main(rank, world_size):
            print("starting")
            dist.init_process_group("gloo", rank=rank, world_size=world_size)
            if rank != 0:
                builtins.print = lambda *args, **kwargs: None
            print("training")

        if __name__ == "__main__":
            import torch.distributed as dist
            mp.spawn(main, args=(2,), nprocs=2)
        """) == []
