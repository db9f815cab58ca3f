"""``ddp`` that trains and writes every result, then dies on its way out: rank 1 aborts the way a C++
destructor does (the hf-trainer case: SIGABRT after the last step)."""

import os
import sys

from paratrain.bench.scripts.paratrain_loop import train

if __name__ == "__main__":
    train(sys.argv[1])
    if os.environ.get("RANK") == "1":
        sys.stderr.write("terminate called without an active exception\n")
        sys.stderr.flush()
        os.abort()
