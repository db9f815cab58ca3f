"""Upward imports between paratrain's layers, read from the source: ``python3 tools/layers.py``.

The layers, top to bottom, are ``LAYERS``; a module may import its own layer and the layers
below it. An import of a layer above is an *upward import*: it ties a utility to what uses it,
and two of them make a cycle between folders. Every upward import is printed; the run fails
(exit 1) on one that ``ALLOWED`` does not list with its reason. Imports under
``if TYPE_CHECKING:`` count too: a type is a dependency all the same.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

#: Top to bottom. A name is a folder or a module directly under ``src/paratrain/``;
#: ``<root>`` is ``paratrain/__init__.py`` (the ``pt.*`` names), which imports lazily from below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__", "cli"),  # commands, and what they start in every worker (cli/workers/)
    ("bench",),  # runs methods through the commands' machinery and the peers' launchers
    ("<root>",),
    ("launch",),  # the launcher side: LaunchConfig, torch.distributed.run, failure reports
    ("loop",),  # pt.fit, built on the public pieces below
    ("tasks",),
    ("runtime",),  # pt.Runtime: wires strategy, precision, data, checkpoint and diagnostics
    ("trackers",),  # experiment trackers (rank 0), fed by the fit loop and rt.log
    ("checkpoint",),
    ("strategy",),
    ("precision",),
    ("data",),
    ("diagnostics",),  # watchdog, preemption, desync, failure reports, link probe: comm and env only
    ("goodput",),  # the ledger of where wall time went, its accounting, the checkpoint interval: stdlib only
    ("metrics",),
    ("comm",),
    ("env",),
    ("arguments", "errors", "no_follow", "replica_environ", "seeding", "store_server", "warning_lines", "_version"),  # leaves
)

#: ``(importing module, imported module) -> why`` for the upward imports that stay.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} imports {self.imported} ({layer_of(self.importer)} -> {layer_of(self.imported)})"


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "<root>"
    return parts[1]


def rank_of(module: str) -> int:
    name = layer_of(module)
    for rank, names in enumerate(LAYERS):
        if name in names:
            return rank
    raise SystemExit(f"tools/layers.py: {module} is in no layer; add {name!r} to LAYERS")


def module_name(path: Path, src: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(src).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def imports_of(path: Path, src: Path) -> list[Import]:
    """Every ``paratrain`` module that ``path`` imports, anywhere in the file (function bodies too)."""
    module, is_package = module_name(path, src)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package that holds this module
                package = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # `from paratrain import comm` names a module; `from paratrain import fit` a name of the root
            names = [f"{base}.{alias.name}" if base == "paratrain" and _is_module(src, alias.name) else base
                     for alias in node.names]
        else:
            continue
        found += [Import(module, name, node.lineno) for name in names if name.split(".")[0] == "paratrain"]
    return found


def _is_module(src: Path, name: str) -> bool:
    return (src / "paratrain" / name).is_dir() or (src / "paratrain" / f"{name}.py").is_file()


def upward_imports(src: Path) -> list[Import]:
    """The imports in ``src/paratrain`` whose target's layer is above the importer's."""
    found = []
    for path in sorted((src / "paratrain").rglob("*.py")):
        for imp in imports_of(path, src):
            if rank_of(imp.imported) < rank_of(imp.importer):
                found.append(imp)
    return found


def main(argv: list[str]) -> int:
    src = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "src"
    found = upward_imports(src)
    unlisted = [imp for imp in found if (imp.importer, imp.imported) not in ALLOWED]
    for imp in found:
        reason = ALLOWED.get((imp.importer, imp.imported))
        print(f"{'allowed' if reason else 'UPWARD '}  {imp}" + (f": {reason}" if reason else ""))
    print(f"{len(found)} upward import(s), {len(unlisted)} not allowed")
    if unlisted:
        print("move the code to the layer that owns it, or list the import in ALLOWED (tools/layers.py) with its reason",
              file=sys.stderr)
    return 1 if unlisted else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
