"""Precisions by name: the registry.

=============  ====================================================================
``32-true``    fp32 everywhere (TF32 matmuls on CUDA unless ``tf32=False``)
``bf16-mixed`` autocast to bfloat16, fp32 weights, no scaler
``fp16-mixed`` autocast to float16, fp32 weights, ``GradScaler`` (state checkpointed)
=============  ====================================================================

A precision registers itself with the :func:`register_precision` decorator on its class; the
ones that ship with paratrain are found by their files' presence (every module of this package
is imported once, with this one), as strategies are (:mod:`paratrain.strategy`).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TypeVar

import torch

from paratrain.errors import ConfigError
from paratrain.precision.api import Precision

#: Registered precisions by name, in registration order.
PRECISIONS: dict[str, type[Precision]] = {}

_PrecisionType = TypeVar("_PrecisionType", bound=type)


def register_precision(cls: _PrecisionType) -> _PrecisionType:
    """Class decorator: register a :class:`Precision` subclass under its ``name``; returns it.

    Raises:
        ConfigError: ``cls`` is not a Precision subclass with a ``name``.
    """
    if not (isinstance(cls, type) and issubclass(cls, Precision)) or not isinstance(getattr(cls, "name", None), str):
        raise ConfigError(f"register_precision takes a Precision subclass with a name, got {cls!r}")
    PRECISIONS[cls.name] = cls
    return cls


def precision_names() -> str:
    """``32-true, bf16-mixed, …``: every registered name, for help texts and errors."""
    return ", ".join(PRECISIONS)


def precision_class(precision: str | Precision) -> type[Precision]:
    """The class of a precision name or object.

    Raises:
        ConfigError: ``precision`` is not a registered name (lists them).
    """
    if isinstance(precision, Precision):
        return type(precision)
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; choose one of: {precision_names()}")
    return PRECISIONS[precision]


def create_precision(precision: str | Precision, device: torch.device) -> Precision:
    """The precision ``precision`` names (or one of the given object's class) for ``device``,
    checked first (:func:`check_precision`).

    Raises:
        ConfigError: unknown name (lists the valid ones) or not supported on ``device``.
    """
    check_precision(precision, device)
    return precision_class(precision)(device)


def check_precision(precision: str | Precision, device: torch.device | None = None) -> None:
    """Refuse an unknown precision name, and one that ``device`` cannot compute in
    (a small autocast probe on it; ``None``: the name alone).

    Raises:
        ConfigError: ``precision`` is not a registered precision (lists them), or ``device`` cannot run it.
    """
    cls = precision_class(precision)
    if device is not None:
        cls.check_device(device)


def _import_builtin_precisions() -> None:
    first = ("fp32", "bf16", "fp16")  # the order help texts list them in
    others = sorted(module.name for module in pkgutil.iter_modules(__path__) if module.name not in first)
    for module in (*first, *others):
        importlib.import_module(f"{__name__}.{module}")


_import_builtin_precisions()

__all__ = ["PRECISIONS", "Precision", "check_precision", "create_precision", "precision_class", "precision_names",
           "register_precision"]
