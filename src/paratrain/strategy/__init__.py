"""Strategies by name: ``create_strategy("ddp", runtime=…)``."""

from __future__ import annotations

from typing import Any

from paratrain.errors import ConfigError
from paratrain.strategy.api import Strategy
from paratrain.strategy.single import SingleDeviceStrategy

STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (SingleDeviceStrategy,)}


def create_strategy(name: str, runtime, **options: Any) -> Strategy:
    """Instantiate the strategy called ``name`` (``auto`` picks from the world size).

    Raises:
        ConfigError: unknown name (lists the valid ones).
    """
    if name == "auto":
        name = "ddp" if runtime.process.world_size > 1 and "ddp" in STRATEGIES else "single"
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ConfigError(f"unknown strategy {name!r}; choose one of: auto, {', '.join(STRATEGIES)}") from None
    return cls(runtime=runtime, **options)


__all__ = ["STRATEGIES", "Strategy", "create_strategy"]
