"""A project helper whose every save sits under a local-rank test of its own saves once per machine (Person re-ID's
``save_network(model, name, epoch, local_rank)``: ``if local_rank > -1: if local_rank == 0: torch.save(...)``, and
its ``else:`` for a run without a launcher). Each project is written for the test in tmp_path."""

from __future__ import annotations

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_project_imports import project, script_text

UTILS = """\
    import torch


    def save_network(network, path, local_rank=-1):
        if local_rank > -1:
            if {test}:
                torch.save(network.state_dict(), path)
        else:
            torch.save(network.state_dict(), path)
    """
TRAIN = """\
    from utils import save_network

    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    model = torch.nn.Linear(2, 2)
    save_network(model, "net.pth", local_rank)
    """


def _saves(tmp_path, test: str) -> list[tuple[int, str]]:
    script = project(tmp_path, {"train.py": script_text(TRAIN), "utils.py": UTILS.format(test=test)})
    return [(f.line, f.problem) for f in check_file(script) if f.rule == "save-on-every-rank"]


def test_a_helper_saving_under_its_own_local_rank_test_saves_once_per_machine(tmp_path):
    [(line, problem)] = _saves(tmp_path, "local_rank == 0")
    assert "save_network(model" in script_text(TRAIN).splitlines()[line - 1]
    assert "local-rank test of its own" in problem and "once per machine" in problem


def test_a_helper_saving_under_a_global_rank_test_is_quiet(tmp_path):
    assert _saves(tmp_path, "dist.get_rank() == 0") == []
