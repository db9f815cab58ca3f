"""pt.spawn from a real Jupyter kernel: the training function is defined in a notebook cell.

``mp.spawn`` fails here ("Can't get attribute 'train' on <module '__main__'>"): a fresh
worker cannot import the notebook. pt.spawn sends the function, the class it builds and
the notebook global it reads by value.
"""

from __future__ import annotations

import ast

import pytest

from tests.support import ROOT, clean_env

nbformat = pytest.importorskip("nbformat", reason="the notebook test needs the test extra (nbformat, nbclient, ipykernel)")
nbclient = pytest.importorskip("nbclient", reason="the notebook test needs the test extra (nbformat, nbclient, ipykernel)")

CELLS = [
    "import threading\nimport torch\nfrom torch.utils.data import TensorDataset\nimport paratrain as pt",
    # A notebook global, a class and a function, all defined in cells.
    """\
SCALE = 3.0

class Regressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.linear(x)


def train(epochs):
    rt = pt.Runtime(strategy="ddp", seed=0)
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    data = rt.loader(TensorDataset(x, x.sum(1, keepdim=True) * SCALE), batch_size=8, shuffle=True)
    model = Regressor()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt = rt.setup(model, opt)
    losses = []
    for _ in range(epochs):
        for xb, yb in data:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            rt.backward(loss)
            rt.step(opt)
        losses.append(float(pt.all_reduce(loss.detach(), "mean")))
    result = {"world_size": rt.world_size, "ranks": pt.all_gather_object(rt.rank), "losses": losses}
    del model, opt
    rt.close()
    return result""",
    "result = pt.spawn(train, nprocs=2, args=(3,))\nprint('RESULT', result)",
    """\
lock = threading.Lock()

def uses_lock():
    return lock.locked()

try:
    pt.spawn(uses_lock, nprocs=2)
except pt.ConfigError as exc:
    print('REFUSED', exc)""",
]


def test_spawn_from_a_notebook_cell_trains_two_ranks(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    client = nbclient.NotebookClient(notebook, kernel_name="python3", timeout=300,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=clean_env(PYTHONPATH=f"{ROOT / 'src'}"))
    outputs = "".join(out.get("text", "") for cell in notebook.cells for out in cell.get("outputs", []))
    result_line = next(line for line in outputs.splitlines() if line.startswith("RESULT "))
    result = ast.literal_eval(result_line[len("RESULT "):])  # a dict of numbers printed by the kernel
    assert result["world_size"] == 2 and result["ranks"] == [0, 1]
    assert len(result["losses"]) == 3 and result["losses"][-1] < result["losses"][0]
    refused = next(line for line in outputs.splitlines() if line.startswith("REFUSED "))
    assert "uses_lock cannot be sent to the worker processes (TypeError: cannot pickle '_thread.lock' object)" in refused
