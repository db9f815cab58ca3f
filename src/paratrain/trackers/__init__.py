"""Experiment trackers: ``--log-with tensorboard,csv,mlflow,wandb`` / ``pt.fit(log_with=...)`` / ``rt.log``.

Every module of this package other than ``api`` and ``hub`` is one tracker, registered by name
(:func:`~paratrain.trackers.api.register`): adding a tracker is adding one file. Rank 0 feeds them through
:class:`~paratrain.trackers.hub.Trackers`, which keeps their run ids in the run directory so a resumed or
restarted run continues the same tracker run.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Iterable

from paratrain.errors import ConfigError
from paratrain.trackers.api import TRACKERS, RunInfo, Tracker, register

__all__ = ["TRACKERS", "RunInfo", "Tracker", "register", "available", "parse_names"]

_NOT_TRACKERS = ("api", "hub")


def available() -> dict[str, type[Tracker]]:
    """Every tracker by name (imports this package's modules; the trackers' own packages load only when opened)."""
    for module in pkgutil.iter_modules(__path__):
        if module.name not in _NOT_TRACKERS:
            importlib.import_module(f"{__name__}.{module.name}")
    return TRACKERS


def parse_names(value: str | Iterable[str] | None, where: str = "--log-with") -> tuple[str, ...]:
    """``"mlflow, wandb"`` or ``["mlflow", "wandb"]`` → ``("mlflow", "wandb")``, each name known.

    Raises:
        ConfigError: an unknown name (with the closest known one) or a value of the wrong type.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        words = value.split(",")
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        words = list(value)
    else:
        raise ConfigError(f"{where} takes tracker names (a comma-separated str or a list), got {value!r}")
    known = available()
    names: list[str] = []
    for word in (w.strip().lower() for w in words):
        if not word or word in names:
            continue
        if word not in known:
            close = difflib.get_close_matches(word, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{where}: unknown tracker {word!r}{hint} Known: {', '.join(sorted(known))}")
        names.append(word)
    return tuple(names)
