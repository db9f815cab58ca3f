"""How the other files of a module's project guard their calls of one of its functions.

FocalNet's ``utils.save_checkpoint`` holds a bare ``torch.save``; its one caller, ``main.py``, calls it under
``if dist.get_rank() == 0 and …:``. Read on its own, the module's save looks like every rank's; read with its
callers, it runs on rank 0 only::

    callers_guard(Path("utils.py"), "save_checkpoint")   # "global": every call elsewhere is under a rank-0 test

Only files that import the module (``from utils import save_checkpoint``, ``import utils``, ``from pkg import
utils``) count as callers, and only calls of the name as imported (``save_checkpoint(``, ``utils.save_checkpoint(``).
A file that names the function in any other way (hands it on as a callback, registers it) may run it anywhere, and
the answer is then ``""``. Each caller's own guard is read within its file (its functions' callers there too), not
from further files: one level, so a check stays bounded — but for a call that sits in a method of a top-level class the
file never calls itself, whose callers in further files are read too (:func:`method_callers_guard`).
"""

from __future__ import annotations

import ast
import collections
import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from paratrain.diagnostics.project_imports import read_small_file
from paratrain.diagnostics.project_mentions import marked_root, python_files_near
from paratrain.diagnostics.tree_walk import walk

_MAX_CALLER_FILES = 8  # files that import the module and name the function; more than that: not followed


def callers_guard(script: Path, name: str) -> str:
    """The weakest guard over the calls of ``script``'s top-level function ``name`` in the other files of its marked
    project: ``"global"`` when every one is under a rank-0 test, ``"local"`` when every one is at least under a
    local-rank test, ``""`` when one is not, when a file names it other than by a call, when no file calls it, or
    when nothing marks the project's root."""
    return _callers_guard(script.resolve(), name)


def method_callers_guard(script: Path, class_name: str, method: str) -> str:
    """:func:`callers_guard` for the method ``method`` of ``script``'s top-level class ``class_name``: the weakest
    guard over the calls ``x.method(...)`` in the other files of its project, where ``x`` is bound there to an
    instance made by ``class_name(...)`` (imported from ``script``). ``""`` as :func:`callers_guard`, and also when an
    instance's name is used for ``method`` other than by a call, or no such call is found.

    PyTorch-StudioGAN's ``WORKER.save`` holds bare ``torch.save`` calls; ``loader.py`` makes ``worker =
    WORKER(...)`` and calls ``worker.save(...)`` under ``if global_rank == 0:`` only."""
    return _method_guard(script.resolve(), class_name, method)


_asking: set[tuple[Path, str, str]] = set()  # method guards being read: a caller's file asking back gets ""


def _method_guard(script: Path, class_name: str, method: str) -> str:
    """:func:`_method_callers_guard`, or ``""`` for a method whose guard is being read (a cycle of callers), kept out
    of the cache so that the answer read to its end is the one kept."""
    if (script, class_name, method) in _asking:
        return ""
    return _method_callers_guard(script, class_name, method)


@functools.lru_cache(maxsize=256)
def _method_callers_guard(script: Path, class_name: str, method: str) -> str:
    root = marked_root(script)
    key = (script, class_name, method)
    if root is None:
        return ""
    _asking.add(key)
    try:
        word = re.compile(rb"\b" + re.escape(class_name.encode()) + rb"\b")
        callers = [path for path, text in _importers(script, root) if word.search(text)
                   and _imported_from_script(path, text, script, root) is not None]
        if not callers:
            return ""
        return _weakest(callers, lambda path: _method_guards_in(path, script, root, class_name, method))
    finally:
        _asking.discard(key)


def _method_guards_in(path: Path, script: Path, root: Path, class_name: str, method: str) -> set[str] | None:
    """The guards over ``path``'s calls of ``method`` on instances of ``script``'s ``class_name`` made there; None
    when the file defines a class of that name, reads the method off an instance without calling it, or is
    unreadable."""
    facts, index = _facts_of(path), _index(path)
    if facts is None or index is None:
        return None
    bound = _tree_bindings(path, script, root)
    classes = {local for local, original in bound.items() if original == class_name}
    modules = {local for local, original in bound.items() if original == ""}
    if classes & index.defined:
        return None
    instances: set[str] = set()
    for node in index.made:
        made = node.value.func
        if (isinstance(made, ast.Name) and made.id in classes or isinstance(made, ast.Attribute)
                and made.attr == class_name and ast.unparse(made.value) in modules):
            instances |= {ast.unparse(target) for target in node.targets if isinstance(target, (ast.Name, ast.Attribute))}
    kinds: set[str] = set()
    for node in index.attributes.get(method, ()):
        if ast.unparse(node.value) in instances:
            call = facts.parents.get(node)
            if not (isinstance(call, ast.Call) and call.func is node):
                return None  # handed on: it runs where something else decides
            kinds.add(_guard_of_call(facts, call, path))
    return kinds


def _guard_of_call(facts, call: ast.Call, path: Path) -> str:
    """``call``'s guard in the caller ``path``, and, when it sits in a method of a top-level class that the file
    never calls itself, also as that method's callers in further files call it (:func:`method_callers_guard`:
    StudioGAN's ``misc.save_model``, called by ``WORKER.save``, which ``loader.py`` calls on rank 0 only)."""
    kind = facts.guard(call)
    if kind == "global":
        return kind
    function = facts.scope(call)
    owner = facts.parents.get(function)
    if not (isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and isinstance(owner, ast.ClassDef)
            and facts.parents.get(owner) is facts.tree and not facts.uses(function)):
        return kind
    outer = _method_guard(path.resolve(), owner.name, function.name)
    return max(kind, outer, key=("", "local", "global").index)


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
    return _weakest(callers, lambda path: _guards_in(path, script, root, name, argument))


def _weakest(callers: list[Path], guards_in: Callable[[Path], set[str] | None]) -> str:
    """The weakest of the guards ``guards_in`` finds in each caller file: ``"global"`` when all are rank-0 tests,
    ``"local"`` when all are at least local-rank tests, ``""`` when one is not, when a file gives None (it names the
    function other than by a call), when no call was found, or when there are more than :data:`_MAX_CALLER_FILES`."""
    if len(callers) > _MAX_CALLER_FILES:
        return ""
    kinds: set[str] = set()
    for path in callers:
        found = guards_in(path)
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
    return tuple((path, text) for path in python_files_near(script, root) if path != script
                 and stem.search(text := read_small_file(path) or b""))


def forget() -> None:
    """Drop the files and facts kept for callers (at the start of each check: a file may have changed since)."""
    for cached in (_callers_guard, _method_callers_guard, _imported_from_script, _importers, _facts_of, _index,
                   _tree_bindings, _script_names):
        cached.cache_clear()


def _guards_in(path: Path, script: Path, root: Path, name: str, argument: tuple[str, int] | None = None) -> set[str] | None:
    """The guards over ``path``'s calls of ``script``'s function ``name`` (imported by name, or called through the
    module imported as a whole) — with ``argument``, over the values those calls pass for it (:func:`argument_guard`);
    None when the file names it in another way than a call, or cannot be read."""
    facts, index = _facts_of(path), _index(path)
    if facts is None or index is None:
        return None
    bound = _tree_bindings(path, script, root)
    functions = {local for local, original in bound.items() if original == name} | ({name} if "*" in bound else set())
    modules = {local for local, original in bound.items() if original == ""}
    if functions & index.defined:
        return None  # a function of its own by that name: its calls may be of either
    kinds: set[str] = set()
    uses = [node for local in functions for node in index.names.get(local, ())]
    uses += [node for node in index.attributes.get(name, ()) if ast.unparse(node.value) in modules]
    for node in uses:
        call = facts.parents.get(node)
        if not (isinstance(call, ast.Call) and call.func is node):
            return None  # handed on, or stored: it runs where something else decides
        if argument is None:
            kinds.add(_guard_of_call(facts, call, path))
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


class _Index(NamedTuple):
    """A caller file's names, read in one walk (each function and method of a module asks its callers again)."""

    defined: set[str]  # its functions' and classes' names
    names: dict[str, list[ast.Name]]
    attributes: dict[str, list[ast.Attribute]]  # by attribute name
    made: list[ast.Assign]  # assignments of a call's result


@functools.lru_cache(maxsize=16)
def _index(path: Path) -> _Index | None:
    facts = _facts_of(path)
    if facts is None:
        return None
    index = _Index(set(), collections.defaultdict(list), collections.defaultdict(list), [])
    for node in walk(facts.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            index.defined.add(node.name)
        elif isinstance(node, ast.Name):
            index.names[node.id].append(node)
        elif isinstance(node, ast.Attribute):
            index.attributes[node.attr].append(node)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            index.made.append(node)
    return index


@functools.lru_cache(maxsize=256)
def _tree_bindings(path: Path, script: Path, root: Path) -> dict[str, str]:
    """:func:`_bindings` of the caller ``path``'s whole tree, read once per module it is asked about."""
    facts = _facts_of(path)
    return (_bindings(facts.tree, path, script, root) or {}) if facts is not None else {}


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
