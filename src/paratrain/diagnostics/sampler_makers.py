"""Where a script's DistributedSamplers and loaders are made, for the sampler rules: the names they are bound to,
the functions of the file or of its project that return one, and the file's own call that stands for a sampler
made in another file.
"""

from __future__ import annotations

import ast
import re

from paratrain.diagnostics.script_facts import ScriptFacts, last_name
from paratrain.diagnostics.tree_walk import walk

EVAL_NAME = re.compile(r"val|dev|test|eval", re.IGNORECASE)
SAMPLERS = ("DistributedSampler",)
LOADERS = ("DataLoader",)


def is_eval(name: str, sampler: ast.Call) -> bool:
    """The sampler's name or its dataset's says evaluation (``val_sampler``, ``DistributedSampler(test_set)``)."""
    return bool(EVAL_NAME.search(name) or EVAL_NAME.search(first_arg(sampler)))


def first_arg(call: ast.Call) -> str:
    return ast.unparse(call.args[0]) if call.args else ""


def names_of(facts: ScriptFacts, call: ast.Call) -> set[str]:
    """The variables assigned ``call`` (``loader = DataLoader(...)``)."""
    return {name for name, values in facts.assigned.items() if call in values}


def sampler_makers(facts: ScriptFacts) -> dict[str, list[ast.Call]]:
    """Functions of the file, and of its project that it calls, that return a DistributedSampler (by the name
    the file calls them) → the sampler calls they return."""
    own = {
        node.name: [ret.value for ret in walk(node) if isinstance(ret, ast.Return)
                    and isinstance(ret.value, ast.Call) and last_name(ret.value) in SAMPLERS]
        for node in facts.tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    return {**own, **facts.imported.sampler_makers}


def in_script(facts: ScriptFacts, sampler: ast.Call, call: ast.Call) -> ast.Call:
    """Where a sampler is reported: itself when the file makes it, else the file's ``call`` of the project
    function whose own file makes it (vq-vae-2's ``dist.data_sampler(dataset, shuffle=True, …)``), read
    for the keywords that call passes when the sampler's own are not constants."""
    if sampler in facts.parents:
        return sampler
    fixed = [kw for kw in sampler.keywords if kw.arg in ("shuffle", "drop_last") and isinstance(kw.value, ast.Constant)]
    return ast.Call(func=call.func, args=call.args, keywords=fixed + [kw for kw in call.keywords
                                                                      if kw.arg not in {k.arg for k in fixed}],
                    lineno=call.lineno, col_offset=call.col_offset)


def imported_sampler_bindings(facts: ScriptFacts) -> list[tuple[str, ast.Call]]:
    """(name, sampler) for each assignment of a call to a project function of another file that returns a
    DistributedSampler (the sampler read as that call, see :func:`in_script`)."""
    makers = facts.imported.sampler_makers
    bound = facts.bindings(*{maker.rpartition(".")[2] for maker in makers})
    return [(name, in_script(facts, makers[ast.unparse(call.func)][0], call))
            for name, call in bound if ast.unparse(call.func) in makers]
