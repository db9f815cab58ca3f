"""Which tests are slow, from a full run's durations: ``python3 tools/slow_tests.py DURATIONS.txt``.

DURATIONS.txt is the output of ``python3 -m pytest --durations=0 …`` (its ``1.23s call tests/…::test_x``
lines; setup, call and teardown are added up per test). Every test that took at least
:data:`THRESHOLD_S` is written, one node id per line, to ``tests/slow_tests.txt``, which
``tests/conftest.py`` reads to mark them ``slow``: ``pytest -m "not slow"`` is then the quick loop
(unit tests and in-process checks), and plain ``pytest`` (CI) still runs everything.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

THRESHOLD_S = 1.5  # every test that starts a process is above it; unit tests are far below
LIST = Path(__file__).resolve().parents[1] / "tests" / "slow_tests.txt"
_LINE = re.compile(r"^\s*([\d.]+)s\s+(setup|call|teardown)\s+(\S.*?)\s*$")


def durations(text: str) -> dict[str, float]:
    """Seconds per test node id, setup + call + teardown."""
    total: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:  # pytest-xdist's --dist loadgroup appends "@group" to the node id
            total[match.group(3).split("@", 1)[0]] += float(match.group(1))
    return dict(total)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    measured = durations(Path(argv[0]).read_text(encoding="utf-8", errors="replace"))
    if not measured:
        print(f"{argv[0]} has no --durations=0 lines", file=sys.stderr)
        return 1
    slow = sorted(nodeid for nodeid, seconds in measured.items() if seconds >= THRESHOLD_S)
    header = (f"# Tests that took >= {THRESHOLD_S} s in a full run (tools/slow_tests.py); marked `slow`, "
              "left out by pytest -m 'not slow'.\n")
    LIST.write_text(header + "".join(f"{nodeid}\n" for nodeid in slow), encoding="utf-8")
    print(f"{len(slow)} of {len(measured)} tests are slow; written to {LIST}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
