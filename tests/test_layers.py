"""The layers import downward only: ``tools/layers.py`` run on the source, and on a tree made to break it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _layers():
    spec = importlib.util.spec_from_file_location("layers", ROOT / "tools" / "layers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["layers"] = module
    spec.loader.exec_module(module)
    return module


def test_no_upward_import_that_is_not_listed_with_its_reason(capsys):
    layers = _layers()
    assert layers.main([str(ROOT / "src")]) == 0, capsys.readouterr().out
    listed = set(layers.ALLOWED)
    found = {(imp.importer, imp.imported) for imp in layers.upward_imports(ROOT / "src")}
    assert listed <= found, f"ALLOWED lists imports that are gone: {sorted(listed - found)}"


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "paratrain" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_an_import_of_a_higher_layer_is_found_wherever_it_is_written(tmp_path, capsys):
    layers = _layers()
    src = _tree(tmp_path, {
        "__init__.py": "",
        "comm.py": "def f():\n    from paratrain.loop import fit\n",  # inside a function
        "data/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..runtime import Runtime\n",
        "runtime/__init__.py": "from paratrain import comm\nfrom paratrain.data import x\n",  # downward: fine
        "loop/__init__.py": "from paratrain import fit\n",  # a name of the root, which is above loop
    })
    found = sorted(str(imp) for imp in layers.upward_imports(src))
    assert found == [
        "paratrain.comm:2 imports paratrain.loop (comm -> loop)",
        "paratrain.data:3 imports paratrain.runtime (data -> runtime)",
        "paratrain.loop:1 imports paratrain (loop -> <root>)",
    ]
    assert layers.main([str(src)]) == 1
    assert "3 upward import(s), 3 not allowed" in capsys.readouterr().out


def test_a_listed_import_passes_and_a_folder_in_no_layer_is_refused(tmp_path, monkeypatch):
    layers = _layers()
    src = _tree(tmp_path, {"__init__.py": "", "comm.py": "import paratrain.loop\n", "loop/__init__.py": ""})
    monkeypatch.setitem(layers.ALLOWED, ("paratrain.comm", "paratrain.loop"), "a reason")
    assert layers.main([str(src)]) == 0
    _tree(tmp_path, {"newfolder/__init__.py": "import paratrain.comm\n"})
    try:
        layers.main([str(src)])
    except SystemExit as exc:
        assert "paratrain.newfolder is in no layer; add 'newfolder' to LAYERS" in str(exc)
    else:
        raise AssertionError("a folder in no layer was not refused")
