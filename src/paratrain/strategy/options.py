"""A strategy's options: a frozen dataclass whose fields are typed and checked when built.

Each strategy declares its own subclass (``DDP.Options``, ``FSDP.Options``, ...); the checks of
``pt.Runtime``, ``FitConfig.strategy_options`` and the flags of ``paratrain train`` come from its fields.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from paratrain.arguments import option
from paratrain.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class StrategyOptions:
    """A strategy's options (the base has none). Subclasses declare one field per option with
    :func:`~paratrain.arguments.option_field` (its help becomes the ``paratrain train`` flag's)
    and check their values in ``__post_init__`` (calling this one first).

    Raises:
        ConfigError: a value that is not of its field's type (``bool``, ``int``, ``float``,
            ``str``, optionally ``None``; other annotations are the subclass's to check).
    """

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            kinds = _plain_kinds(hints[field.name])
            if kinds is None or (value is None and type(None) in kinds):
                continue
            if not any(_is_a(value, kind) for kind in kinds):
                names = " or ".join("None" if kind is type(None) else kind.__name__ for kind in kinds)
                raise ConfigError(f"{option(field.name)} must be {names}, got {value!r}")


def _is_a(value: Any, kind: type) -> bool:
    """``isinstance``, except that a bool is no number and an int is a float."""
    if kind in (int, float) and isinstance(value, bool):
        return False
    return isinstance(value, (int, float) if kind is float else kind)


def _plain_kinds(annotation: Any) -> tuple[type, ...] | None:
    """``(int, NoneType)`` for ``int | None``; None when the annotation is not made of plain types."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        kinds = typing.get_args(annotation)
    else:
        kinds = (annotation,)
    plain = (bool, int, float, str, type(None))
    return kinds if all(kind in plain for kind in kinds) else None
