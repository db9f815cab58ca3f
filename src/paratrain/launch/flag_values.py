"""One ``paratrain run`` flag's text → its value, or a one-line :class:`ConfigError` naming the flag.

Flags arrive as strings (from the command line or, as in torchrun, from ``PET_*``
variables); :class:`~paratrain.launch.config.LaunchConfig` builds itself with these.
"""

from __future__ import annotations

from paratrain.env.cpu_binding import usable_cpus
from paratrain.errors import ConfigError

NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")


def parse_nnodes(value: str) -> tuple[int, int]:
    """``"2"`` → (2, 2); ``"1:4"`` → (1, 4).

    Raises:
        ConfigError: not ``N`` or ``MIN:MAX`` with integers.
    """
    parts = str(value).split(":")
    if len(parts) > 2:
        raise ConfigError(f"--nnodes {value!r} is not N or MIN:MAX")
    numbers = [parse_int("--nnodes", part) for part in parts]
    return numbers[0], numbers[-1]


def parse_nproc(value: str) -> int:
    """torchrun's ``--nproc-per-node``: ``"4"`` → 4; ``cpu`` → the CPUs this process may use;
    ``gpu``/``xpu`` → the visible devices of that kind; ``auto`` → the accelerators, else the CPUs.

    Raises:
        ConfigError: not a number nor one of auto, cpu, gpu, xpu; ``gpu``/``xpu`` with none visible.
    """
    word = str(value).lower()
    if word.lstrip("-").isdigit():
        return int(word)
    if word not in NPROC_WORDS:
        raise ConfigError(f"--nproc-per-node {value!r} is neither a number nor 'auto' (or cpu, gpu, xpu)")
    if word == "cpu":
        return len(usable_cpus())
    import torch

    if word == "auto":
        return torch.accelerator.device_count() if torch.accelerator.is_available() else len(usable_cpus())
    device = torch.cuda if word == "gpu" else torch.xpu
    if not device.is_available():
        raise ConfigError(f"--nproc-per-node {word} needs a visible {word.upper()}, and none is; give a number or cpu")
    return device.device_count()


def parse_seconds(flag: str, value) -> float | None:
    """A number of seconds; None when not given.

    Raises:
        ConfigError: not a number.
    """
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{flag} {value!r} is not a number of seconds") from None


def parse_local_ranks(flag: str, value) -> tuple[int, ...] | None:
    """``"1,0"`` → (0, 1); None when not given.

    Raises:
        ConfigError: not a comma-separated list of integers.
    """
    if value is None or value == "":
        return None
    try:
        return tuple(sorted({int(part) for part in str(value).split(",")}))
    except ValueError:
        raise ConfigError(f"{flag} {value!r} is not a comma-separated list of local ranks, e.g. 0 or 0,1") from None


def parse_int(flag: str, value, default: int | None = None) -> int | None:
    """An integer; ``default`` when not given.

    Raises:
        ConfigError: not an integer.
    """
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{flag} {value!r} is not an integer") from None
