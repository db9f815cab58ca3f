"""Two ranks printing partial lines at the same time: the case that merged lines under torchrun."""

import os
import sys

rank = int(os.environ["RANK"])
for index in range(200):
    # Three writes per line, as an unbuffered print(a, b) makes: the worst case for interleaving.
    sys.stdout.write(f"rank{rank}-line{index}")
    sys.stdout.write(f" part-b{rank}")
    sys.stdout.write("\n")
    sys.stdout.flush()
