"""A function of the script that returns a DDP/DataParallel wrapper makes what it returns a wrapper: SpCL-like
``model = create_model(args)`` (``model = nn.DataParallel(model); return model``), then ``model.state_dict()``
saved in a checkpoint dict."""

from __future__ import annotations

from paratrain.diagnostics.check import check_source

SCRIPT = """\
import torch
import torch.nn as nn


def create_model(args):
    model = nn.Linear(2, 2)
    model = {wrap}
    return model


model = create_model(None)
torch.save({{"state_dict": model.state_dict(), "epoch": 1}}, "checkpoint.pth.tar")
"""


def _rules(source: str) -> list[tuple[int, str]]:
    return [(finding.line, finding.rule) for finding in check_source(source)]


def test_a_model_from_a_function_of_the_file_that_wraps_it_saves_module_keys() -> None:
    assert (12, "wrapped-state-dict") in _rules(SCRIPT.format(wrap="nn.DataParallel(model)"))


def test_a_model_from_a_function_that_does_not_wrap_it_saves_plain_keys() -> None:
    assert [rule for _, rule in _rules(SCRIPT.format(wrap="model.cuda()"))] == []
