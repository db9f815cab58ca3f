"""Which --local-rank spelling a legacy script parses."""

import pytest

from paratrain.errors import ConfigError
from paratrain.launch.legacy import (
    local_rank_argument,
    parses_local_rank,
    spelling_in_source,
)
from tests.launch.test_config import ALLREDUCE, LEGACY


def test_spelling_in_source():
    assert spelling_in_source("p.add_argument('--local_rank', type=int)") == "local_rank"
    assert spelling_in_source("p.add_argument('--local-rank', type=int)") == "local-rank"
    assert spelling_in_source("p.add_argument('--local-rank', '--local_rank')") == "local_rank"
    assert spelling_in_source("rank = int(os.environ['LOCAL_RANK'])") == "local-rank"  # torch >= 2.0's choice
    assert spelling_in_source(None) == "local-rank"


def test_local_rank_argument_reads_scripts_and_modules():
    assert local_rank_argument("auto", LEGACY) == "--local_rank=${local_rank}"
    assert local_rank_argument("local-rank", LEGACY) == "--local-rank=${local_rank}"
    assert local_rank_argument("auto", "tests.launch.probe", module=True) == "--local-rank=${local_rank}"
    assert parses_local_rank(LEGACY) and not parses_local_rank(ALLREDUCE)
    with pytest.raises(ConfigError, match="not one of"):
        local_rank_argument("localrank", LEGACY)
