"""How a script quiets print on the ranks other than the first, and from which statement on.

DeiT/DINO/MAE/DETR's ``setup_for_distributed`` replaces builtins.print with one that prints on the main process
only; others send stdout to /dev/null. A replacement made by a call quiets what runs after that call: the prints
of the same function before it still run on every rank (:func:`runs_before`).
"""

from __future__ import annotations

import ast
import re

from paratrain.diagnostics.project_mentions import imported_elsewhere, project_quiets_print
from paratrain.diagnostics.script_facts import ScriptFacts, last_name
from paratrain.diagnostics.tree_walk import walk

# DeiT/DINO/MAE/DETR's shared `utils.init_distributed_mode(args)` reads RANK/LOCAL_RANK from the
# environment (args.gpu) and calls `setup_for_distributed(is_master)`, which replaces builtins.print
# on the other ranks: taken on its name where its file was not read.
PRINT_SILENCING_HELPERS = ("init_distributed_mode", "setup_for_distributed")
# `sys.stdout = open(os.devnull, "w")` (under a rank test) silences print, and logging to sys.stdout set up after it.
_PRINT_SILENCED = re.compile(r"builtins\.print\s*=|__builtin__\.print\s*=|sys\.stdout\s*=\s*open\(\s*os\.devnull")
_PRINT_KEYWORDS = ("sep", "end", "file", "flush")
_WORLD_SIZE = re.compile(r"(?:\w+\.)*(?:get_world_size\(\)|world_size)")


def open_above(node: ast.AST) -> int | None:
    """The job size above which the print that ``node`` puts in place of builtins.print lets every rank print:
    MAE's ``setup_for_distributed`` (copied by its many descendants) defines ``print`` with ``force = force or
    (get_world_size() > 8)`` and sets ``builtins.print = print``, so that a large job's ranks all report. Read in
    the replacing function only (``if world_size > 1:`` elsewhere says nothing of it). None without such a test."""
    replacing = {ast.unparse(node.value) for node in walk(node) if isinstance(node, ast.Assign)
                 and any(ast.unparse(target) in ("builtins.print", "__builtin__.print") for target in node.targets)}
    sizes = []
    for function in walk(node):
        if not (isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and function.name in replacing):
            continue
        for compare in (n for n in walk(function) if isinstance(n, ast.Compare) and len(n.ops) == 1):
            limit = compare.comparators[0]
            if (_WORLD_SIZE.fullmatch(ast.unparse(compare.left)) and isinstance(limit, ast.Constant)
                    and type(limit.value) is int and isinstance(compare.ops[0], (ast.Gt, ast.GtE))):
                sizes.append(limit.value - isinstance(compare.ops[0], ast.GtE))
    return min(sizes) if sizes else None


def print_replaced(facts: ScriptFacts) -> bool:
    """A ``print(..., force=True)`` (or any keyword builtins.print does not take) only runs once the
    project has replaced builtins.print, as DeiT's ``setup_for_distributed`` does to quiet the other
    ranks; the call would raise TypeError otherwise."""
    return any(kw.arg is not None and kw.arg not in _PRINT_KEYWORDS
               for call in facts.calls_named("print") if isinstance(call.func, ast.Name) for kw in call.keywords)


def own_print_binding(facts: ScriptFacts) -> ast.Assign | None:
    """The file's own module-level ``print = wrapper(print)``, made when it is imported (before any
    project quiets builtins.print), by a function of the file with no rank test in it: its calls of ``print`` write
    on every rank whatever replaces builtins.print later. UniTS's ``exp_pretrain.py`` binds ``print =
    custom_print_decorator(print)``, whose wrapper writes to ``sys.stdout`` itself. None without one."""
    defined = {node.name: node for node in facts.tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for node in facts.tree.body:
        if not (isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["print"]
                and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)):
            continue
        wrapper = defined.get(node.value.func.id)
        if (wrapper is not None and any(isinstance(a, ast.Name) and a.id == "print" for a in node.value.args)
                and not re.search(r"rank|is_main|is_master|main_process", ast.unparse(wrapper))):
            return node
    return None


def print_silenced(facts: ScriptFacts) -> bool:
    """The script, or a function of its project that it calls, replaces builtins.print or stdout for good. (A
    launcher of its project that mutes the other ranks is asked last, by ``check``: see ``ScriptFacts.muted_launch``.)"""
    imported = facts.imported
    return imported.print_replaced or (bool(_silencing_lines(facts)) and not _stdout_restored(facts)) or any(
        imported.callee(call) not in imported.read for call in facts.calls_named(*PRINT_SILENCING_HELPERS))


def quieted_by_the_project(facts: ScriptFacts) -> bool:
    """The file is a module of its project that another file imports, not a program
    (:meth:`ScriptFacts.runs_as_program`), and the project quiets print on the other ranks for good
    (:func:`~paratrain.diagnostics.project_mentions.project_quiets_print`): its functions run inside a program that
    has set that up (D-FINE's solvers, run by train.py after ``setup_distributed`` replaced builtins.print). Its
    top-level prints run when it is imported, which may be before: not covered. (A flat script that nothing imports
    is a program of its own, main block or not: AnyDoor's ``run_train_anydoor.py``.)"""
    return (facts.script is not None and not facts.runs_as_program() and imported_elsewhere(facts.script)
            and bool(project_quiets_print(facts.script)))


def project_open_above(facts: ScriptFacts) -> int | None:
    """The job size above which the project's quieting replacement of print (:func:`quieted_by_the_project`) lets
    every rank print (:func:`open_above`: MAE's ``get_world_size() > 8``); None without such a test."""
    sizes = [size for tree in project_quiets_print(facts.script) for size in [open_above(tree)] if size is not None]
    return min(sizes, default=None)


def _silencing_lines(facts: ScriptFacts) -> set[int]:
    """The lines that replace print or send stdout to /dev/null: ``sys.stdout = open(os.devnull, "w")``, or in two
    steps (MONAI's ``f = open(os.devnull, "w")``, then ``sys.stdout = sys.stderr = f``)."""
    lines = {number for number, line in enumerate(facts.lines, start=1) if _PRINT_SILENCED.search(line)}
    if "devnull" not in "\n".join(facts.lines):
        return lines
    devnull = {name for name, values in facts.assigned.items()
               if any(isinstance(v, ast.Call) and last_name(v) == "open" and "devnull" in ast.unparse(v) for v in values)}
    return lines | {node.lineno for node in walk(facts.tree) if isinstance(node, ast.Assign)
                    and any(ast.unparse(target) == "sys.stdout" for target in node.targets)
                    and ast.unparse(node.value) in devnull}


def _stdout_restored(facts: ScriptFacts) -> bool:
    """The script mutes stdout only for a while: it sends ``sys.stdout`` to /dev/null and puts it back
    (``sys.stdout = sys.__stdout__``, or a stream it saved from ``sys.stdout``), as bts's ``block_print()`` /
    ``enable_print()`` around one call, and never replaces ``print`` itself.

    Invariant: only a mute that is never undone silences the other ranks' prints for the rest of the run; an
    undone one silences the block it surrounds, and the prints elsewhere in the file still run on every rank.
    """
    if facts.mentions(r"builtins\.print\s*=|__builtin__\.print\s*="):
        return False
    saved = {name for name, values in facts.assigned.items()
             if any(ast.unparse(value) == "sys.stdout" for value in values)}
    return any(isinstance(node, ast.Assign) and any(ast.unparse(t) == "sys.stdout" for t in node.targets)
               and (ast.unparse(node.value) == "sys.__stdout__" or ast.unparse(node.value) in saved)
               for node in walk(facts.tree))


def silencing_calls(facts: ScriptFacts) -> list[ast.Call]:
    """The script's calls that quiet print on the other ranks from then on (a project function that replaces
    builtins.print or stdout; DeiT's helpers by name), when that is the only way print is quieted: none when the
    script replaces print itself, an imported module does so at its import, or a print's keyword says print was
    replaced where no such call shows when (every print is then taken as quieted)."""
    imported = facts.imported
    own = _own_silencers(facts)
    if own is None or imported.print_replaced_at_import:
        return []
    return [call for call in facts.calls
            if imported.callee(call) in imported.print_replacers
            or (isinstance(call.func, ast.Name) and call.func.id in own)
            or (last_name(call) in PRINT_SILENCING_HELPERS and imported.callee(call) not in imported.read)]


def _own_silencers(facts: ScriptFacts) -> set[str] | None:
    """The module-level functions of the file that replace print or stdout (DETR's ``setup_for_distributed``,
    copied into a project's ``misc.py``, then called at the end of its ``init_distributed_mode``): a call of one
    quiets what runs after it. None when the file does so outside them too (at its top level, in a method):
    when is not known then."""
    silencing = _silencing_lines(facts)
    own = set()
    for function in facts.tree.body:
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside = {n for n in silencing if function.lineno <= n <= (function.end_lineno or function.lineno)}
            if inside:
                own.add(function.name)
                silencing -= inside
    return None if silencing else own


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Module)


def runs_before(facts: ScriptFacts, first: ast.AST, then: ast.AST) -> bool:
    """``first`` runs before ``then`` each time ``then`` runs: both in one function (or both at module level),
    ``first`` in a statement of the block that holds ``then``'s statement, further up (3detr's `main`: two prints,
    then `init_distributed(...)`, in one `if args.ngpus > 1:`). Not when they sit in two branches of an ``if`` or
    a ``try``, or one of them in a function defined inside the other's."""
    path: dict[ast.AST, ast.AST] = {}  # each enclosing node of `then`, up to its scope → its child on the way
    child, node = then, facts.parents.get(then)
    while node is not None:
        path[node] = child
        if isinstance(node, _SCOPES):
            break
        child, node = node, facts.parents.get(node)
    child, node = first, facts.parents.get(first)
    while node is not None and node not in path:
        if isinstance(node, _SCOPES):
            return False  # another scope than `then`'s
        child, node = node, facts.parents.get(node)
    if node is None or _leaves_first(facts, first, node):
        return False
    for block in ("body", "orelse", "finalbody"):
        statements = getattr(node, block, None)
        if isinstance(statements, list) and child in statements and path[node] in statements:
            return statements.index(child) < statements.index(path[node])
    return False


def _leaves_first(facts: ScriptFacts, first: ast.AST, common: ast.AST) -> bool:
    """``first`` sits in a block, below ``common``, that ends by leaving the function (DETR's ``else: print('Not
    using distributed mode'); return``): whatever follows in ``common`` never runs after it."""
    child, node = first, facts.parents.get(first)
    while node is not None and node is not common:
        for block in ("body", "orelse", "handlers", "finalbody"):
            statements = getattr(node, block, None)
            if isinstance(statements, list) and child in statements and isinstance(statements[-1], (ast.Return, ast.Raise)):
                return True
        child, node = node, facts.parents.get(node)
    return False
