"""Command-line flags derived from a config dataclass: one field, one flag.

A field whose metadata has a ``help`` (:func:`paratrain.arguments.option_field`) is a flag:
named by :func:`paratrain.arguments.cli_flag` (its name with dashes), typed by its annotation.
A ``bool`` field is a pair, ``--x`` / ``--no-x``; any other takes one value. A flag that is
not given leaves the field at the dataclass's default, which the help states. The same fields
turn a config back into words (:func:`config_words`), so the launcher hands its workers exactly
the config it checked.

A field made by :func:`paratrain.arguments.options_field` holds another component's options
(``FitConfig.strategy_options``: every registered strategy's ``Options``): each of their fields
with a help is a flag the same way, its help prefixed with the components that take it, and a
flag that is given becomes an entry of that field's mapping.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any

from paratrain.arguments import cli_flag


def flag_fields(cls: type) -> list[tuple[dataclasses.Field, type]]:
    """``(field, value type)`` for each field of the dataclass ``cls`` that is a flag, in field order."""
    hints = typing.get_type_hints(cls)
    return [(field, field.metadata.get("flag_type") or _value_type(hints[field.name]))
            for field in dataclasses.fields(cls) if "help" in field.metadata]


def add_flags(group: Any, cls: type, options_group: Any = None) -> None:
    """Add one argument per flag field of ``cls`` to ``group`` (a parser or an argument group);
    each stores into the field's name, ``None`` when not given. The flags of its options fields
    go to ``options_group`` (default ``group``) and store into ``FIELD.OPTION``."""
    for field, kind in flag_fields(cls):
        _add_flag(group, field, kind, field.name, help_text(field))
    own = {field.name for field in dataclasses.fields(cls)}
    for holder, flags in nested_flag_fields(cls):
        for field, kind, owners in flags:
            if field.name not in own:  # a config's own field keeps its flag
                _add_flag(options_group or group, field, kind, f"{holder.name}.{field.name}",
                          f"{owners}: {help_text(field)}")


def _add_flag(group: Any, field: dataclasses.Field, kind: type, dest: str, help: str) -> None:
    text = (help + _default_text(field, kind)).replace("%", "%%")  # argparse %-formats help
    if kind is bool:
        group.add_argument(cli_flag(field.name), dest=dest, action=argparse.BooleanOptionalAction,
                           default=None, help=text)
    else:
        group.add_argument(cli_flag(field.name), dest=dest, type=kind, metavar=_metavar(field), help=text)


def help_text(field: dataclasses.Field) -> str:
    """The field's help; a callable help is asked now (a list read from a registry)."""
    text = field.metadata["help"]
    return text() if callable(text) else text


def nested_flag_fields(cls: type) -> list[tuple[dataclasses.Field, list[tuple[dataclasses.Field, type, str]]]]:
    """For each options field of ``cls``: ``(field, [(option field, value type, "owner, owner"), …])``,
    one entry per option name across its sources, in their order."""
    found = []
    for holder in dataclasses.fields(cls):
        sources = holder.metadata.get("flags_from")
        if sources is None:
            continue
        by_name: dict[str, tuple[dataclasses.Field, type, list[str]]] = {}
        for owner, options in sources():
            for field, kind in flag_fields(options):
                by_name.setdefault(field.name, (field, kind, []))[2].append(owner)
        found.append((holder, [(field, kind, ", ".join(owners)) for field, kind, owners in by_name.values()]))
    return found


def config_from_args(cls: type, args: argparse.Namespace) -> Any:
    """An instance of ``cls`` with the flags given in ``args``; the rest keep their defaults.

    Raises:
        ConfigError: a bad value (from ``cls``'s own checks).
    """
    given: dict[str, Any] = {}
    for field, _ in flag_fields(cls):
        value = getattr(args, field.name)
        if value is not None:
            given[field.name] = None if "off" in field.metadata and value == field.metadata["off"] else value
    for holder, flags in nested_flag_fields(cls):
        values = {field.name: getattr(args, f"{holder.name}.{field.name}", None) for field, _, _ in flags}
        given[holder.name] = {name: value for name, value in values.items() if value is not None}
    return cls(**given)


def config_words(config: Any) -> list[str]:
    """``config``'s flag fields that differ from their defaults, as command-line words that
    :func:`config_from_args` reads back into an equal config.

    Raises:
        ValueError: a field is ``None`` where its flag has no word for that (no ``off`` in its metadata).
    """
    words = []
    for field, kind in flag_fields(type(config)):
        value = getattr(config, field.name)
        if value == field.default:
            continue
        if value is None:
            if "off" not in field.metadata:
                raise ValueError(f"{field.name}=None has no command-line word: give its field an off= value")
            value = field.metadata["off"]
        flag = cli_flag(field.name)
        if kind is bool:
            words.append(flag if value else "--no-" + flag[2:])
        else:  # --flag=VALUE: a value that starts with a dash stays a value
            words.append(f"{flag}={value}")
    for holder, flags in nested_flag_fields(type(config)):
        kinds = {field.name: kind for field, kind, _ in flags}
        for name, value in getattr(config, holder.name).items():
            if value is None:  # every option's None is its default: nothing to say
                continue
            if name not in kinds:
                raise ValueError(f"{holder.name}[{name!r}] has no command-line flag")
            flag = cli_flag(name)
            words.append((flag if value else "--no-" + flag[2:]) if kinds[name] is bool else f"{flag}={value}")
    return words


def _value_type(annotation: Any) -> type:
    """``int`` for ``int | None``; the one type a flag's value converts to."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        kinds = [kind for kind in typing.get_args(annotation) if kind is not type(None)]
        if len(kinds) != 1:
            raise TypeError(f"a flag field needs one value type, not {annotation}")
        return kinds[0]
    return annotation


def _metavar(field: dataclasses.Field) -> str:
    if "metavar" in field.metadata:
        return field.metadata["metavar"]
    if "choices" in field.metadata:
        return "{" + ",".join(field.metadata["choices"]) + "}"
    return field.name.split("_")[-1].upper()


def _default_text(field: dataclasses.Field, kind: type) -> str:
    """`` (default X)`` when the dataclass has a default to show (None: the help says what happens)."""
    default = field.default
    if default is None or default is dataclasses.MISSING:
        return ""
    if kind is bool:
        return f" (default {'on' if default else 'off'})"
    return f" (default {default:g})" if isinstance(default, float) else f" (default {default})"
