"""A method that never finishes: each rank records its pid (so the test can see they were killed) and sleeps."""

import os
import sys
import time
from pathlib import Path

spec = Path(sys.argv[1])
(spec.parent / f"hang.{os.getpid()}.pid").touch()  # every rank: all must be gone after the timeout
while True:
    time.sleep(1)
