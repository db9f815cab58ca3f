"""Rank guards that ``paratrain check`` reads as limiting a block to the main process."""

from __future__ import annotations

import pytest

from paratrain.diagnostics.check import check_source

_HEAD = """\
import argparse
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()
dist.init_process_group("nccl")
model = torch.nn.Linear(2, 2)
"""


def _rules(source: str) -> set[tuple[int, str]]:
    return {(finding.line, finding.rule) for finding in check_source(source)}


@pytest.mark.parametrize("values", ["[-1, 0]", "(-1, 0)", "{0, -1}", "[0, -1]"])
def test_membership_in_minus_one_and_zero_is_a_rank_zero_guard(values: str) -> None:
    source = _HEAD + f"if args.local_rank in {values}:\n    torch.save(model.state_dict(), 'm.pt')\n    print('saved')\n"
    found = _rules(source)
    assert not {rule for _, rule in found} & {"save-on-every-rank", "print-on-every-rank"}, found


def test_leaving_when_not_in_minus_one_and_zero_guards_what_follows() -> None:
    source = _HEAD + ("def save():\n    if args.local_rank not in (-1, 0):\n        return\n"
                      "    torch.save(model.state_dict(), 'm.pt')\n\n\nsave()\n")
    assert not {rule for _, rule in _rules(source)} & {"save-on-every-rank"}


@pytest.mark.parametrize("test", ["args.local_rank in [0, 1]", "args.epoch in [-1, 0]", "True"])
def test_other_memberships_guard_nothing(test: str) -> None:
    source = _HEAD + f"if {test}:\n    torch.save(model.state_dict(), 'm.pt')\n"
    assert (11, "save-on-every-rank") in _rules(source)
