"""A helper named for the question ``is this model wrapped?`` unwraps like ``hasattr(model, "module")``. YOLOP-like:
``model.module.state_dict() if is_parallel(model) else model.state_dict()``, with ``is_parallel`` in the project's
utils (``type(model) in (DataParallel, DistributedDataParallel)``): neither branch saves ``module.`` keys."""

from __future__ import annotations

from tests.diagnostics.test_check_project_imports import project, rules, script_text


def test_a_save_in_the_unwrapped_branch_of_is_parallel_is_not_a_wrapped_state_dict(tmp_path):
    def found(test: str) -> list[str]:
        script = project(tmp_path / str(len(list(tmp_path.iterdir()))), {
            "train.py": script_text(f"""\
                from utils import is_parallel

                dist.init_process_group("nccl")
                model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
                if dist.get_rank() == 0:
                    state = model.module.state_dict() if {test} else model.state_dict()
                    torch.save({{"model": state}}, "last.pt")
                """),
            "utils.py": "import torch.nn as nn\n\ndef is_parallel(model):\n"
                        "    return type(model) in (nn.DataParallel, nn.parallel.DistributedDataParallel)\n",
        })
        return [rule for _, rule in rules(script)]

    assert found("is_parallel(model)") == []
    assert found("hasattr(model, 'module')") == []
    assert found("is_training(model)") == ["wrapped-state-dict"]  # asks something else
