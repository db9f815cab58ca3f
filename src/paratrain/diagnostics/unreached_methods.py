"""Methods of a script's classes that nothing is shown to call: a plugin built and never handed on.

A library calls a method of an object it was given (Lightning calls a ``CheckpointIO`` plugin's
``load_checkpoint`` once the plugin is in ``Trainer(plugins=[...])``). An instance that the script builds and
never reads again reaches no library, so those methods never run: their prints are no one's output.

Invariant: a method (not a dunder, which runs implicitly) of a class of the file, undecorated, is unreached when
the file reads no attribute of that method's name, and every read of the class's name is a call ``Cls(...)``
whose result is dropped or bound to a plain name that is never read. Anything else (the class named as a base,
passed, stored on an attribute, returned; a decorated class, which a registry may keep) leaves it as possibly
running, and the rules read it as before.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from paratrain.diagnostics.assigned_values import bound_values

if TYPE_CHECKING:
    from paratrain.diagnostics.script_facts import ScriptFacts


def unreached_method(facts: ScriptFacts, node: ast.AST) -> bool:
    """``node`` lies in a method that no code of the file is shown to reach (see the module's invariant)."""
    method = facts.scope(node)
    owner = facts.parents.get(method)
    if not isinstance(owner, ast.ClassDef) or owner.decorator_list or method.decorator_list:
        return False
    if method.name.startswith("__") or facts.loaded_attrs.get(method.name):
        return False
    uses = facts.loaded_names.get(owner.name, [])
    return bool(uses) and all(_built_and_dropped(facts, use) for use in uses)


def _built_and_dropped(facts: ScriptFacts, use: ast.Name) -> bool:
    """``Cls()`` alone on its line, or ``x = Cls()`` with ``x`` never read."""
    call = facts.parents.get(use)
    if not (isinstance(call, ast.Call) and call.func is use):
        return False
    holder = facts.parents.get(call)
    if isinstance(holder, ast.Expr):
        return True
    targets = [target for target, value in bound_values(holder) if value is call] if holder is not None else []
    return bool(targets) and all(isinstance(t, ast.Name) and not facts.loaded_names.get(t.id) for t in targets)
