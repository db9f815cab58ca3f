"""Keep torch elastic's own log lines out of the way of our one-line errors."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

# Launcher-side loggers; their failure reports repeat what our errors say in one line.
TORCH_LAUNCHER_LOGGERS = (
    "torch.distributed.run",
    "torch.distributed.launcher",
    "torch.distributed.elastic",
    "torch.multiprocessing.spawn",  # "Terminating process N via signal SIGTERM" after a failure
)


@contextlib.contextmanager
def torch_log_level(level: int) -> Iterator[None]:
    """Set the level of torch's launcher loggers for the duration of the block.

    Each torch elastic module sets its own logger's level at import
    (torch.distributed.elastic.utils.logging.get_logger), so setting the parents'
    level is not enough: every existing logger under those names is set, and restored
    afterwards. Workers' stdout/stderr do not go through these loggers and are never hidden.
    """
    import torch.distributed.run  # noqa: F401  (creates the loggers we set)

    manager = logging.Logger.manager
    names = [name for name in list(manager.loggerDict) if name.startswith(TORCH_LAUNCHER_LOGGERS)]
    loggers = [logging.getLogger(name) for name in names]
    saved = [(logger, logger.level) for logger in loggers]
    for logger in loggers:
        logger.setLevel(level)
    try:
        yield
    finally:
        for logger, old in saved:
            logger.setLevel(old)
