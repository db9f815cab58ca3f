"""Whether another file of a script's project calls a method or names a function: the evidence that a value
the file hands back (a ``DistributedSampler`` it returns, or a DataLoader holding one) is looked after by its
caller, or that a module's function runs at all.

    project_calls(Path("data/build.py"), "set_epoch")   # main.py has `data_loader_train.sampler.set_epoch(epoch)`
    project_names(Path("util/utils.py"), "save_checkpoint")   # False: no other file calls or imports it

Only a project whose root is marked (``.git``, ``pyproject.toml``, ``setup.py``, ``setup.cfg``) is searched: without
a marker nothing says where the project ends, and the answer is False. Bounded: at most ``_MAX_FILES`` Python files
of at most ``MAX_BYTES`` each, hidden and virtual-environment directories skipped; the files' list is read once
per project.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path

from paratrain.diagnostics.project_imports import ROOT_MARKERS, read_small_file

_MAX_FILES = 600
_SKIPPED = {"node_modules", "site-packages", "build", "dist", "venv", "env", "__pycache__"}


def project_calls(script: Path, method: str) -> bool:
    """Some Python file of ``script``'s project, other than the script, has ``.method(`` in its text."""
    root = marked_root(script.resolve())
    if root is None:
        return False
    needle = f".{method}(".encode()
    return any(needle in (read_small_file(path) or b"") for path in python_files_near(script, root)
               if path != script.resolve())


def project_names(script: Path, name: str) -> bool | None:
    """Some file of ``script``'s project other than the script may use its function ``name``: imports it
    (``from util.utils import name``), calls it bare (after a star import), calls it through the module's name or an
    alias of it (``utils.name(``, ``import util.utils as U`` … ``U.name``), names it in a string (``getattr``,
    a registry), or a packaging file names it (a console script in ``pyproject.toml``/``setup.cfg``). A word
    that only names something else (``args.save``, ``torch.save(``) is no use. None when nothing marks the
    project's root (nothing says which files are the project's), or when no other file imports the script's
    module: then it is a program of its own, whose functions may be run in ways no file shows."""
    used = _names_used_elsewhere(script.resolve())
    return None if used is None else name.encode() in used


@functools.lru_cache(maxsize=4)
def _names_used_elsewhere(script: Path) -> frozenset[bytes] | None:
    """Every name the other files of ``script``'s marked project may use as one of its functions (the forms
    :func:`project_names` lists), read once per script: a check asks for many names."""
    root = marked_root(script)
    if root is None:
        return None
    files = [path for path in python_files_near(script, root) if path != script] + [
        root / "pyproject.toml", root / "setup.cfg"]
    texts = [read_small_file(path) or b"" for path in files]
    text = b"\n".join(texts)
    stem = re.escape(script.stem.encode())
    aliases = {script.stem.encode(), *re.findall(rb"\b" + stem + rb"\s+as\s+(\w+)", text)}
    imports = re.findall(rb"\bimport\s*\(([^)]*)\)", text) + re.findall(rb"\bimport\b([^\n]*)", text)
    imports += re.findall(rb"\bfrom\s+([\w.]+)\s+import\b", text)  # `from trainer import gather` imports trainer
    used = {word for names in imports for word in re.findall(rb"\w+", names)}
    if script.stem.encode() not in used:
        return None
    for other in texts:  # a bare call of a function the calling file defines itself calls its own
        used.update(set(re.findall(rb"(?<![\w.])(\w+)\s*\(", other)) - set(re.findall(rb"\bdef\s+(\w+)", other)))
    used.update(re.findall(rb"['\"](\w+)['\"]", text))
    used.update(re.findall(rb"\b(?:" + b"|".join(re.escape(a) for a in sorted(aliases)) + rb")\.(\w+)", text))
    return frozenset(used)


def named_in_configurations(script: Path, name: str) -> bool:
    """A YAML, JSON or TOML file of ``script``'s marked project holds the word ``name`` (a class a configuration
    builds: Hydra's ``_target_``, LightningCLI's ``class_path``). True when nothing marks the root."""
    root = marked_root(script.resolve())
    return root is None or name.encode() in _configuration_words(root)


@functools.lru_cache(maxsize=4)
def _configuration_words(root: Path) -> frozenset[bytes]:
    """Every word of the YAML, JSON and TOML files under ``root``, read once per project (a check asks per class)."""
    return frozenset(word for path in project_files(root, (".yaml", ".yml", ".json", ".toml"))
                     for word in re.findall(rb"\w+", read_small_file(path) or b""))


def imported_elsewhere(script: Path) -> bool:
    """Another file of ``script``'s marked project imports its module (it runs inside that file's process)."""
    return _names_used_elsewhere(script.resolve()) is not None


def called_only_here(script: Path, name: str, method: bool) -> bool:
    """No other file of ``script``'s marked project may call its function ``name`` (:func:`project_names`; a method:
    nor ``.name(``): a program no other file imports counts, as its functions run only as it calls them. False
    when nothing marks the project's root."""
    if marked_root(script.resolve()) is None or project_names(script, name) is True:
        return False
    return not (method and project_calls(script, name))


_REPLACES_PRINT = re.compile(rb"^[ \t]+(?:builtins|__builtin__)\.print\s*=", re.MULTILINE)
_RANK_WORD = re.compile(r"rank|main|master|primary")


@functools.lru_cache(maxsize=4)
def project_quiets_print(script: Path) -> tuple[ast.Module, ...]:
    """The files of ``script``'s marked project that replace builtins.print inside a function that reads a rank test
    (DETR's ``setup_for_distributed(is_master)``, D-FINE's ``setup_print(is_main)``) that a program of the project
    runs (:func:`_run_from_a_program`), parsed: the project quiets print on the other ranks for the rest of a run.
    Empty when none does, or without a root marker."""
    root = marked_root(script.resolve())
    if root is None:
        return ()
    texts = [read_small_file(path) or b"" for path in python_files_near(script, root)]
    quieting: list[ast.Module] = []
    for text in (text for text in texts if _REPLACES_PRINT.search(text)):
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        replacers = {function.name.encode() for function in ast.walk(tree)
                     if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and _RANK_WORD.search(ast.unparse(function))
                     and any(isinstance(node, ast.Assign) and any(
                         ast.unparse(t) in ("builtins.print", "__builtin__.print") for t in node.targets)
                         for node in ast.walk(function))}
        if _run_from_a_program(replacers, texts):
            quieting.append(tree)
    return tuple(quieting)


def _run_from_a_program(names: set[bytes], texts: list[bytes], depth: int = 0) -> bool:
    """A call of one of the functions ``names`` is made outside any function of the project (a program's top level
    or main block), or in a function of which that holds, followed ``depth`` < 4 levels up: Stark's copy of DETR's
    ``setup_for_distributed`` is called by an ``init_distributed_mode`` nothing calls, so it never runs."""
    if not names or depth > 3:
        return False
    called = re.compile(rb"(?<!def )\b(?:" + b"|".join(re.escape(name) for name in sorted(names)) + rb")\s*\(")
    callers: set[bytes] = set()
    for text in (text for text in texts if called.search(text)):
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for call, function in _calls_with_their_function(tree):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            if name.encode() in names:
                if function is None:
                    return True
                callers.add(function.encode())
    return _run_from_a_program(callers - names, texts, depth + 1)


def _calls_with_their_function(node: ast.AST, function: str | None = None):
    """Every call under ``node`` with the name of the innermost function that holds it (None outside any)."""
    for child in ast.iter_child_nodes(node):
        inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
        if isinstance(child, ast.Call):
            yield child, function
        yield from _calls_with_their_function(child, inner)


def marked_root(script: Path) -> Path | None:
    """The nearest directory above ``script`` that a root marker names its project's (``.git``, ``pyproject.toml``…)."""
    for directory in script.parents:
        if any((directory / marker).exists() for marker in ROOT_MARKERS):
            return directory
    return None


def python_files_near(script: Path, root: Path) -> tuple[Path, ...]:
    """:func:`python_files` of ``root``, those under ``script``'s own top folder of it first: the cap must not leave
    out the script's neighbours when another folder holds more files than it (VMamba's ``analyze/`` has ~1 000,
    before ``classification/``, whose ``main.py`` sets the epoch of the sampler ``data/build.py`` makes)."""
    try:
        parts = script.resolve().relative_to(root).parts
    except ValueError:  # not under root (a root given for another path): no neighbours to put first
        parts = ()
    near = project_files(root / parts[0], (".py",)) if len(parts) > 1 else ()
    return tuple(dict.fromkeys((*near, *python_files(root))))[:_MAX_FILES]


def python_files(root: Path) -> tuple[Path, ...]:
    """The project's Python files under ``root``, in a stable order: at most ``_MAX_FILES``, hidden and
    virtual-environment directories skipped; listed once per root."""
    return project_files(root, (".py",))


@functools.lru_cache(maxsize=16)
def project_files(root: Path, suffixes: tuple[str, ...]) -> tuple[Path, ...]:
    """The project's files under ``root`` whose names end in one of ``suffixes`` (``(".yaml", ".yml")`` for its
    configurations), as :func:`python_files` lists them."""
    found: list[Path] = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if not d.startswith(".") and d not in _SKIPPED)
        found.extend(Path(directory) / name for name in sorted(files) if name.endswith(suffixes))
        if len(found) >= _MAX_FILES:
            break
    return tuple(found[:_MAX_FILES])
