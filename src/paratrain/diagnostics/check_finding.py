"""A finding of ``paratrain check`` and the shape of a rule that yields them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from paratrain.diagnostics.script_facts import ScriptFacts


@dataclass(frozen=True)
class Finding:
    line: int
    rule: str
    problem: str
    fix: str


Rule = Callable[[ScriptFacts], Iterator[Finding]]
