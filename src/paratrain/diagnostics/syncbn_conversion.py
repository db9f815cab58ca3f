"""Whether a script, or a module of its project, converts BatchNorm to SyncBatchNorm in a default run.

    syncbn_converts(facts.tree, facts.lines, off)   # off: the options that are off unless passed

The BatchNorm rule stays quiet where SyncBatchNorm is named, as a conversion may be made anywhere. Two kinds
of mention convert nothing in a default run: an option's declaration and text for a reader (its ``help=``, a
docstring), and a conversion behind a command-line switch that is off unless passed (``if opt.batchnorm_sync:
model = SyncBatchNorm.convert_sync_batchnorm(model)`` with ``--batchnorm_sync`` an ``action="store_true"``
option). A comment counts: the rule prefers silence to a guess.

Invariant: a mention counts unless every line naming SyncBatchNorm is inside an option's declaration
(``add_argument("--sync_bn", …, help=…)``), a docstring, or the test and body of an ``if`` whose test is a switch
off by default alone (``if args.sync_bn:``; not negated, not combined, not its ``else``).
"""

from __future__ import annotations

import ast
import re

from paratrain.diagnostics.call_names import keyword, last_name
from paratrain.diagnostics.tree_walk import walk

SYNCBN = re.compile(r"SyncBatchNorm|sync_?batchnorm|syncbn|sync_bn", re.IGNORECASE)


def off_by_default(trees: list[ast.Module]) -> set[str]:
    """The argparse options of these modules that are off unless passed, by the name the parsed arguments
    carry: ``add_argument("--sync_bn", action="store_true")`` (no ``default=True``), or ``default=False``."""
    found = set()
    for tree in trees:
        for call in (n for n in walk(tree) if isinstance(n, ast.Call) and last_name(n) == "add_argument"):
            options = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            action, default, dest = keyword(call, "action"), keyword(call, "default"), keyword(call, "dest")
            stores_true = isinstance(action, ast.Constant) and action.value == "store_true"
            if not options or not (isinstance(default, ast.Constant) and default.value is False
                                   or stores_true and default is None):
                continue
            long = next((o for o in options if o.startswith("--")), options[0])
            found.add(dest.value if isinstance(dest, ast.Constant) else long.lstrip("-").replace("-", "_"))
    return found


def syncbn_converts(tree: ast.Module, lines: list[str], off: set[str]) -> bool:
    """A line of the module names SyncBatchNorm outside reader's text and outside an off-by-default switch."""
    named = {number for number, line in enumerate(lines, 1) if SYNCBN.search(line)}
    if not named:
        return False
    return bool(named - _inert_lines(tree, off))


def _inert_lines(tree: ast.Module, off: set[str]) -> set[int]:
    inert: set[int] = set()
    for node in walk(tree):
        if isinstance(node, ast.Call) and last_name(node) == "add_argument":  # declaring a switch, its help
            inert.update(_lines(node))
        elif isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                inert.update(_lines(first))
        elif isinstance(node, ast.If) and _switch(node.test) in off:  # the test and its body, not an `else`
            inert.update(_lines(node.test))
            inert.update(line for stmt in node.body for line in _lines(stmt))
    return inert


def _switch(test: ast.expr) -> str | None:
    """The option an ``if`` tests alone: ``if opt.batchnorm_sync:`` → "batchnorm_sync"."""
    if isinstance(test, ast.Attribute):
        return test.attr
    return test.id if isinstance(test, ast.Name) else None


def _lines(node: ast.AST) -> range:
    return range(node.lineno, (node.end_lineno or node.lineno) + 1)
