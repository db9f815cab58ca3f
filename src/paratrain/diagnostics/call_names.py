"""How ``paratrain check`` names what a call calls and what it is given, the same in the script and in the
modules of its project: names are matched by their last part (``torch.utils.data.DataLoader`` and
``DataLoader`` are the same).
"""

from __future__ import annotations

import ast


def last_name(node: ast.AST) -> str:
    """``torch.nn.parallel.DistributedDataParallel`` → ``DistributedDataParallel``; ``f()()`` → ``""``."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def callee_names(call: ast.Call) -> set[str]:
    """What a call may call: ``last_name`` of its function, or of both branches of a conditional one
    (``(DDP if dist.is_initialized() else NullDDP)(model)``)."""
    if isinstance(call.func, ast.IfExp):
        return {last_name(call.func.body), last_name(call.func.orelse)} - {""}
    return {last_name(call)}


# nn.Module methods that return the module itself: `DataParallel(model).cuda()` is still the wrapper.
_SAME_MODULE = ("to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "eval", "requires_grad_")


def returned_module(value: ast.expr) -> ast.expr:
    """``Wrapper(model).to(device).train()`` → ``Wrapper(model)``; any other value as it is."""
    while (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
           and value.func.attr in _SAME_MODULE and isinstance(value.func.value, ast.Call)):
        value = value.func.value
    return value


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True

