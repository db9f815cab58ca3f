"""Rendezvous values fixed in a script's project, read for ``paratrain check``'s hardcoded-rendezvous rule.

A function (of the script, or of its project that the script calls) writes ``MASTER_PORT``/``MASTER_ADDR``
from a value the code fixes, though no literal stands in the write itself:

* an option's literal default, the option read on a parameter (``os.environ["MASTER_PORT"] =
  str(params.main_port)`` with ``--main_port`` defaulting to 10001 in a parser of the project);
* a parameter's literal default that the callers leave as it is (``def init_dist(launcher, port=29500)``, then
  ``port = os.environ.get("PORT", port)``; ``os.environ["MASTER_PORT"] = str(port)``);
* arithmetic on a literal port (``str(29567 + num_gpus)``).

Invariant: the value is followed through the function's own assignments (a few steps) to one of those three;
a write that only fills an unset variable (``if "MASTER_PORT" not in os.environ:``) is a default and is left
out, as in the script itself.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from paratrain.diagnostics.call_names import keyword, last_name
from paratrain.diagnostics.tree_walk import walk

if TYPE_CHECKING:
    from paratrain.diagnostics.project_imports import ProjectImports
    from paratrain.diagnostics.script_facts import ScriptFacts

_Function = ast.FunctionDef | ast.AsyncFunctionDef
_VARIABLES = ("MASTER_PORT", "MASTER_ADDR")
_LOOPBACK = ("localhost", "127.0.0.1", "::1")
_STEPS = 3  # local assignments followed back from the written value


def option_defaults(trees: list[ast.Module]) -> dict[str, str | int]:
    """``add_argument("--main_port", type=int, default=10001)`` anywhere in these modules → {"main_port": 10001}:
    the options whose default is a literal, by the name the parsed arguments carry."""
    defaults = {}
    for tree in trees:
        for call in (node for node in walk(tree) if isinstance(node, ast.Call) and last_name(node) == "add_argument"):
            options = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            default, dest = keyword(call, "default"), keyword(call, "dest")
            if not options or not isinstance(default, ast.Constant) or isinstance(default.value, bool) or not isinstance(
                    default.value, (str, int)):
                continue
            long = next((o for o in options if o.startswith("--")), options[0])
            name = dest.value if isinstance(dest, ast.Constant) else long.lstrip("-").replace("-", "_")
            defaults[name] = default.value
    return defaults


def rendezvous_writes(function: _Function) -> Iterator[tuple[ast.Assign, str]]:
    """``os.environ["MASTER_PORT"] = …`` in ``function``, not inside an ``if`` that asks whether the variable is
    set (a default): each write with its variable."""
    yield from _writes(function.body, set())


def _writes(body: list[ast.stmt], asked: set[str]) -> Iterator[tuple[ast.Assign, str]]:
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
            target = stmt.targets[0]
            variable = target.slice.value if isinstance(target.slice, ast.Constant) else None
            if variable in _VARIABLES and ast.unparse(target.value).endswith("environ") and variable not in asked:
                yield stmt, variable
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        named = asked | ({n.value for n in walk(stmt.test) if isinstance(n, ast.Constant) and n.value in _VARIABLES}
                         if isinstance(stmt, ast.If) else set())
        for field in ("body", "orelse", "finalbody"):
            yield from _writes(getattr(stmt, field, []) or [], named)
        for handler in getattr(stmt, "handlers", []):
            yield from _writes(handler.body, named)


def fixed_source(function: _Function, value: ast.expr, defaults: dict[str, str | int],
                 passed: set[str]) -> str | None:
    """Where the written ``value`` is fixed (see the module's docstring), as a phrase; None when it is not shown
    to be. ``passed``: parameters that a caller gives a value (their defaults do not count)."""
    params = function.args.posonlyargs + function.args.args
    own_defaults = dict(zip([a.arg for a in params][len(params) - len(function.args.defaults):], function.args.defaults))
    own_defaults.update({a.arg: d for a, d in zip(function.args.kwonlyargs, function.args.kw_defaults) if d is not None})
    names = {a.arg for a in params + function.args.kwonlyargs}
    assigned: dict[str, list[ast.expr]] = {}
    for node in walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned.setdefault(node.targets[0].id, []).append(node.value)
    frontier, seen = [value], set()
    for _ in range(_STEPS + 1):
        following = []
        for expr in frontier:
            for node in walk(expr):
                found = _literal_here(node, names, own_defaults, defaults, passed)
                if found is not None:
                    return found
                if isinstance(node, ast.Name) and node.id not in seen and node.id not in names:
                    seen.add(node.id)
                    following += assigned.get(node.id, [])
        frontier = following
    return None


def _literal_here(node: ast.AST, names: set[str], own_defaults: dict[str, ast.expr], defaults: dict[str, str | int],
                  passed: set[str]) -> str | None:
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and any(
            isinstance(side, ast.Constant) and isinstance(side.value, int) and side.value >= 1024
            for side in (node.left, node.right))):
        return f"a literal port base ({ast.unparse(node)})"
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names
            and node.attr in defaults and defaults[node.attr] not in _LOOPBACK):
        return f"the option --{node.attr}'s fixed default {defaults[node.attr]!r}"
    if isinstance(node, ast.Name) and node.id in own_defaults and node.id not in passed:
        default = own_defaults[node.id]
        if (isinstance(default, ast.Constant) and isinstance(default.value, (int, str))
                and not isinstance(default.value, bool) and default.value not in _LOOPBACK):
            return f"the parameter default {node.id}={default.value!r}"
    return None


def passed_parameters(function: _Function, calls: list[ast.Call]) -> set[str]:
    """The parameters of ``function`` that some call of it gives a value (any ``**kwargs`` counts as all)."""
    params = [a.arg for a in function.args.posonlyargs + function.args.args]
    if params[:1] in (["self"], ["cls"]):
        params = params[1:]
    passed = set()
    for call in calls:
        if any(kw.arg is None for kw in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
            return set(params) | {a.arg for a in function.args.kwonlyargs}
        passed |= set(params[:len(call.args)]) | {kw.arg for kw in call.keywords}
    return passed


def fixed_rendezvous_calls(imports: ProjectImports, facts: ScriptFacts) -> dict[str, tuple[str, str]]:
    """The project functions the script calls (keyed as written: ``slurm.init_distributed_mode``) that write a
    rendezvous variable from a fixed value: {callee: (the variable, where the value is fixed)}. Option defaults
    come from every parser of the project read for the script."""
    callees: dict[str, list[ast.Call]] = {}
    for call in facts.calls:
        if isinstance(call.func, (ast.Name, ast.Attribute)):
            callees.setdefault(ast.unparse(call.func), []).append(call)
    found_functions = []
    for callee, calls in callees.items():
        found = imports.function(callee)
        if found is not None and "MASTER_" in found[0].source:
            found_functions.append((callee, calls, found[1]))
    if not found_functions:
        return {}
    defaults = option_defaults([module.tree for module in imports.modules()])
    fixed = {}
    for callee, calls, function in found_functions:
        passed = passed_parameters(function, calls)
        for write, variable in rendezvous_writes(function):
            source = fixed_source(function, write.value, defaults, passed)
            if source is not None:
                fixed[callee] = (variable, source)
                break
    return fixed
