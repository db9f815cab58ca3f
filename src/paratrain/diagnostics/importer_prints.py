"""Prints of a module that a multi-process script of its project runs on every rank.

    # dataset/dataloader.py                      # train.py (torch.distributed.launch --nproc_per_node=8)
    def get_loader(args):                        train_loader, train_sampler = get_loader(args)
        print('train len {}'.format(len(ds)))

Read alone, ``dataloader.py`` starts no process and joins no group: nothing says its prints run in several. Its
importers do: a script of the project that runs in several processes (it joins the group, is launched so, …) and
calls ``get_loader`` under no rank test runs the print once per process. The module's prints are reported where
they are written, naming the call that runs them.

Invariant: the same proof as a script's own report of that call (:func:`~paratrain.diagnostics.check_output.
project_call_prints`): the importer is multi-process, its print neither silenced nor replaced, the call under no rank
test and not in a launcher's parent, and every step from the call to the print runs in every process
(:class:`~paratrain.diagnostics.project_prints.ProjectPrints`). Only importers that run as programs, whose own text
shows several processes (:data:`_MULTI_PROCESS_TEXT`) and that call a function or class of the module holding a print
count, at most :data:`_MAX_IMPORTERS` of them; a module that is multi-process itself, or runs as a program, is judged
by its own reading.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from paratrain.diagnostics.check_finding import Finding
from paratrain.diagnostics.dead_code import never_runs
from paratrain.diagnostics.imported_names import ImportedNames
from paratrain.diagnostics.print_silencing import print_replaced, print_silenced
from paratrain.diagnostics.project_builders import ProjectBuilders
from paratrain.diagnostics.project_callers import importers
from paratrain.diagnostics.project_facts import read_project_facts
from paratrain.diagnostics.project_imports import ProjectImports
from paratrain.diagnostics.project_mentions import marked_root
from paratrain.diagnostics.project_prints import ProjectPrints
from paratrain.diagnostics.script_facts import ScriptFacts, last_name
from paratrain.diagnostics.tree_walk import walk

_MAX_IMPORTERS = 8
# What a multi-process program's own text shows (a process group, DDP, a sampler, a launcher's variables or flag, a
# library trainer): an importer without any is not read (parsing every importer would cost more than the check).
_MULTI_PROCESS_TEXT = re.compile(rb"init_process_group|DistributedDataParallel|DistributedSampler|torch\.distributed"
                                 rb"|LOCAL_RANK|WORLD_SIZE|local_rank|\bspawn\(|Trainer\(|Accelerator\(|Fabric\("
                                 rb"|deepspeed")


def prints_run_by_importers(facts: ScriptFacts) -> Iterator[Finding]:
    """One finding at the module's first print that an importer runs on every rank, the others named in it."""
    if facts.script is None or facts.distributed or not facts.calls_named("print") or facts.runs_as_program():
        return
    module = facts.script.resolve()
    printing = {node.name for node in facts.tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                and any(isinstance(call, ast.Call) and last_name(call) == "print" for call in walk(node))}
    if not printing:
        return
    reached: dict[int, str] = {}  # the module's print line → the call that runs it, as `file:line`
    for path, text in _candidates(module, printing):
        alone = _multi_process_program(text, path, ImportedNames())
        # Read alone, a program knows fewer of its rank tests (its project's helpers), never more: what it already
        # reads as guarded stays so. Read with its project (a check's largest cost) only when something is reached.
        if alone is None or not _reached_lines(alone, module, printing):
            continue
        importer = _multi_process_program(text, path, None)
        if importer is None or print_silenced(importer) or print_replaced(importer):
            continue
        for line, call in _reached_lines(importer, module, printing).items():
            reached.setdefault(line, f"{_shown(path, module)}:{call.lineno}")
    if not reached:
        return
    lines = sorted(reached)
    also = f" (also lines {', '.join(map(str, lines[1:]))})" if len(lines) > 1 else ""
    yield Finding(
        lines[0], "print-on-every-rank",
        f"print runs on every rank: {reached[lines[0]]} calls into this module in every process of a multi-process "
        f"run, with no rank test on the way; each line appears once per process, interleaved{also}",
        "print under `if dist.get_rank() == 0:` here (or pt.print), or make that call on rank 0 only",
    )


def _shown(path: Path, module: Path) -> str:
    """``path`` from the directory of ``module`` up that holds both (the project's root, for files of one project)."""
    root = marked_root(module)
    return path.relative_to(root).as_posix() if root is not None and root in path.parents else str(path)


def _reached_lines(importer: ScriptFacts, module: Path, names: set[str]) -> dict[int, ast.Call]:
    """The lines of ``module``'s prints that ``importer``'s calls of its functions and classes ``names`` run in every
    process (calls under no rank test, not in a launcher's parent), each with the first such call."""
    imports = ProjectImports(importer.script, importer.tree)
    prints = ProjectPrints(imports, ProjectBuilders(imports, importer))
    made: dict[str, list[ast.Call]] = {}
    for call in importer.calls:
        if (isinstance(call.func, (ast.Name, ast.Attribute)) and last_name(call) in names
                and (found := imports.definition(ImportedNames.callee(call))) is not None and found[0].path == module
                and not importer.guard(call) and not importer.in_launcher(call) and not never_runs(importer, call)):
            made.setdefault(ImportedNames.callee(call), []).append(call)
    return {line: calls[0] for callee, calls in made.items()
            for line in sorted(p.lineno for p in prints.every_reached_in(callee, module, calls))}


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
