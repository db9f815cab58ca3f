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
