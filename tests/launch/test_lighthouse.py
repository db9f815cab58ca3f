"""torchft's Lighthouse as node 0's launcher starts it: its address is waited for within a guard. (Another
node's wait is in test_replica_groups.py; its loss and restart mid-run are tested with the strategy they serve:
tests/strategy/test_ft_ddp.py.)"""

from __future__ import annotations


def test_the_first_line_of_a_process_is_waited_for_within_its_guard():
    """A Lighthouse that never prints its address must not hold the launcher without end."""
    import subprocess
    import sys

    from paratrain.launch.lighthouse import first_line

    talks = subprocess.Popen([sys.executable, "-c", "print('http://vm:29510', flush=True); import time; time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"], stdout=subprocess.PIPE, text=True)
    try:
        assert first_line(talks, 20.0) == "http://vm:29510"
        assert first_line(silent, 0.5) is None
        assert first_line(gone, 20.0) == ""
    finally:
        for process in (talks, silent, gone):
            process.kill()
            process.wait()
