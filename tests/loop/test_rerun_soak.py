"""The rerun contract in CI: seven kinds of fault, the same command after each, the same final weights.

The long, random, seeded version is ``python benchmarks/rerun_soak.py --faults 50`` (its last
result is in docs/run-directory.md). Before the run-directory guarantees the first fault alone
(a crash before the first checkpoint) left a failure.json that made the rerun refuse the directory.
"""

from __future__ import annotations

from benchmarks.rerun_soak import KINDS, Soak
from tests.support import clean_env


def test_every_kind_of_fault_then_the_same_command_ends_bit_identical_with_no_orphan_or_temporary(tmp_path):
    soak = Soak(tmp_path, steps=600, env=clean_env())
    result = soak.run(list(KINDS), seed=0)
    report = "\n".join(result.lines())
    assert result.faults == {kind: 1 for kind in KINDS}, report
    assert result.attempts == len(KINDS) + 1, report
    assert result.identical, report
    assert not result.orphans and not result.temporaries, report
    assert result.exit_codes[0] == 1, report  # only the last run finished; every fault ended its run
    assert result.exit_codes[75] >= 1 and result.exit_codes[130] >= 1, report  # SIGTERM and Ctrl-C saved and said so
    numbers = result.attempt_records
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= len(KINDS), report
