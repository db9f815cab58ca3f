"""W&B's start-up wait: read from the environment, a bad value refused in one line (W&B itself need not be installed)."""

import pytest

from paratrain.errors import ConfigError
from paratrain.trackers.wandb_runs import _init_timeout


@pytest.mark.parametrize("value, seconds", [(None, 30.0), ("", 30.0), ("12.5", 12.5), (" 4 ", 4.0)])
def test_the_start_up_wait_is_the_variables_or_30_seconds(monkeypatch, value, seconds):
    if value is None:
        monkeypatch.delenv("WANDB_INIT_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("WANDB_INIT_TIMEOUT", value)
    assert _init_timeout() == seconds


@pytest.mark.parametrize("value", ["30s", "0", "-1", "nan", "inf"])
def test_a_start_up_wait_that_is_not_a_positive_number_is_one_line_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", value)
    with pytest.raises(ConfigError, match=r"WANDB_INIT_TIMEOUT=.* must be a positive number of seconds; .*=30"):
        _init_timeout()
