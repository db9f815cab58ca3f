"""Prints and logging lines of a module that a multi-process program of its project runs on every rank.

    # dataset/dataloader.py                      # train.py (torch.distributed.launch --nproc_per_node=8)
    def get_loader(args):                        train_loader, train_sampler = get_loader(args)
        print('train len {}'.format(len(ds)))

Read alone, ``dataloader.py`` starts no process and joins no group: nothing says its lines run in several. Its
importers do: a program of the project that runs in several processes (it joins the group, is launched so, …) and
calls ``get_loader`` under no rank test runs the print once per process. The module's lines are reported where they
are written, naming the call that runs them; a logging line only where that program's processes hear it (its root
logger set to INFO with a console handler in every process, or the module's logger's own handler).

Invariant: the same proof as the program's own report of that call (:func:`~paratrain.diagnostics.check_output.
project_call_prints`, :func:`~paratrain.diagnostics.check_logs.project_call_logs`): the importer is multi-process,
its print neither silenced nor replaced, the call under no rank test and not in a launcher's parent, and every step
from the call to the line runs in every process (:class:`~paratrain.diagnostics.project_prints.ProjectPrints`). Only
importers that run as programs, whose own text shows several processes (:data:`_MULTI_PROCESS_TEXT`) and that call a
function or class of the module holding such a line count, at most :data:`_MAX_IMPORTERS` of them (and of those
at most :data:`_MAX_READ` read with their project: the bound keeps a check near its second). A module that runs
as a program is judged by its own reading; so are the prints of a module that is multi-process itself (its functions'
callers in the project read too), and its logging where that reading reports it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from paratrain.diagnostics.check_finding import Finding
from paratrain.diagnostics.check_logs import heard_here, log_on_every_rank, project_call_logs
from paratrain.diagnostics.dead_code import never_runs
from paratrain.diagnostics.imported_names import ImportedNames
from paratrain.diagnostics.print_silencing import print_replaced, print_silenced
from paratrain.diagnostics.project_builders import ProjectBuilders
from paratrain.diagnostics.project_callers import importers
from paratrain.diagnostics.project_facts import lines_reached_in, read_project_facts
from paratrain.diagnostics.project_imports import ProjectImports
from paratrain.diagnostics.project_mentions import marked_root
from paratrain.diagnostics.script_facts import ScriptFacts, last_name
from paratrain.diagnostics.tree_walk import walk

_MAX_IMPORTERS = 4  # importers read alone, in the order the project's files are listed
_MAX_READ = 2  # of those, read with their project: a check's largest cost
# What a multi-process program's own text shows (a process group, DDP, a sampler, a launcher's variables or flag, a
# library trainer): an importer without any is not read (parsing every importer would cost more than the check).
_MULTI_PROCESS_TEXT = re.compile(rb"init_process_group|DistributedDataParallel|DistributedSampler|torch\.distributed"
                                 rb"|LOCAL_RANK|WORLD_SIZE|local_rank|\bspawn\(|Trainer\(|Accelerator\(|Fabric\("
                                 rb"|deepspeed")
_LOG_LINES = ("info", "debug")


def prints_run_by_importers(facts: ScriptFacts) -> Iterator[Finding]:
    """One finding at the module's first print that an importer runs on every rank, the others named in it."""
    if facts.distributed:
        return  # its own reading judges its prints (with its functions' callers in the project)
    yield from _first_of(
        _lines_run_by_importers(facts)["print"], "print-on-every-rank",
        "print runs on every rank: {call} calls into this module in every process of a multi-process run, with no "
        "rank test on the way; each line appears once per process, interleaved",
        "print under `if dist.get_rank() == 0:` here (or pt.print), or make that call on rank 0 only")


def logs_run_by_importers(facts: ScriptFacts) -> Iterator[Finding]:
    """One finding at the module's first logging line that an importer runs, and hears, on every rank; none where
    the module's own reading reports its logging (a module sets up no logging of its own, as a rule: the program
    that imports it does, which is why its own reading rarely can)."""
    if facts.distributed and (next(log_on_every_rank(facts), None) or next(project_call_logs(facts), None)):
        return
    yield from _first_of(
        _lines_run_by_importers(facts)["log"], "log-on-every-rank",
        "logging writes on every rank: {call} calls into this module in every process of a multi-process run, whose "
        "logging writes INFO to the console in each, with no rank test on the way; each message appears once per "
        "process, interleaved",
        "set the logging level by rank where that program sets it up (INFO on rank 0, WARNING elsewhere), or make "
        "that call on rank 0 only")


def _first_of(reached: dict[int, str], rule: str, problem: str, fix: str) -> Iterator[Finding]:
    """One finding at the first of the ``reached`` lines (line → the call that runs it), naming that call in
    ``problem`` and the other lines after it."""
    if reached:
        lines = sorted(reached)
        others = f" (also lines {', '.join(map(str, lines[1:]))})" if len(lines) > 1 else ""
        yield Finding(lines[0], rule, problem.format(call=reached[lines[0]]) + others, fix)


def _is_line(call: ast.Call, prints: bool) -> bool:
    """A logging line, or (``prints``) a print."""
    return prints and last_name(call) == "print" or isinstance(call.func, ast.Attribute) and call.func.attr in _LOG_LINES


_last: tuple[ScriptFacts | None, dict[str, dict[int, str]]] = (None, {})  # both rules of one check ask


def _lines_run_by_importers(facts: ScriptFacts) -> dict[str, dict[int, str]]:
    """For ``"print"`` and ``"log"``: the module's lines of that kind that an importer runs and hears in every
    process, each with the importer's call that runs it, as ``file:line``. Read once per check."""
    global _last
    if _last[0] is not facts:
        _last = (facts, _read_importers(facts))
    return _last[1]


def _read_importers(facts: ScriptFacts) -> dict[str, dict[int, str]]:
    reached: dict[str, dict[int, str]] = {"print": {}, "log": {}}
    if facts.script is None or facts.runs_as_program():
        return reached
    # the module's functions and classes holding such a line, and those classes' methods that do (its prints only
    # when its own reading leaves them: it is not multi-process itself)
    prints = not facts.distributed
    tops = [node for node in facts.tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
            and any(isinstance(call, ast.Call) and _is_line(call, prints) for call in walk(node))]
    holding = {node.name for node in tops} | {
        method.name for cls in tops if isinstance(cls, ast.ClassDef) for method in cls.body
        if isinstance(method, ast.FunctionDef)
        and any(isinstance(call, ast.Call) and _is_line(call, prints) for call in walk(method))}
    if not holding:
        return reached
    module = facts.script.resolve()
    read = 0
    for path, text in _candidates(module, holding):
        alone = _multi_process_program(text, path, ImportedNames())
        # Read alone, a program knows fewer of its rank tests (its project's helpers), never more: what it already
        # reads as guarded stays so. Read with its project (a check's largest cost) only when something is reached.
        if alone is None or read == _MAX_READ or not _reached(alone, module, holding):
            continue
        read += 1
        importer = _multi_process_program(text, path, None)
        if importer is None or print_silenced(importer) or print_replaced(importer):
            continue
        heard = {"print": True, **heard_here(importer)}
        for line, (call, how) in _reached(importer, module, holding).items():
            if heard.get(how):
                reached["print" if how == "print" else "log"].setdefault(line, f"{_shown(path, module)}:{call.lineno}")
    return reached


def _reached(importer: ScriptFacts, module: Path, names: set[str]) -> dict[int, tuple[ast.Call, str]]:
    """The lines of ``module``'s prints and logging calls that ``importer``'s calls of its functions, classes and
    methods ``names`` run in every process (calls under no rank test, not in a launcher's parent), each with the
    first such call and how the line is heard (``"print"`` for a print)."""
    imports = ProjectImports(importer.script, importer.tree)
    builders = ProjectBuilders(imports, importer)
    made: dict[str, list[ast.Call]] = {}
    for call in importer.calls:
        if not (isinstance(call.func, (ast.Name, ast.Attribute)) and last_name(call) in names):
            continue
        # a function or class of the module, or a method of an object built from one
        callee = ImportedNames.callee(call)
        found = imports.definition(callee) or builders.method(callee)
        if (found is not None and found[0].path == module and not importer.guard(call)
                and not importer.in_launcher(call) and not never_runs(importer, call)):
            made.setdefault(callee, []).append(call)
    if not made:
        return {}
    return {line: (made[callee][0], how)
            for line, (callee, how) in lines_reached_in(importer, imports, module, made).items()}


def _shown(path: Path, module: Path) -> str:
    """``path`` from the project's root (``module``'s), as a finding names files."""
    root = marked_root(module)
    return path.relative_to(root).as_posix() if root is not None and root in path.parents else str(path)


def _candidates(module: Path, names: set[str]) -> list[tuple[Path, bytes]]:
    """The files importing ``module`` whose text may start processes and names one of ``names`` (the others are
    never parsed), at most :data:`_MAX_IMPORTERS`."""
    named = re.compile(rb"\b(?:" + b"|".join(re.escape(name.encode()) for name in sorted(names)) + rb")\b")
    found = importers(module, lambda text: bool(_MULTI_PROCESS_TEXT.search(text) and named.search(text)))
    return found[:_MAX_IMPORTERS]


def _multi_process_program(text: bytes, path: Path, imported: ImportedNames | None) -> ScriptFacts | None:
    """``path``'s facts, learnt with ``imported`` (None: read with its project, as a check of it would, for its rank
    tests and print silencing only), when it runs as a program in several processes; else None."""
    try:
        facts = ScriptFacts.read(text.decode("utf-8"))
    except (UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
        return None
    if not facts.runs_as_program():
        return None
    facts.learn(imported if imported is not None else read_project_facts(facts, path, guards_only=True), path)
    return facts if facts.distributed else None
