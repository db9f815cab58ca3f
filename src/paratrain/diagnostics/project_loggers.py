"""How a logger helper of the project sets up its logger, read for :mod:`paratrain.diagnostics.project_facts`.

A helper (``setup_logger``, ``init_logger``, ``create_logger``) either chooses the level or the handlers by rank,
writes the rank on every line, or gives every process a verbose level and a console handler; these functions
tell which from its body (and its module's, for a handler made at import). Anything else is unknown.
"""

from __future__ import annotations

import ast
import re

from paratrain.diagnostics.assigned_values import assigned_in
from paratrain.diagnostics.call_names import keyword, last_name
from paratrain.diagnostics.project_imports import Module
from paratrain.diagnostics.project_logs import module_bindings
from paratrain.diagnostics.tree_walk import walk

_VERBOSE_LEVEL = re.compile(r"\b(?:INFO|DEBUG|NOTSET)\b|^(?:10|20)$")
_RANK_WORD = re.compile(r"rank|main|master|process_index|primary")
_Function = ast.FunctionDef | ast.AsyncFunctionDef


def chooses_by_rank(function: _Function, setups: list[ast.Call]) -> bool:
    """A level or handler depends on the rank: a rank in a setup call (``setLevel(INFO if rank == 0 else
    WARN)``), a test of a rank around one (``if dist_rank == 0: logger.addHandler(console)``), or an early
    return on a rank before them (``if distributed_rank > 0: return logger``). A test that only names a file
    per rank (``if rank > 0: filepath = f"{filepath}-{rank}"``) leaves the console as it is.

    Invariant: a bare ``return`` under a rank test chooses nothing when the function sets up no logger at all
    (mistral-finetune's ``MetricsLogger.log``: ``if not self.is_master: return`` before writing metrics): it
    skips its own work off the main process and leaves every logger's level and handlers as they were; a
    returned value (another logger by rank) still counts as a choice."""
    console = [s for s in setups if "FileHandler" not in ast.unparse(s)
               and not any("FileHandler" in ast.unparse(v) for n in walk(s) if isinstance(n, ast.Name)
                           for v in assigned_in(function, n.id))]
    if any(_RANK_WORD.search(ast.unparse(setup)) for setup in console):
        return True
    for test in (node for node in walk(function) if isinstance(node, ast.If) and _RANK_WORD.search(ast.unparse(node.test))):
        inside = {id(node) for node in walk(test)}
        returns = [node for node in walk(test) if isinstance(node, ast.Return)]
        if any(id(setup) in inside for setup in console) or any(setups or ret.value is not None for ret in returns):
            return True
    return False


def tags_the_rank(module: Module, function: _Function) -> bool:
    """The handlers' formatter writes the rank on every line: a format string naming it
    (``Formatter("%(asctime)s [rank {rank}] %(message)s")``), or a ``logging.Formatter`` subclass of the
    module that reads it (lingua's ``LogFormatter``): one line per rank, told apart on purpose."""
    formatters = [node.args[0] for node in walk(function) if isinstance(node, ast.Call)
                  and last_name(node) == "setFormatter" and node.args]
    tagging = {cls.name for cls in walk(module.tree) if isinstance(cls, ast.ClassDef)
               and any(last_name(base) == "Formatter" for base in cls.bases) and "rank" in ast.unparse(cls).lower()}
    made = [value for f in formatters for value in ([f] if not isinstance(f, ast.Name) else assigned_in(function, f.id))]
    return any(isinstance(value, ast.Call) and (last_name(value) in tagging or (
        last_name(value) == "Formatter" and "rank" in ast.unparse(value).lower())) for value in made)


def makes_logger(function: _Function) -> bool:
    """Named for logging (``setup_logger``, ``get_logger``) or returning a logger (``return logger``,
    ``return logger, out_dir``): a helper whose logging set-up is its job, not a whole training run's."""
    returned = [node.value for node in walk(function) if isinstance(node, ast.Return) and node.value is not None]
    names = [item for value in returned for item in (value.elts if isinstance(value, ast.Tuple) else [value])]
    return "log" in function.name.lower() or any(isinstance(n, ast.Name) and "log" in n.id.lower() for n in names)


def console_handler_of_module(module: Module, add: ast.Call) -> bool:
    """``logger.addHandler(_default_handler)`` with ``_default_handler`` the module's own console handler, made
    at its top or by a function that declares it ``global`` (``None`` until then)."""
    if not (add.args and isinstance(add.args[0], ast.Name)):
        return False
    values = module_bindings(module.tree).get(add.args[0].id, [])
    made = [v for v in values if not (isinstance(v, ast.Constant) and v.value is None)]
    return bool(made) and all(isinstance(v, ast.Call) and last_name(v) == "StreamHandler" and to_console(v) for v in made)


def to_console(handler: ast.Call) -> bool:
    """``StreamHandler()``, ``StreamHandler(sys.stdout)``, ``StreamHandler(stream=sys.stderr)``."""
    given = handler.args[:1] + [kw.value for kw in handler.keywords if kw.arg == "stream"]
    return all(re.fullmatch(r"(?:sys\.)?std(?:out|err)", ast.unparse(value)) for value in given)


def verbose_level(function: _Function, setup: ast.Call) -> bool:
    """The level set is INFO or lower: written so, or a parameter of the function defaulting to it
    (``def get_logger(name, level=logging.DEBUG)``)."""
    level = setup.args[0] if last_name(setup) == "setLevel" and setup.args else keyword(setup, "level")
    if level is None:
        return False
    if isinstance(level, ast.Name):
        arguments = function.args
        positional = arguments.posonlyargs + arguments.args
        defaults = dict(zip([a.arg for a in positional][len(positional) - len(arguments.defaults):], arguments.defaults))
        defaults.update({a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None})
        level = defaults.get(level.id, level)
    return bool(_VERBOSE_LEVEL.search(ast.unparse(level)))


def verbose_text(level: str) -> bool:
    """A level written as INFO or lower (``logging.INFO``, ``"DEBUG"``, ``20``)."""
    return bool(_VERBOSE_LEVEL.search(level.strip("'\"")))


def level_parameter(function: _Function, setup: ast.Call) -> tuple[int, str] | None:
    """The parameter of ``function`` (its place among the positional ones, its name) that the level of ``setup`` is,
    when it has no default: the caller chooses the level (Uni3D's ``setup_logging(log_file, level)``, called with
    ``logging.DEBUG if args.debug else logging.INFO``); None otherwise."""
    level = setup.args[0] if last_name(setup) == "setLevel" and setup.args else keyword(setup, "level")
    if not isinstance(level, ast.Name):
        return None
    arguments = function.args
    positional = [a.arg for a in arguments.posonlyargs + arguments.args]
    without_default = positional[:len(positional) - len(arguments.defaults)]
    if level.id not in without_default:
        return None
    place = positional.index(level.id) - (1 if positional[:1] in (["self"], ["cls"]) else 0)
    return place, level.id


def returned_index(function: _Function) -> int | None:
    """Where the logger is in what the function returns: None for the value itself (or nothing), the index
    of the item named like a logger in a returned tuple (HRNet's ``return logger, out_dir, tb_dir``)."""
    for ret in (n for n in walk(function) if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)):
        for index, item in enumerate(ret.value.elts):
            if isinstance(item, ast.Name) and "log" in item.id.lower():
                return index
        return -1  # a tuple without a logger in it: nothing to follow
    return None
