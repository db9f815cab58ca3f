"""pt.fit(model, seed=S) on two real processes: the documented shape (seed, then build) is
repeatable; a model built before any seed gets one warning line on rank 0, and `paratrain
check` names the line.

Before, the unseeded shape trained a different model each run (final weights apart by 1.17
on this script, dev accuracy 0.75 vs 0.44) and neither fit nor check said a word.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch

from paratrain.diagnostics.check import check_source
from paratrain.loop.config import FitConfig
from tests.support import clean_env, paratrain_cmd

SCRIPT = Path(__file__).with_name("fit_seed_script.py")
WARNING = "torch was not seeded with 7 then, so the initial weights do not follow seed=7"


def _shapes(folder: Path) -> dict[str, Path]:
    text = SCRIPT.read_text()
    unseeded = "\n".join(line for line in text.splitlines() if not line.endswith("# SEEDING")) + "\n"
    paths = {"seeded": folder / "seeded.py", "unseeded": folder / "unseeded.py"}
    paths["seeded"].write_text(text)
    paths["unseeded"].write_text(unseeded)
    return paths


def _run(folder: Path, script: Path, name: str) -> tuple[dict, str]:
    done = subprocess.run(paratrain_cmd("run", "--nproc-per-node", "2", script.name, f"runs/{name}", f"{name}.pt"),
                          cwd=folder, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(folder / f"{name}.pt"), done.stdout + done.stderr


def test_seeding_first_repeats_and_a_model_built_before_the_seed_is_named(tmp_path):
    shapes = _shapes(tmp_path)
    first, first_out = _run(tmp_path, shapes["seeded"], "a")
    second, _ = _run(tmp_path, shapes["seeded"], "b")
    assert all(torch.equal(first[name], second[name]) for name in first)
    assert WARNING not in first_out
    _, unseeded_out = _run(tmp_path, shapes["unseeded"], "c")
    warnings = [line for line in unseeded_out.splitlines() if WARNING in line]
    assert len(warnings) == 1 and warnings[0].startswith("[rank0]:") and "pt.seed_everything(7)" in warnings[0], unseeded_out


def test_check_flags_the_model_built_before_the_seed_of_pt_fit(tmp_path):
    shapes = _shapes(tmp_path)
    assert check_source(shapes["seeded"].read_text()) == []
    found = check_source(shapes["unseeded"].read_text())
    assert [f.rule for f in found] == ["model-before-seed"]
    assert "torch.nn.Sequential" in shapes["unseeded"].read_text().splitlines()[found[0].line - 1]
    assert "pt.seed_everything(7)" in found[0].fix
    inline = "import paratrain as pt\nimport torch\npt.fit(torch.nn.Sequential(), tr, dev, seed=3)\n"
    assert [f.line for f in check_source(inline)] == [3]
    task = "import paratrain as pt\nclass MyTask(pt.Task): pass\npt.fit(MyTask(), seed=3)\n"
    assert check_source(task) == []  # a Task builds its model inside fit, after the seed
    runtime = "import paratrain as pt\nimport torch\nrt = pt.Runtime(seed=3)\nm = torch.nn.Sequential()\npt.fit(m, a, b, seed=3)\n"
    assert check_source(runtime) == []


def test_the_warning_asks_only_when_a_seed_was_given():
    from paratrain.loop.fit import unseeded_model_warning

    torch.manual_seed(11)
    assert unseeded_model_warning(None, {}) is None  # fit's default seed promises nothing about your model
    assert unseeded_model_warning(None, {"seed": 11}) is None
    assert "pt.seed_everything(12)" in unseeded_model_warning(None, {"seed": 12})
    assert "not seeded with 12" in unseeded_model_warning(FitConfig(seed=12), {})
