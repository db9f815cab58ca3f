"""Argument checks at the API boundary, and errors that name the interface the user typed.

The library and the CLI share their checks (``FitConfig``, the output directory),
but a user of ``pt.fit(out_dir=..., fresh=True)`` never typed ``--out``/``--fresh``.
Messages therefore spell options through :func:`option`: keyword arguments by
default, command-line flags while a CLI command runs (:func:`cli_spelling`).

The checks raise :class:`~paratrain.errors.ConfigError` with one line: the
argument, what it got, what it takes — and for a typo, the closest known name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any

from paratrain.errors import ConfigError

#: Option names whose command-line flag is not ``--`` + the name with dashes (the parsers and
#: the errors both spell flags through :func:`cli_flag`).
CLI_FLAGS = {
    "out_dir": "--out",
    "sync_batchnorm": "--sync-bn",
}

#: True while a command of the CLI runs (:func:`cli_spelling`): errors then name ``--flags``.
_CLI_SPELLING: ContextVar[bool] = ContextVar("paratrain_cli_spelling", default=False)


@contextlib.contextmanager
def cli_spelling() -> Iterator[None]:
    """Within this context, :func:`option` spells command-line flags (the CLI's commands run in it)."""
    token = _CLI_SPELLING.set(True)
    try:
        yield
    finally:
        _CLI_SPELLING.reset(token)


def cli_flag(name: str) -> str:
    """The command-line flag of option ``name``: ``--grad-accum`` for ``grad_accum``, or its :data:`CLI_FLAGS` entry."""
    return CLI_FLAGS.get(name, "--" + name.replace("_", "-"))


def option(name: str, value: Any = ...) -> str:
    """``name`` as the user wrote it: ``grad_accum`` / ``fresh=True`` in Python, ``--grad-accum`` / ``--fresh`` on the CLI."""
    if _CLI_SPELLING.get():
        flag = cli_flag(name)
        if value is False:  # a switch's other half (argparse.BooleanOptionalAction)
            return "--no-" + flag[2:]
        return flag if value is ... or value is True else f"{flag} {value}"
    return name if value is ... else f"{name}={value!r}"


def option_field(default: Any, help: str, **flag: Any) -> Any:
    """A config dataclass field that is also a command-line flag, described in its metadata:
    ``help`` (a string, or a function that returns it when the flag is made: a list read from a
    registry), and optionally ``metavar``, ``choices`` (shown in the help; the dataclass checks
    them), ``off`` (the flag's value that means ``None``) and ``flag_type`` (what the flag's
    value is read as, where the annotation also allows objects). :mod:`paratrain.cli.config_flags`
    derives the flag from it; the flag's name is :func:`cli_flag`'s.
    """
    return dataclasses.field(default=default, metadata={"help": help, **flag})


def options_field(sources: Any) -> Any:
    """A config dataclass field that holds the options of another component, as a mapping of
    name → value: ``sources()`` returns ``(owner, dataclass)`` pairs (a strategy's name and its
    ``Options``), and every field with a help of those dataclasses is also a command-line flag
    (:mod:`paratrain.cli.config_flags`) whose value lands in this mapping.
    """
    return dataclasses.field(default_factory=dict, metadata={"flags_from": sources})


def reject_unknown(call: str, given: Iterable[str], known: Iterable[str], hint: str = "") -> None:
    """Refuse keyword arguments of ``call`` that it does not take (a typo, an option of another call).

    Raises:
    ConfigError: a name in ``given`` is not in ``known``; suggests the closest known name.
    """
    known = list(known)
    for name in given:
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        guess = f"did you mean {close[0]!r}?" if close else f"it takes: {', '.join(sorted(known))}"
        raise ConfigError(f"{call} got an unexpected argument {name!r}; {guess}{hint}")


def is_training_object(value: Any) -> bool:
    """A model, optimizer, loader or other stateful object (what a user passes by mistake as an option)."""
    return hasattr(value, "state_dict") and hasattr(value, "load_state_dict")


def reject_objects(call: str, takes: str, **options: Any) -> None:
    """Refuse a model, optimizer or loader passed where ``call`` expects a plain option value.

    Raises:
    ConfigError: an option holds a model/optimizer/loader; says which argument takes such objects.
    """
    for name, value in options.items():
        if is_training_object(value):
            raise ConfigError(
                f"{call}: {name} got a {type(value).__name__}, which is not a value for {name}; {takes}"
            )


def check_type(call: str, name: str, value: Any, kind: str, allow_none: bool = False, error: type[ConfigError] = ConfigError) -> None:
    """Check one argument: ``kind`` is ``"bool"``, ``"int"``, ``"positive int"``, ``"int >= 0"``,
    ``"positive number"`` or ``"str"``.

    Raises:
        ConfigError (or ``error``): the value does not have that type (``"42"`` is not an int, ``"no"`` not a bool).
    """
    if value is None and allow_none:
        return
    is_int = isinstance(value, int) and not isinstance(value, bool)
    ok = {
        "bool": isinstance(value, bool),
        "int": is_int,
        "positive int": is_int and value >= 1,
        "int >= 0": is_int and value >= 0,
        "positive number": isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0,
        "str": isinstance(value, str),
    }[kind]
    if not ok:
        article = "an" if kind[0] in "aeiou" else "a"
        extra = " or None" if allow_none else ""
        raise error(f"{call + ': ' if call else ''}{option(name)} must be {article} {kind}{extra}, got {value!r}")
