"""``paratrain check``'s rules for ``print`` on every rank, each line once per process, and the gates the output
rules share (a line naming its process, an ``except`` block, one finding naming the other lines); logging is in
:mod:`.check_logs`.

Quiet where the script (or a function of its project it calls) already tells the ranks apart: print
replaced on the other ranks, stdout sent to /dev/null, a line that names its process.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from paratrain.diagnostics.check_finding import Finding
from paratrain.diagnostics.dead_code import never_runs
from paratrain.diagnostics.guard_texts import device_query
from paratrain.diagnostics.library_calls import peft_prints, pretty_prints, tqdm_writes
from paratrain.diagnostics.print_silencing import (
    open_above, own_print_binding, print_replaced, print_silenced, project_open_above, quieted_by_the_project,
    runs_before, silencing_calls)
from paratrain.diagnostics.project_launches import launch_above
from paratrain.diagnostics.rank_argument_prints import prints_by_rank_argument
from paratrain.diagnostics.script_facts import ScriptFacts, last_name
from paratrain.diagnostics.tree_walk import walk
from paratrain.diagnostics.unreached_methods import unreached_method

# A value in an f-string that tells the ranks' lines apart (f"[GPU{rank}] …", f"[{os.getpid()}] …").
RANK_TAG = re.compile(r"\w*rank|gpu|gpu_id|getpid|device_id|\w*process_index", re.IGNORECASE)


def first_of(calls: list[ast.Call], rule: str, why: str, fix: str) -> Iterator[Finding]:
    """One finding at the first of ``calls`` that names the lines of the others."""
    if calls:
        others = ", ".join(str(call.lineno) for call in calls[1:])
        yield Finding(calls[0].lineno, rule, why + (f" (also lines {others})" if others else ""), fix)


def _interpolated(arg: ast.expr) -> list[ast.expr]:
    """The values a printed argument puts into the text: an f-string's fields, ``"…".format(x)``'s and
    ``"…" % x``'s operands, or the argument itself (``print("rank", rank)``); a plain string has none."""
    if isinstance(arg, ast.Constant):
        return []
    if isinstance(arg, ast.JoinedStr):
        return [value.value for value in arg.values if isinstance(value, ast.FormattedValue)]
    if (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "format"
            and isinstance(arg.func.value, ast.Constant)):
        return [*arg.args, *(kw.value for kw in arg.keywords)]
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod) and isinstance(arg.left, ast.Constant):
        return [arg.right]
    return [arg]


def rank_tagged(call: ast.Call) -> bool:
    """The printed text names its process (f"[GPU{rank}] …", f"{rank + 1}/{world_size}",
    ``"Use GPU: {}".format(gpu)``, ``print("rank", rank)``): one line per rank is the point."""
    return any(
        isinstance(name, (ast.Name, ast.Attribute, ast.Call)) and RANK_TAG.fullmatch(last_name(name))
        # ProPainter's `config['global_rank']`: a rank kept under a key
        or isinstance(name, ast.Subscript) and isinstance(name.slice, ast.Constant)
        and isinstance(name.slice.value, str) and bool(RANK_TAG.fullmatch(name.slice.value))
        for arg in call.args for value in _interpolated(arg) for name in walk(value)
        if not _device_query_argument(name, value)
    )


def _device_query_argument(name: ast.AST, value: ast.AST) -> bool:
    """``name`` is (in) an argument of a ``torch.cuda`` call within ``value``: ``torch.cuda.memory_allocated(rank)``
    shows the rank's device's figure, not which process writes the line (guard_texts.without_device_queries)."""
    return any(isinstance(call, ast.Call) and device_query(call)
               and any(node is name for argument in call.args for node in walk(argument))
               for call in walk(value))


def to_console(call: ast.Call) -> bool:
    """A print to stdout or stderr, not to a file it is given (``print(json.dumps(config), file=f)``: an experiment
    log, which is a write to a file, not a line on the console)."""
    target = next((kw.value for kw in call.keywords if kw.arg == "file"), None)
    return target is None or re.fullmatch(r"(?:sys\.)?std(?:out|err)", ast.unparse(target)) is not None


def handling_an_exception(facts: ScriptFacts, call: ast.Call) -> bool:
    """The line is written in an ``except`` block (``except Exception: logger.info(traceback.format_exc())``):
    it tells the failure of the process that writes it, as a line naming its rank tells that rank's state."""
    parent = facts.parents.get(call)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(parent, ast.ExceptHandler):
            return True
        parent = facts.parents.get(parent)
    return False


def print_on_every_rank(facts: ScriptFacts) -> Iterator[Finding]:
    if not facts.distributed:
        return
    library = peft_prints(facts) + pretty_prints(facts) + tqdm_writes(facts)  # printers other than print
    prints = [
        call for call in [*facts.calls_named("print"), *library]
        if (isinstance(call.func, ast.Name) or call in library) and not facts.guard(call)
        and not facts.in_launcher(call) and not rank_tagged(call) and not unreached_method(facts, call)
        and not never_runs(facts, call) and to_console(call)
    ]
    why = "print runs on every rank: each line appears once per process, interleaved"
    own = own_print_binding(facts)
    if own is not None:
        why = (f"print runs on every rank: this file's `print` is `{ast.unparse(own.value)}` (line {own.lineno}), "
               "bound when the file is imported, so the project's quieting of builtins.print never reaches it: "
               "each line appears once per process, interleaved")
    elif print_silenced(facts) or print_replaced(facts):
        opened = _opened_print(facts)
        if opened:
            why = opened
        else:
            silencing = silencing_calls(facts)
            prints = [call for call in prints if any(runs_before(facts, call, then) for then in silencing)]
            why = (f"print runs on every rank before `{last_name(silencing[0])}` (line {silencing[0].lineno}) quiets "
                   "the other ranks: each line appears once per process, interleaved") if silencing else why
    elif quieted_by_the_project(facts):
        opened = _opened_print(facts, (project_open_above(facts),))
        if opened:
            why = opened
        else:
            prints = [call for call in prints if not _in_a_function(facts, call)]  # run at import, maybe before
    else:
        prints += _literal_rank_prints(facts)
    yield from first_of(
        sorted(prints, key=lambda call: (call.lineno, call.col_offset)), "print-on-every-rank", why,
        "pt.print(...) or `if dist.get_rank() == 0:` for messages; gather values first "
        "(pt.all_reduce) when every rank's number matters",
    )


def _in_a_function(facts: ScriptFacts, node: ast.AST) -> bool:
    """``node`` is inside a function or method of the file (it runs when called, not when the file is imported)."""
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        parent = facts.parents.get(parent)
    return parent is not None


def _opened_print(facts: ScriptFacts, sizes: tuple[int | None, ...] = ()) -> str:
    """Why the script's prints run on every rank although its project replaced print to quiet them: the
    replacement prints on every rank above a job size (MAE's ``get_world_size() > 8``) and a command of the
    project starts the script in more processes than that (mage's README: ``--nproc_per_node=8 --nnodes=8``).
    "" otherwise: a count the commands do not write in numbers leaves the replacement taken as quieting. Asked only
    of a script whose print is replaced or silenced, or of a module its project quiets (``sizes``: the limits of the
    project's replacements)."""
    if facts.script is None:
        return ""
    sizes = [size for size in (facts.imported.print_open_above, open_above(facts.tree), *sizes) if size is not None]
    launch = launch_above(facts.script, min(sizes)) if sizes else None
    if launch is None:
        return ""
    return (f"print runs on every rank: the project's print replacement lets every rank print once a job has more "
            f"than {min(sizes)} processes, and {launch.where} starts more; each line appears once per process")


def project_call_prints(facts: ScriptFacts) -> Iterator[Finding]:
    """A call into the script's own project that prints in every process that makes it
    (:mod:`paratrain.diagnostics.project_prints`), made on every rank: reported at the script's call, one
    finding per file of the project that holds such prints (the other calls named in it).

    Invariant: the same gates as the script's own prints (a multi-process script, print not replaced or
    silenced, the call under no rank test and not in a launcher's parent), and the callee's print proved to
    run unconditionally on the way from that call.
    """
    if not facts.distributed or print_silenced(facts) or print_replaced(facts) or quieted_by_the_project(facts):
        return
    printing = facts.imported.every_rank_prints
    for calls, path, line in calls_by_file(facts, printing, lambda call: not never_runs(facts, call)):
        first = calls[0]
        yield Finding(
            first.lineno, "print-on-every-rank",
            f"`{facts.imported.callee(first)}` prints on every rank ({path}:{line}, no rank test on the way): "
            f"each line appears once per process, interleaved{also_lines(calls)}",
            "print under `if dist.get_rank() == 0:` in that function (or pt.print), or call it on rank 0 only",
        )


def calls_by_file(facts: ScriptFacts, found: dict[str, tuple], keep) -> list[tuple[list[ast.Call], str, int]]:
    """The script's calls to the callees of ``found`` (callee → (file, line, …)) made on every rank, outside a
    launcher's parent, that ``keep`` keeps, grouped by that file: (the calls in line order, the file, the line
    the first one reaches)."""
    by_file: dict[str, list[tuple[ast.Call, int]]] = {}
    for call in facts.calls:
        where = found.get(facts.imported.callee(call))
        if where is not None and not facts.guard(call) and not facts.in_launcher(call) and keep(call):
            by_file.setdefault(where[0], []).append((call, where[1]))
    groups = []
    for path, calls in by_file.items():
        calls.sort(key=lambda item: (item[0].lineno, item[0].col_offset))
        groups.append(([call for call, _ in calls], path, calls[0][1]))
    return groups


def also_lines(calls: list[ast.Call]) -> str:
    """" (also lines …)": the lines of the calls after the first, when they are other lines."""
    others = sorted({call.lineno for call in calls[1:]} - {calls[0].lineno})
    return f" (also lines {', '.join(map(str, others))})" if others else ""


def _literal_rank_prints(facts: ScriptFacts) -> list[ast.Call]:
    """Calls of a print helper (the script's or its project's) that tests the rank it is given, with a number
    that passes the test (``print_rank_0(msg, 0)``): it prints in every process that calls it."""
    printers = {node.name: prints_by_rank_argument(node) for node in facts.tree.body
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = []
    for call in facts.calls:
        printer = facts.imported.rank_argument_prints.get(facts.imported.callee(call))
        if printer is None and isinstance(call.func, ast.Name):
            printer = printers.get(call.func.id)
        if (printer is not None and printer.prints_for(call) and not facts.guard(call) and not facts.in_launcher(call)
                and not rank_tagged(call)):
            found.append(call)
    return found


