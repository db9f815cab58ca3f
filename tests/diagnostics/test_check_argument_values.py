"""A statement every call of its function skips by the constants it passes is no one's output: MoE-LLaVA's
``maybe_zero_3(param, ignore_status=False)`` prints under ``if not ignore_status:`` and its one caller passes
``ignore_status=True``. A call that passes a variable, another file that may call the function, or a parameter
rebound in the body leaves the statement running. Each project is written for the test in tmp_path."""

from __future__ import annotations

import pytest

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_project_imports import project, script_text

TRAINER = """\
    dist.init_process_group("nccl")


    def gather_param(param, ignore_status=False, name=None):
        if not ignore_status:
            print(name, "no ignore status")
        return param.detach().cpu()


    def adapter_state(named_params):
        return {{k: gather_param(v, {passed}, name=k) for k, v in named_params}}


    model = torch.nn.Linear(2, 2)
    state = adapter_state(model.named_parameters())  # every rank gathers
    """


def _print_lines(tmp_path, passed: str, files: dict[str, str] | None = None) -> list[int]:
    script = project(tmp_path, {"trainer.py": script_text(TRAINER.format(passed=passed)), **(files or {})})
    return [f.line for f in check_file(script) if f.rule == "print-on-every-rank"]


def test_a_print_every_caller_skips_by_a_constant_is_not_reported(tmp_path):
    assert _print_lines(tmp_path, "ignore_status=True") == []


@pytest.mark.parametrize("passed", ["ignore_status=False", "ignore_status=quiet", "**options"])
def test_a_call_that_may_reach_the_print_leaves_it_reported(tmp_path, passed):
    text = script_text(TRAINER.format(passed=passed))
    [line] = _print_lines(tmp_path, passed)
    assert 'print(name, "no ignore status")' in text.splitlines()[line - 1]


def test_another_file_that_imports_the_function_may_call_it_with_its_default(tmp_path):
    other = {"tools.py": "from trainer import gather_param\n"}
    assert len(_print_lines(tmp_path, "ignore_status=True", other)) == 1


def test_a_positional_constant_and_an_else_branch_are_read_alike(tmp_path):
    body = """\
        dist.init_process_group("nccl")


        def report(value, verbose=True):
            if verbose:
                pass
            else:
                print("quiet", value)
            if verbose is None or not verbose:
                print("also quiet", value)


        report(1.0, True)
        report(2.0)
        """
    script = project(tmp_path, {"train.py": script_text(body)})
    assert [f.line for f in check_file(script) if f.rule == "print-on-every-rank"] == []
    # one call passing False reaches both prints
    script = project(tmp_path, {"train.py": script_text(body + "report(3.0, False)\n")})
    assert len([f for f in check_file(script) if f.rule == "print-on-every-rank"]) == 1  # first of the file's prints


def test_a_parameter_rebound_in_the_body_is_not_read_from_the_call(tmp_path):
    body = """\
        dist.init_process_group("nccl")


        def report(value, verbose=False):
            verbose = verbose or value > 1
            if verbose:
                print("value", value)


        report(2.0)
        """
    script = project(tmp_path, {"train.py": script_text(body)})
    assert len([f for f in check_file(script) if f.rule == "print-on-every-rank"]) == 1


def test_a_save_every_caller_skips_is_not_reported_either(tmp_path):
    body = """\
        dist.init_process_group("nccl")


        def finish(model, path, dry_run=False):
            if not dry_run:
                torch.save(model.state_dict(), path)


        finish(torch.nn.Linear(2, 2), "m.pt", dry_run=True)
        """
    script = project(tmp_path, {"train.py": script_text(body)})
    assert [f.rule for f in check_file(script) if f.rule == "save-on-every-rank"] == []
    script = project(tmp_path, {"train.py": script_text(body.replace("dry_run=True", "dry_run=False"))})
    assert [f.rule for f in check_file(script) if f.rule == "save-on-every-rank"] == ["save-on-every-rank"]
