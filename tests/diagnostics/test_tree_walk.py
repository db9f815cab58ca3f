"""The walks and derivations ``check`` keeps per node: the same nodes in ``ast``'s own order, made once per check."""

from __future__ import annotations

import ast
from pathlib import Path

from paratrain.diagnostics import tree_walk
from paratrain.diagnostics.assigned_values import assigned_in


def test_walk_and_children_give_asts_own_nodes_in_its_own_order() -> None:
    for path in sorted(Path(tree_walk.__file__).parent.glob("*.py"))[::6]:  # shapes of the checker's own code
        tree = ast.parse(path.read_text(encoding="utf-8"))
        tree_walk.forget()
        assert tree_walk.walk(tree) == tuple(ast.walk(tree)), path.name
        for node in tree_walk.walk(tree)[:500]:
            assert tree_walk.children(node) == list(ast.iter_child_nodes(node)), path.name


def test_a_derivation_is_made_once_per_node_until_forgotten() -> None:
    function = ast.parse("def f(a):\n    x = 1\n    if a:\n        x, y = 2, 3\n    (x := 4)\n").body[0]
    made = []

    def make(node: ast.AST) -> int:
        made.append(node)
        return len(made)

    assert tree_walk.derived(function, "count", make) == tree_walk.derived(function, "count", make) == 1
    tree_walk.forget()
    assert tree_walk.derived(function, "count", make) == 2
    assert [ast.unparse(value) for value in assigned_in(function, "x")] == ["1", "2", "4"]  # breadth first, as ast.walk
    assert assigned_in(function, "z") == []
