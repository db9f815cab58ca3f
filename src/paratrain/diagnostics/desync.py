"""Desync guards: refuse, at setup, ranks that would train different things.

Ranks that run different paratrain or torch versions, different configs, strategies,
precisions or model structures do not fail cleanly: they hang in a collective whose
sizes differ, or all-reduce unrelated tensors into silent garbage. One
``all_gather_object`` of a small fingerprint at setup turns that into an error listing
each rank that differs and its value, on every rank, within seconds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import torch

from paratrain import comm
from paratrain.errors import DistributedError


def fingerprint(runtime: Any = None, model: torch.nn.Module | None = None, config: Any = None) -> dict[str, str]:
    """What must be equal on every rank: versions, strategy, precision, parameters, config hash."""
    from paratrain._version import __version__

    found = {"paratrain": __version__, "torch": torch.__version__}
    if runtime is not None:
        found["strategy"] = runtime.strategy.name
        found["precision"] = runtime.precision.name
    if model is not None:
        found["parameters"] = structure_digest(model)
    if config is not None:
        found["config"] = _digest(config)
    return found


def parameter_table(model: torch.nn.Module) -> list[tuple[str, list[int], str]]:
    """``(name, shape, dtype)`` of every parameter and buffer, in order."""
    tensors = list(model.named_parameters()) + list(model.named_buffers())
    return [(name, list(t.shape), str(t.dtype).replace("torch.", "")) for name, t in tensors]


def structure_digest(model: torch.nn.Module) -> str:
    """A short hash of :func:`parameter_table`: equal for models of one structure, whatever their values."""
    return _digest(parameter_table(model))


def check_same_setup(runtime: Any = None, model: torch.nn.Module | None = None, config: Any = None) -> None:
    """Fail on every rank when the ranks' fingerprints differ. Collective.

    ``config`` is anything JSON-serialisable (dataclasses and mappings are fine): the
    run's options; its hash is compared. Without a process group it does nothing.

    Raises:
        CollectiveTimeoutError: a rank did not reach setup in time (names it).
        DistributedError: names each differing item, with every rank's value (for
            parameters: the first parameter that differs).
    """
    if comm.world_size() == 1:
        return
    comm.barrier(name="setup checks")
    mine = fingerprint(runtime, model, config)
    everyone = comm.all_gather_object(mine)
    differing = [key for key in mine if len({str(f.get(key)) for f in everyone}) > 1]
    if not differing:
        return
    problems = []
    for key in differing:
        if key == "parameters":
            tables = comm.all_gather_object(parameter_table(model))  # every rank takes this branch: collective
            problems.append(_first_parameter_difference(tables))
        elif key == "config":
            configs = comm.all_gather_object(_flat(json.loads(json.dumps(config, sort_keys=True, default=_plain))))
            problems.append(_config_difference(configs))
        else:
            problems.append(f"{key} differs: " + _by_value(everyone, key))
    raise DistributedError("ranks disagree at setup: " + "; ".join(problems))


def _by_value(fingerprints: list[Mapping[str, str]], key: str) -> str:
    """``rank 0, 2: 2.13.0 / rank 1: 2.12.1`` — ranks grouped by the value they have."""
    groups: dict[str, list[int]] = {}
    for rank, found in enumerate(fingerprints):
        groups.setdefault(str(found.get(key)), []).append(rank)
    return " / ".join(f"rank{'s' * (len(r) > 1)} {', '.join(map(str, r))}: {value}" for value, r in groups.items())


def _first_parameter_difference(tables: list[list[tuple[str, list[int], str]]]) -> str:
    reference = tables[0]
    for rank, table in enumerate(tables[1:], start=1):
        if table == reference:
            continue
        for index in range(max(len(reference), len(table))):
            ours = reference[index] if index < len(reference) else None
            theirs = table[index] if index < len(table) else None
            if ours != theirs:
                return (f"the model differs: parameter #{index} is {_describe(ours)} on rank 0 but {_describe(theirs)} "
                        f"on rank {rank}; build the same model on every rank")
    return "the model differs across ranks; build the same model on every rank"


def _config_difference(configs: list[Any]) -> str:
    fix = "give every rank the same options (arguments, environment, files)"
    if not all(isinstance(c, dict) for c in configs):
        return "the config differs: " + " / ".join(f"rank {r}: {c!r}" for r, c in enumerate(configs)) + f"; {fix}"
    keys = sorted({k for c in configs for k in c if len({json.dumps(d.get(k), sort_keys=True) for d in configs}) > 1})
    shown = [f"{k} (" + ", ".join(f"rank {r}: {c.get(k)!r}" for r, c in enumerate(configs)) + ")" for k in keys[:3]]
    more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
    return f"the config differs: {'; '.join(shown)}{more}; {fix}"


def _flat(value: Any, prefix: str = "") -> Any:
    """``{"fit": {"lr": 0.1}}`` → ``{"fit.lr": 0.1}``, so a difference names the one option."""
    if not isinstance(value, dict):
        return value if not prefix else {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        flat.update(_flat(item, name) if isinstance(item, dict) else {name: item})
    return flat


def _describe(entry: tuple[str, list[int], str] | None) -> str:
    return "missing" if entry is None else f"{entry[0]} {tuple(entry[1])} {entry[2]}"


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _plain(value: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return repr(value)
