"""``paratrain check``'s rules for logging on every rank: ``logging`` and loguru, each message once per process.

Quiet where the script (or a function of its project it calls) already tells the ranks apart: a level or handler
chosen by rank, a library's rank-aware setup, a line that names its process, stdout sent to /dev/null. Split from
:mod:`.check_output` (print), whose gates these rules share.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from paratrain.diagnostics.call_names import keyword
from paratrain.diagnostics.check_finding import Finding
from paratrain.diagnostics.check_output import (
    calls_by_file,
    first_of,
    handling_an_exception,
    also_lines,
    rank_tagged,
)
from paratrain.diagnostics.dead_code import never_runs
from paratrain.diagnostics.print_silencing import print_silenced
from paratrain.diagnostics.script_facts import ScriptFacts, last_name
from paratrain.diagnostics.tree_walk import walk
from paratrain.diagnostics.unreached_methods import unreached_method

# ---- logging on every rank ----------------------------------------------------------------------
# A logging setup that already tells the ranks apart: a level or handler chosen by rank (HF's
# `training_args.get_process_log_level()`, `setLevel(INFO if is_main else WARN)`), a logger made by a
# helper that takes the rank (Swin's `create_logger(dist_rank=…)`, detectron2's `setup_logger`).
_RANK_AWARE_LOG_SETUP = re.compile(r"get_process_log_level|should_log")
_LOG_SETUP_CALLS = ("basicConfig", "setLevel", "set_verbosity", "addHandler", "disable")
VERBOSE_LEVEL = re.compile(r"\b(?:INFO|DEBUG|NOTSET)\b|^(?:10|20)$|^['\"](?:INFO|DEBUG)['\"]$")
_CONSOLE = re.compile(r"(?:sys\.)?std(?:out|err)")
_LOGGER_HELPER = re.compile(r"(?:setup|init|create|get|make)_?log\w*|setup_logging|\w*_logger", re.IGNORECASE)


def _loggers(facts: ScriptFacts) -> set[str] | None:
    """Names of the stdlib loggers the script writes to (``logging`` itself, ``logging.getLogger(...)``, what a
    project's helper that sets INFO and a console handler on every rank returns); None when the script's
    logging is rank-aware or made somewhere this reading cannot see."""
    if facts.mentions(_RANK_AWARE_LOG_SETUP.pattern):
        return None
    imported = facts.imported
    if imported.levels_chosen_by_importer or any(imported.callee(call) in imported.rank_aware_loggers
                                                 for call in facts.calls):
        return None
    # A helper's `basicConfig(level=INFO)` sets the level only where no handler was set up before. A module that is
    # not an entry point is run by another one (I-JEPA's app/main.py imports it after setting the root's level by
    # rank): what its helper's setup then changes is not known, so the helper proves nothing.
    entry_point = facts.runs_as_program()
    returned = dict(imported.every_rank_loggers)  # callee → where its logger is in what it returns
    leveled = {}  # the calls of helpers whose console handler gets the level the call passes → that level's values
    for call in facts.calls:
        spec = imported.loggers_at_callers_level.get(imported.callee(call))
        levels = _level_passed(facts, call, *spec[1:]) if spec is not None and entry_point else []
        if levels:
            leveled[call] = levels
            returned[imported.callee(call)] = spec[0]
    if any(_RANK_WORD.search(ast.unparse(level)) or facts.guard(level) for levels in leveled.values() for level in levels):
        return None  # `setup_logging(path, INFO if rank == 0 else WARN)`: chosen by rank
    helpers = [call for call in facts.calls if entry_point and (
        imported.callee(call) in imported.every_rank_loggers
        or call in leveled and any(VERBOSE_LEVEL.search(ast.unparse(level)) for level in leveled[call]))]
    setups = facts.calls_named(*_LOG_SETUP_CALLS)
    if any(_rank_chosen(facts, call) for call in setups):
        return None
    # Without a visible level of INFO or lower, info() is dropped (the default level is WARNING), or
    # the handlers are set up in another file this reading cannot see.
    if not helpers and not any(re.search(r"INFO|DEBUG|NOTSET|\b(?:10|20)\b", ast.unparse(call)) for call in setups):
        return None
    # A logger helper of a library or of the project, called anywhere (`logger = get_logger(...)`, or
    # detectron2's `setup_logger()` on its own line), that was not read as one for every rank: it may
    # choose handlers by rank (accelerate's and detectron2's do), where this reading cannot see; not one of the
    # project read and found to call nothing of logging (a Lightning logger's maker). One called in
    # the launcher's parent only (HigherHRNet's `create_logger` before `mp.spawn`) sets up the parent's loggers:
    # the spawned workers are fresh interpreters that do not run that code, so it cannot change their logging.
    # A function of the script itself is read here, whatever its name (CLIP4Clip's `set_seed_logger`).
    if any(_LOGGER_HELPER.fullmatch(last_name(call)) and last_name(call) != "getLogger" and call not in helpers
           and not (isinstance(call.func, ast.Name) and call.func.id in facts.own_functions)
           and imported.callee(call) not in imported.logging_free and not facts.in_launcher(call)
           for call in facts.calls):
        return None
    names = {"logging"} if facts.modules.get("logging") == "logging" else set()
    for name, values in facts.assigned.items():
        names.update(name for value in values
                     if isinstance(value, ast.Call) and facts.full_name(value) == "logging.getLogger"
                     or value in helpers and returned[imported.callee(value)] is None)
    for call in helpers:  # `logger, out_dir, tb_dir = create_logger(...)` (HRNet)
        index = returned[imported.callee(call)]
        assign = facts.parents.get(call)
        if index is not None and index >= 0 and isinstance(assign, ast.Assign) and isinstance(assign.targets[0], ast.Tuple):
            items = assign.targets[0].elts
            if index < len(items) and isinstance(items[index], (ast.Name, ast.Attribute)):
                names.add(ast.unparse(items[index]))
    return names


def _level_passed(facts: ScriptFacts, call: ast.Call, place: int, name: str) -> list[ast.expr]:
    """The values the level a call passes may have: the argument at ``place`` (or named ``name``) as written, or
    what the script assigns to it (``args.log_level = logging.DEBUG if args.debug else logging.INFO``); none
    when the call does not pass it plainly (``*args``)."""
    given = keyword(call, name)
    if given is None and place < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:place + 1]):
        given = call.args[place]
    if given is None:
        return []
    return facts.assigned.get(ast.unparse(given), [given]) if isinstance(given, (ast.Name, ast.Attribute)) else [given]


def _loggers_verbose_of_their_own(facts: ScriptFacts) -> set[str]:
    """Loggers the script makes at its top (``logger = logging.getLogger(__name__)``) and sets to INFO or DEBUG
    there itself (``logger.setLevel(logging.INFO)``), in a script run as the program whose ``basicConfig`` runs in
    every process, whatever level it gives (MeZO's ``level=INFO if local_rank in [-1, 0] else WARN``).

    Invariant: a logger's own level decides whether ``info()`` makes a record, and a record it makes is handed to
    every handler up to the root's whatever the root's level: ``basicConfig`` sets the root's level, not its
    handler's, so a level chosen by rank there does not quiet these loggers on the other ranks. Left out: any
    other level, handler or ``propagate`` set on the logger, a ``basicConfig`` under a rank test or to a file, a
    ``logging.disable``, a rank-aware setup of a library or helper (:data:`_RANK_AWARE_LOG_SETUP`)."""
    if not _root_handler_everywhere(facts):
        return set()
    made = {stmt.targets[0].id for stmt in facts.tree.body
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call) and facts.full_name(stmt.value) == "logging.getLogger"}
    verbose_here = {ast.unparse(stmt.value.func.value) for stmt in facts.tree.body
                    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                    and last_name(stmt.value) == "setLevel" and isinstance(stmt.value.func, ast.Attribute)
                    and stmt.value.args and VERBOSE_LEVEL.search(ast.unparse(stmt.value.args[0]))}
    found = set()
    for name in made & verbose_here:
        touched = [node for node in walk(facts.tree)
                   if isinstance(node, ast.Attribute) and ast.unparse(node.value) == name
                   and node.attr in ("setLevel", "addHandler", "handlers", "propagate", "disabled", "addFilter")]
        if len(touched) == 1 and len(facts.assigned.get(name, [])) == 1:  # its one setLevel, made once
            found.add(name)
    return found


def _root_handler_everywhere(facts: ScriptFacts) -> bool:
    """The script, run as the program, gives the root logger a console handler in every process: its
    ``basicConfig`` calls run under no rank test and none writes to a file (whatever level each gives); nothing
    disables logging, and no library's rank-aware setup (:data:`_RANK_AWARE_LOG_SETUP`) is in play."""
    if not facts.runs_as_program() or facts.mentions(_RANK_AWARE_LOG_SETUP.pattern) or facts.calls_named("disable"):
        return False
    configs = facts.calls_named("basicConfig")
    return bool(configs) and not any(facts.guard(call) or keyword(call, "filename") is not None for call in configs)


_RANK_WORD = re.compile(r"rank|main|master|process_index|primary")


def _rank_chosen(facts: ScriptFacts, setup: ast.Call) -> bool:
    """The level (or handler) of this setup call depends on the rank: a rank in the call
    (``setLevel(INFO if rank == 0 else WARN)``), the call under a rank test (``if rank == 0:
    logger.setLevel(INFO) else: logger.setLevel(ERROR)``), or a name it reads that is assigned so
    (``if rank == 0: level = INFO``)."""
    if _RANK_WORD.search(ast.unparse(setup)) or facts.guard(setup):
        return True
    names = {node.id for node in walk(setup) if isinstance(node, ast.Name)}
    return any(_RANK_WORD.search(ast.unparse(value)) or facts.guard(value)
               for name in names for value in facts.assigned.get(name, []))


def _loguru_loggers(facts: ScriptFacts) -> set[str]:
    """``from loguru import logger``: its default sink writes DEBUG and up to stderr in every process, until
    the script removes it (``logger.remove()``: then it chooses the sinks, which this reading does not follow)
    or adds a sink under a rank test."""
    names = _loguru_names(facts)
    sinks = [call for call in facts.calls_named("remove", "add", "configure")
             if isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) in names]
    if any(last_name(call) in ("remove", "configure") or _rank_chosen(facts, call) for call in sinks):
        return set()
    if _logger_helper_called(facts):
        return set()
    return names


def _loguru_names(facts: ScriptFacts) -> set[str]:
    return {name for name, module in facts.modules.items() if module == "loguru.logger"}


def _logger_helper_called(facts: ScriptFacts) -> bool:
    """A logger helper (YOLOX's `setup_logger(distributed_rank=rank)`) may choose the sinks by rank."""
    return any(_LOGGER_HELPER.fullmatch(last_name(call)) and last_name(call) != "getLogger" for call in facts.calls)


def _loguru_lines_before_sinks(facts: ScriptFacts) -> set[ast.Call]:
    """``logger.info(...)`` / ``debug`` lines of loguru that run before the script chooses its sinks: every
    ``remove()`` / ``configure()`` / ``add()`` of that logger is in the same function as the line and after it
    (GaLore's ``logger.info("Process group initialized")`` before ``if global_rank != 0: logger.remove()``).

    Invariant: loguru's default stderr sink is on in every process until the first sink call runs, so a
    line the same function runs before any of them writes once per rank, whatever those calls do later.
    A sink call in another function (which may run first) leaves the order unknown: then nothing is said.
    """
    names = _loguru_names(facts)
    if not names or _logger_helper_called(facts):
        return set()
    sinks = [sink for sink in facts.calls_named("remove", "add", "configure")
             if isinstance(sink.func, ast.Attribute) and ast.unparse(sink.func.value) in names]
    if not sinks or len({facts.scope(sink) for sink in sinks}) != 1:
        return set()
    scope = facts.scope(sinks[0])
    return {call for call in facts.calls_named("info", "debug")
            if isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) in names
            and facts.scope(call) is scope
            and all(sink.lineno > call.end_lineno and not _in_loop_around(facts, sink, call) for sink in sinks)}


def _in_loop_around(facts: ScriptFacts, sink: ast.Call, call: ast.Call) -> bool:
    """``sink`` sits in a loop that also holds ``call``: a later pass may run it before the call."""
    parent = facts.parents.get(sink)
    while parent is not None and parent is not facts.scope(sink):
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)) and any(node is call for node in walk(parent)):
            return True
        parent = facts.parents.get(parent)
    return False


def verbose_console_setup(call: ast.Call) -> bool:
    """``logging.basicConfig(level=INFO)``, with ``stream=sys.stdout`` or ``handlers=[StreamHandler(sys.stdout)]``
    at most: INFO lines of every logger that reaches the root logger go to the console."""
    if last_name(call) != "basicConfig" or keyword(call, "filename") is not None:
        return False
    level, handlers = keyword(call, "level"), keyword(call, "handlers")
    if level is None or not VERBOSE_LEVEL.search(ast.unparse(level)):
        return False
    if handlers is None:
        return True
    return isinstance(handlers, (ast.List, ast.Tuple)) and all(
        isinstance(h, ast.Call) and last_name(h) == "StreamHandler"
        and all(_CONSOLE.fullmatch(ast.unparse(a)) for a in h.args[:1]) for h in handlers.elts)


def _root_verbose(facts: ScriptFacts) -> bool:
    """The root logger writes INFO to the console in every process: a module of the project set it so at import,
    or the script does, under no rank test; and nothing in the script sets up the root logger otherwise
    (another level, a rank-aware setup, a project helper that chooses by rank): that would be an unknown.

    Only for a script run as the program (its ``if __name__ == "__main__":``): ``basicConfig`` does nothing once
    the root logger has a handler, so a module that a launcher of the project imports (I-JEPA's ``app/main.py``,
    which sets the level by rank first) logs as that launcher chose."""
    imported = facts.imported
    if facts.main_block() is None or facts.mentions(_RANK_AWARE_LOG_SETUP.pattern) or any(
            imported.callee(call) in imported.rank_aware_loggers for call in facts.calls):
        return False
    verbose = [call for call in facts.calls_named("basicConfig") if verbose_console_setup(call)
               and not facts.guard(call) and not _rank_chosen(facts, call)]
    others = [call for call in facts.calls_named(*_LOG_SETUP_CALLS) if call not in verbose and not _named_logger(call)]
    return not others and (imported.root_verbose_at_import or bool(verbose))


def _named_logger(setup: ast.Call) -> bool:
    """``logging.getLogger("matplotlib").setLevel(logging.WARNING)``: a named logger's own setup, not the root's."""
    receiver = setup.func.value if isinstance(setup.func, ast.Attribute) else None
    return (isinstance(receiver, ast.Call) and last_name(receiver) == "getLogger" and bool(receiver.args)
            and isinstance(receiver.args[0], ast.Constant) and bool(receiver.args[0].value))


def project_call_logs(facts: ScriptFacts) -> Iterator[Finding]:
    """A call into the script's own project that logs at INFO in every process that makes it
    (:mod:`paratrain.diagnostics.project_logs`), made on every rank: reported at the script's first such call,
    the others named in it; as the script's own logging, one finding per script, and none where that is reported.

    Invariant: the gates of the script's own logging (a multi-process script, stdout not silenced, the call under
    no rank test, not in a launcher's parent nor an ``except`` block), the callee's line proved to run on the way
    from that call, and its logger proved verbose on every rank: its own console handler, the root logger's
    (:func:`_root_verbose`), or its own level of INFO with a root handler in every process
    (:func:`_root_handler_everywhere`, whatever the root's level).
    """
    if not facts.distributed or print_silenced(facts) or next(log_on_every_rank(facts), None) is not None:
        return
    heard = heard_here(facts)
    logging = {callee: where for callee, where in facts.imported.every_rank_logs.items() if heard[where[2]]}
    groups = calls_by_file(facts, logging, lambda call: not handling_an_exception(facts, call)
                            and not never_runs(facts, call))
    if groups:
        _, path, line = min(groups, key=lambda group: (group[0][0].lineno, group[0][0].col_offset))
        calls = sorted((call for group in groups for call in group[0]), key=lambda call: (call.lineno, call.col_offset))
        first = calls[0]
        if logging[facts.imported.callee(first)][2] == "level" and not heard["root"]:
            how, fix = ("its module sets that logger to INFO itself, and the root logger's handler in every process "
                        "writes what it makes", "drop that logger's own setLevel(INFO) (the root's level by rank then "
                        "applies to it), or call it on rank 0 only")
        else:
            how, fix = ("a console handler at INFO in every process", "set the logging level by rank where the "
                        "handler is set up (INFO on rank 0, WARNING elsewhere), or call it on rank 0 only")
        yield Finding(
            first.lineno, "log-on-every-rank",
            f"`{facts.imported.callee(first)}` logs on every rank ({path}:{line}, {how}, no rank test on the way): "
            f"each message appears once per process, interleaved{also_lines(calls)}", fix,
        )


def heard_here(facts: ScriptFacts) -> dict[str, bool]:
    """For each way a project's logging line is heard (:mod:`~paratrain.diagnostics.project_logs`: its logger's own
    console handler, the root logger's, or its own INFO level through the root's handler), whether the script's
    processes hear it: the root logger verbose in every process (:func:`_root_verbose`), or a root handler in every
    process (:func:`_root_handler_everywhere`, whatever the root's level)."""
    root = _root_verbose(facts)
    return {"own": True, "root": root, "level": root or _root_handler_everywhere(facts)}


def log_on_every_rank(facts: ScriptFacts) -> Iterator[Finding]:
    if not facts.distributed or print_silenced(facts):
        return
    loggers = (_loggers(facts) or set()) | _loguru_loggers(facts)
    early = _loguru_lines_before_sinks(facts)
    own_level = _loggers_verbose_of_their_own(facts) - loggers
    named = loggers | own_level
    # `debug()` is heard only where a setup of the file says DEBUG (or lower): at INFO it makes no record (fairchem's
    # `setup_logging` sets INFO; its `logging.debug(...)` lines write nothing). loguru's default sink takes DEBUG.
    debug = any(re.search(r"DEBUG|NOTSET|\b10\b", ast.unparse(call)) for call in facts.calls_named(*_LOG_SETUP_CALLS))
    logs = [call for call in facts.calls_named("info", "debug")  # the cheap test first: the gates cost
            if isinstance(call.func, ast.Attribute) and (ast.unparse(call.func.value) in named or call in early)
            and (call.func.attr == "info" or debug or call in early or ast.unparse(call.func.value) not in loggers)
            and _every_rank_line(facts, call)]
    yield from first_of(
        [call for call in logs if ast.unparse(call.func.value) in loggers or call in early],
        "log-on-every-rank", "logging writes on every rank: each message appears once per process, interleaved",
        "set the level by rank once: logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING) "
        "(loguru: logger.remove(), then logger.add(sys.stderr) on rank 0 only; or pt.print for messages on rank 0)",
    )
    for name in sorted(own_level):
        yield from first_of(
            [call for call in logs if ast.unparse(call.func.value) == name], "log-on-every-rank",
            f"`{name}.setLevel(...)` at the script's top makes `{name}` write INFO on every rank, whatever level "
            "basicConfig gives the root logger by rank: each message appears once per process, interleaved",
            f"drop `{name}.setLevel(...)` (the root's level by rank then applies to it), or set its level by rank",
        )


def _every_rank_line(facts: ScriptFacts, call: ast.Call) -> bool:
    """A logging call that runs in every process and does not tell its process's own state (see the gates)."""
    return (isinstance(call.func, ast.Attribute) and not facts.guard(call) and not facts.in_launcher(call)
            and not rank_tagged(call) and not handling_an_exception(facts, call)
            and not unreached_method(facts, call) and not never_runs(facts, call))
