"""A method that never finishes: it records its pid (so the test can see it was killed) and sleeps."""

import os
import sys
import time
from pathlib import Path

spec = Path(sys.argv[1])
(spec.parent / "hang.pid").write_text(str(os.getpid()))
while True:
    time.sleep(1)
