"""How the other files of a module's project guard their calls of one of its functions.

FocalNet's ``utils.save_checkpoint`` holds a bare ``torch.save``; its one caller, ``main.py``, calls it under
``if dist.get_rank() == 0 and …:``. Read on its own, the module's save looks like every rank's; read with its
callers, it runs on rank 0 only::

    callers_guard(Path("utils.py"), "save_checkpoint")   # "global": every call elsewhere is under a rank-0 test

Only files that import the module (``from utils import save_checkpoint``, ``import utils``, ``from pkg import
utils``) count as callers, and only calls of the name as imported (``save_checkpoint(``, ``utils.save_checkpoint(``).
A file that names the function in any other way (hands it on as a callback, registers it) may run it anywhere, and
the answer is then ``""``. Each caller's own guard is read within its file (its functions' callers there too), not
from further files: one level, so a check stays bounded.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable
from pathlib import Path

from paratrain.diagnostics.project_imports import read_small_file
from paratrain.diagnostics.project_mentions import marked_root, python_files
from paratrain.diagnostics.tree_walk import walk

_MAX_CALLER_FILES = 8  # files that import the module and name the function; more than that: not followed


def callers_guard(script: Path, name: str) -> str:
    """The weakest guard over the calls of ``script``'s top-level function ``name`` in the other files of its marked
    project: ``"global"`` when every one is under a rank-0 test, ``"local"`` when every one is at least under a
    local-rank test, ``""`` when one is not, when a file names it other than by a call, when no file calls it, or
    when nothing marks the project's root."""
    return _callers_guard(script.resolve(), name)


def importers(script: Path, keep: Callable[[bytes], bool] = lambda _text: True) -> list[tuple[Path, bytes]]:
    """The other files of ``script``'s marked project that import it (as :func:`callers_guard` reads imports) and
    whose bytes ``keep`` keeps (asked first: reading the imports costs more), with their bytes; none when nothing
    marks the project's root."""
    script = script.resolve()
    root = marked_root(script)
    if root is None:
        return []
    return [(path, text) for path, text in _importers(script, root)
            if keep(text) and _imported_from_script(path, text, script, root)]


def argument_guard(script: Path, name: str, parameter: str, position: int) -> str:
    """The weakest guard over what the other files of ``script``'s marked project pass for ``parameter`` (by keyword,
    or as the ``position``-th positional argument) in their calls of its top-level ``name`` — a class: what its
    ``__init__`` is given. A call that does not pass it leaves the parameter its default and is no evidence either way;
    one that passes ``None`` neither; any other counts with its own guard, or else the rank test under which the
    value it passes is bound, being ``None`` elsewhere (``logger = None`` … ``if rank == 0: logger = Logger()``).
    ``""`` as :func:`callers_guard`, also when a call passes ``*args``/``**kwargs`` or no call passes the parameter.

    XMem's ``XMemTrainer(config, logger=logger, …)`` only under ``if local_rank == 0:`` (the other ranks build it
    without one): ``self.logger`` is ``None`` but on rank 0, and ``if self.logger is not None:`` a rank-0 test."""
    return _callers_guard(script.resolve(), name, (parameter, position))


@functools.lru_cache(maxsize=256)
def _callers_guard(script: Path, name: str, argument: tuple[str, int] | None = None) -> str:
    root = marked_root(script)
    if root is None:
        return ""
    word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
    callers = []
    for path, text in _importers(script, root):
        if word.search(text):
            bound = _imported_from_script(path, text, script, root)
            if bound is None or name in bound.values() or "*" in bound.values() or "" in bound.values():
                callers.append(path)
    if len(callers) > _MAX_CALLER_FILES:
        return ""
    kinds = set()
    for path in callers:
        found = _guards_in(path, script, root, name, argument)
        if found is None:
            return ""
        kinds |= found
    if kinds == {"global"}:
        return "global"
    return "local" if kinds and "" not in kinds else ""


@functools.lru_cache(maxsize=256)
def _imported_from_script(path: Path, text: bytes, script: Path, root: Path) -> dict[str, str] | None:
    """:func:`_bindings` of the import statements alone of ``path`` (``text``, its bytes as :func:`_importers` read
    them); None when one does not parse on its own."""
    return _bindings(_import_statements(text), path, script, root)


@functools.lru_cache(maxsize=4)
def _importers(script: Path, root: Path) -> tuple[tuple[Path, bytes], ...]:
    """The project's other files that may import ``script`` (its name shows in them), with their bytes: read once
    per module, as a check asks for each of its functions."""
    stem = re.compile(rb"\b" + re.escape(script.stem.encode()) + rb"\b")
    return tuple((path, text) for path in python_files(root) if path != script
                 and stem.search(text := read_small_file(path) or b""))


def forget() -> None:
    """Drop the files and facts kept for callers (at the start of each check: a file may have changed since)."""
    for cached in (_callers_guard, _imported_from_script, _importers, _facts_of, _script_names):
        cached.cache_clear()


def _guards_in(path: Path, script: Path, root: Path, name: str, argument: tuple[str, int] | None = None) -> set[str] | None:
    """The guards over ``path``'s calls of ``script``'s function ``name`` (imported by name, or called through the
    module imported as a whole) — with ``argument``, over the values those calls pass for it (:func:`argument_guard`);
    None when the file names it in another way than a call, or cannot be read."""
    facts = _facts_of(path)
    if facts is None:
        return None
    bound = _bindings(facts.tree, path, script, root) or {}
    functions = {local for local, original in bound.items() if original == name} | ({name} if "*" in bound else set())
    modules = {local for local, original in bound.items() if original == ""}
    kinds: set[str] = set()
    for node in walk(facts.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in functions:
            return None  # a function of its own by that name: its calls may be of either
        named = isinstance(node, ast.Name) and node.id in functions
        if not (named or isinstance(node, ast.Attribute) and node.attr == name and ast.unparse(node.value) in modules):
            continue
        call = facts.parents.get(node)
        if not (isinstance(call, ast.Call) and call.func is node):
            return None  # handed on, or stored: it runs where something else decides
        if argument is None:
            kinds.add(facts.guard(call))
            continue
        passed = _passed(call, *argument)
        if passed is _UNKNOWN:
            return None
        if passed is not None and not (isinstance(passed, ast.Constant) and passed.value is None):
            kinds.add(facts.guard(call) or facts.test_kind(passed))
    return kinds


_UNKNOWN = ast.Constant(value=...)  # what a call passes cannot be read (``*args``, ``**kwargs``)


def _passed(call: ast.Call, parameter: str, position: int) -> ast.expr | None:
    """The value ``call`` passes for ``parameter`` (by keyword, or at ``position``); None when it passes none,
    :data:`_UNKNOWN` when ``*args`` or ``**kwargs`` may hold it."""
    for keyword in call.keywords:
        if keyword.arg == parameter:
            return keyword.value
        if keyword.arg is None:
            return _UNKNOWN
    for index, value in enumerate(call.args):
        if isinstance(value, ast.Starred):
            return _UNKNOWN
        if index == position:
            return value
    return None


@functools.lru_cache(maxsize=16)
def _facts_of(path: Path):
    """The facts of a caller, read once (its guards are asked for each function it calls). None when unreadable."""
    from paratrain.diagnostics.script_facts import ScriptFacts  # script_facts asks this module: imported when used

    try:
        return ScriptFacts.read(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
        return None


_LINE = rb"(?:[^\\\n]|\\[\s\S])*"  # to the end of the line, and of the lines a backslash continues it on
_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[ \t]+(?:\([^)]*\)|" + _LINE + rb")|import[ \t]+" + _LINE + rb")",
                     re.MULTILINE)


def _import_statements(text: bytes) -> ast.Module | None:
    """The file's import statements alone (wherever they stand), parsed one by one: what it imports is known
    without parsing the whole file, for the many files that turn out not to import the module. None when one does
    not parse on its own."""
    tree = ast.Module(body=[], type_ignores=[])
    for match in _IMPORT.finditer(text):
        try:
            tree.body.extend(ast.parse(match.group().decode("utf-8", "replace").strip()).body)
        except SyntaxError:
            return None
    return tree


def _bindings(tree: ast.Module | None, path: Path, script: Path, root: Path) -> dict[str, str] | None:
    """What ``path``'s imports bind from ``script``: each local name → the name of the function it stands for
    (``from utils import save as f`` → ``{"f": "save"}``; ``"*"`` for a star import), or ``""`` for the module itself
    (``import pkg.utils as U``, ``from pkg import utils``). The module's dotted name is looked for as Python would,
    from the file's directory or any directory above it up to the project's root. None when ``tree`` is None."""
    if tree is None:
        return None
    bound: dict[str, str] = {}
    for node in walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _names_script(alias.name, 0, path, script, root):
                    bound[alias.asname or alias.name] = ""
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if _names_script(node.module or "", node.level, path, script, root):
                    bound[alias.asname or alias.name] = alias.name
                elif _names_script(f"{node.module}.{alias.name}" if node.module else alias.name, node.level, path,
                                   script, root):
                    bound[alias.asname or alias.name] = ""
    return bound


def _names_script(dotted: str, level: int, path: Path, script: Path, root: Path) -> bool:
    """``dotted``, imported from ``path`` (``level`` dots before it), is the module ``script``."""
    return bool(dotted) and dotted in _script_names(path.parent, script, root, level)


@functools.lru_cache(maxsize=1024)
def _script_names(directory: Path, script: Path, root: Path, level: int) -> frozenset[str]:
    """The dotted names ``script`` goes by in an import written in ``directory``: relative to ``directory``'s
    ``level - 1``-th parent for a relative import, else to any directory above both up to the root."""
    if level:
        bases = [directory.parents[level - 2] if level > 1 else directory] if level - 1 <= len(directory.parents) else []
    else:
        bases = [d for d in (directory, *directory.parents) if (d == root or root in d.parents) and d in script.parents]
    names = set()
    for base in bases:
        if base in script.parents:
            names.add(".".join(script.relative_to(base).with_suffix("").parts))
    return frozenset(names)
