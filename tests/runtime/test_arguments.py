"""Argument checks at the API boundary: typos, objects where options belong, types — each message."""

from __future__ import annotations

import pytest
import torch

import paratrain as pt
from paratrain.arguments import cli_spelling, option

DATA = torch.utils.data.TensorDataset(torch.zeros(8, 2))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: pt.Runtime(precison="bf16-mixed"), "pt.Runtime() got an unexpected argument 'precison'; did you mean 'precision'?"),
        (lambda: pt.Runtime(strategy="ddp", find_unused_parameter=True), "did you mean 'find_unused_parameters'?"),
        (lambda: pt.Runtime(seed="42"), "pt.Runtime(): seed must be an int or None, got '42'"),
        (lambda: pt.Runtime(timeout="60"), "pt.Runtime(): timeout must be a positive number, got '60'"),
        (lambda: pt.Runtime(torch.nn.Linear(2, 2)), "strategy got a Linear, which is not a value for strategy; models and optimizers go to rt.setup(model, optimizer)"),
        (lambda: pt.Runtime(sync_batchnorm="yes"), "sync_batchnorm must be a bool"),
        (lambda: pt.fit("digits", epoch=1), "pt.fit() got an unexpected argument 'epoch'; did you mean 'epochs'?"),
        (lambda: pt.fit("digits", seed="42"), "seed must be an int, got '42'"),
    ],
)
def test_runtime_and_fit_arguments(call, message):
    with pytest.raises(pt.ConfigError) as info:
        call()
    assert message in str(info.value)


def test_checkpointer_with_objects_by_position_says_they_go_by_name(tmp_path):
    rt = pt.Runtime(strategy="single")
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(pt.ConfigError) as info:
        pt.Checkpointer(rt, tmp_path, model, optimizer)
    message = str(info.value)
    assert "keep_last got a Sequential" in message
    assert "pass the objects to save by name: pt.Checkpointer(rt, directory, model=model, optimizer=opt" in message
    with pytest.raises(pt.ConfigError, match="the first argument is the pt.Runtime"):
        pt.Checkpointer(model, tmp_path)


def test_setup_with_arguments_in_the_wrong_order():
    rt = pt.Runtime(strategy="single")
    model = torch.nn.Linear(2, 2)
    with pytest.raises(pt.ConfigError, match="argument 2 is a Linear, not a torch.optim.Optimizer"):
        rt.setup(model, torch.nn.Linear(2, 2))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"shuffle": "no"}, "loader(): shuffle must be a bool, got 'no'"),
        ({"drop_last": 1}, "loader(): drop_last must be a bool, got 1"),
        ({"num_workers": -1}, "loader(): num_workers must be an int >= 0, got -1"),
        ({"seed": "1"}, "loader(): seed must be an int or None, got '1'"),
    ],
)
def test_loader_arguments(options, message):
    rt = pt.Runtime(strategy="single")
    with pytest.raises(pt.DataError) as info:
        rt.loader(DATA, batch_size=2, **options)
    assert message in str(info.value)
    with pytest.raises(pt.DataError, match="batch_size must be a positive integer"):
        rt.loader(DATA, batch_size="2")


def test_errors_spell_keyword_arguments_in_python_and_flags_on_the_cli():
    assert (option("fresh", True), option("out_dir", "runs/x"), option("grad_accum")) == ("fresh=True", "out_dir='runs/x'", "grad_accum")
    with cli_spelling():
        assert (option("fresh", True), option("out_dir", "runs/x"), option("grad_accum")) == ("--fresh", "--out runs/x", "--grad-accum")
    assert option("fresh", True) == "fresh=True"  # the context ends


SCRIPT = """
import sys
import torch
import paratrain as pt

if sys.argv[1] == "typo":
    pt.Runtime(precison="bf16-mixed")
else:  # an output directory of another task, from the library
    model = torch.nn.Linear(2, 2)
    data = torch.utils.data.TensorDataset(torch.randn(16, 2), torch.randint(0, 2, (16,)))
    pt.fit(model, data, data, epochs=1, batch_size=4, out_dir=sys.argv[2], progress=False)
"""


@pytest.mark.parametrize("case", ["typo", "out_dir"])
def test_two_processes_name_the_api_arguments(tmp_path, case):
    import json
    import subprocess

    from tests.support import clean_env, paratrain_cmd

    (tmp_path / "script.py").write_text(SCRIPT)
    out = tmp_path / "run"
    out.mkdir()
    (out / "task.json").write_text(json.dumps({"task": "digits", "options": {}}))
    done = subprocess.run(paratrain_cmd("run", "--nproc-per-node", "2", str(tmp_path / "script.py"), case, str(out)),
                          env=clean_env(), capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    if case == "typo":
        assert output.count("did you mean 'precision'?") >= 2  # each rank, before any rendezvous
    else:
        assert f"out_dir='{out}' holds checkpoints of task 'digits', not 'model'" in output
        assert "pass fresh=True" in output and "--fresh" not in output and "--out" not in output
