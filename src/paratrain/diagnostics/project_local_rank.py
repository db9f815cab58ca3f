"""What a script's project tells about ``--local_rank`` and ``LOCAL_RANK``, read for ``paratrain check``.

A parser-building function of the project may define the flag (:func:`local_rank_flag`); a function the
script calls, or a module's import, may read the variable from the environment (:func:`reads_local_rank_env`),
or read the option it was given (:func:`attributes_read_before_set`). Writing the variable is no read of it.
"""

from __future__ import annotations

import ast
import re

from paratrain.diagnostics.call_names import last_name
from paratrain.diagnostics.tree_walk import walk

_Function = ast.FunctionDef | ast.AsyncFunctionDef


def local_rank_flag(definition: _Function | ast.ClassDef, module: ast.Module | None = None) -> ast.Call | None:
    """The function's own ``add_argument("--local_rank", …)`` (Point-BERT's ``get_args()`` in utils/parser.py):
    a parser of the project that the script calls defines the flag as the script's own would. A class (an
    ``Options`` whose methods add the arguments) counts with all its methods; a function that builds such a class
    of its ``module`` (``def get_options(): options = Options(); …; return options``) counts as the class."""
    found = _own_flag(definition)
    if found is None and module is not None and not isinstance(definition, ast.ClassDef):
        classes = {node.name: node for node in module.body if isinstance(node, ast.ClassDef)}
        built = [classes[last_name(node)] for node in walk(definition)
                 if isinstance(node, ast.Call) and last_name(node) in classes]
        found = next((flag for cls in built for flag in [_own_flag(cls)] if flag is not None), None)
    return found


def _own_flag(definition: _Function | ast.ClassDef) -> ast.Call | None:
    for node in walk(definition):
        if isinstance(node, ast.Call) and last_name(node) == "add_argument" and any(
                isinstance(a, ast.Constant) and a.value in ("--local_rank", "--local-rank") for a in node.args):
            return node
    return None


def reads_local_rank_env(node: ast.AST) -> bool:
    """``os.environ["LOCAL_RANK"]``, ``os.getenv("LOCAL_RANK")``, ``os.environ.get("LOCAL_RANK")`` within ``node``;
    or ``LOCAL_RANK`` among the names a helper named for the environment tries in turn (DLRM's
    ``env2int(["MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", …, "LOCAL_RANK"], -1)``). Writing it
    (``os.environ["LOCAL_RANK"] = str(args.local_rank)``, Point-BERT's parser) is no read: the flag still decides."""
    return any(
        isinstance(sub, (ast.Subscript, ast.Call)) and not isinstance(getattr(sub, "ctx", None), ast.Store) and any(
            isinstance(arg, ast.Constant) and arg.value == "LOCAL_RANK"
            for arg in ([sub.slice] if isinstance(sub, ast.Subscript) else sub.args[:1]))
        and re.search(r"environ|getenv", ast.unparse(sub.value if isinstance(sub, ast.Subscript) else sub.func))
        or isinstance(sub, ast.Call) and re.search(r"env", last_name(sub), re.IGNORECASE) and any(
            isinstance(arg, (ast.List, ast.Tuple)) and any(
                isinstance(item, ast.Constant) and item.value == "LOCAL_RANK" for item in arg.elts)
            for arg in sub.args)
        or isinstance(sub, ast.For) and _tries_local_rank(sub)
        for sub in walk(node))


def _tries_local_rank(loop: ast.For) -> bool:
    """``for v in ("LOCAL_RANK", "MPI_LOCALRANKID", …): … int(os.environ[v])`` (timm's ``world_info_from_env``):
    the environment read through the loop's variable."""
    if not (isinstance(loop.target, ast.Name) and isinstance(loop.iter, (ast.Tuple, ast.List)) and any(
            isinstance(item, ast.Constant) and item.value == "LOCAL_RANK" for item in loop.iter.elts)):
        return False
    variable = loop.target.id
    for sub in (sub for stmt in loop.body for sub in walk(stmt)):
        if isinstance(sub, ast.Subscript) and not isinstance(sub.ctx, ast.Store):
            key, source = sub.slice, sub.value
        elif isinstance(sub, ast.Call) and sub.args:
            key, source = sub.args[0], sub.func
        else:
            continue
        if isinstance(key, ast.Name) and key.id == variable and re.search(r"environ|getenv", ast.unparse(source)):
            return True
    return False


def attributes_read_before_set(function: _Function) -> set[str]:
    """Attributes the function reads (``params.local_rank``) where no earlier line of it set them: it sees the
    value it was given."""
    stores = {}
    for node in walk(function):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            stores[node.attr] = min(stores.get(node.attr, node.lineno), node.lineno)
    return {node.attr for node in walk(function) if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and isinstance(node.ctx, ast.Load) and node.lineno <= stores.get(node.attr, node.lineno)}


def attributes_tested_then_stored(function: _Function) -> set[str]:
    """Attributes the function reads in the test of an ``if``, ``elif`` or ``assert`` before it stores them
    (XLM's slurm.py: ``elif params.local_rank != -1:``, else ``params.local_rank = 0``): it branches on the
    value it was given, then replaces it."""
    tested = {node.attr for stmt in walk(function) if isinstance(stmt, (ast.If, ast.Assert))
              for node in walk(stmt.test) if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)}
    stored = {node.attr for node in walk(function) if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)}
    return tested & stored & attributes_read_before_set(function)
