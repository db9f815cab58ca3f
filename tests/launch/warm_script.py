"""A worker for the warm-pool tests: notes how it started, then trains (``train``) or plays a failure.

    python warm_script.py OUT train [plain_ddp.py's arguments]
    python warm_script.py OUT failures

It writes ``OUT/started.<attempt>.<rank>.json`` first: its pid and parent's, the launcher's pid, whether torch
was imported before its first line (a warm worker's pool imported it), and what Python set up for it.
``train`` then runs ``tests/clients/scripts/plain_ddp.py`` (kills rank 1 at ``--die-at``). ``failures``: rank 0
sleeps until stopped; rank 1 waits to be SIGKILLed from outside in attempt 0, exits with code 3 in attempt 1,
raises ValueError through torch's ``record`` in attempt 2, kills itself with SIGSEGV in attempt 3 and waits again
in attempt 4.
"""

import json
import os
import signal
import sys
import time

TORCH_BEFORE = "torch" in sys.modules
out, mode = sys.argv[1], sys.argv[2]
attempt, rank = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), int(os.environ["RANK"])
facts = {
    "torch_before": TORCH_BEFORE, "pid": os.getpid(), "ppid": os.getppid(),
    "launcher": int(os.environ["PARATRAIN_LAUNCHER_PID"]), "path0": sys.path[0], "file": __file__,
    "name": __name__, "argv0": sys.argv[0], "cwd": os.path.basename(os.getcwd()), "stdout": [sys.stdout.encoding, sys.stdout.write_through],
    "stderr": [sys.stderr.encoding, sys.stderr.write_through], "stdout_is_file": os.path.isfile(f"/proc/self/fd/1"),
}
path = os.path.join(out, f"started.{attempt}.{rank}.json")
with open(path + ".tmp", "w") as file:
    json.dump(facts, file)
os.replace(path + ".tmp", path)
print(f"attempt {attempt} rank {rank} started", flush=True)

if mode == "train":
    import runpy

    here = os.path.dirname(os.path.abspath(__file__))
    sys.argv = ["plain_ddp.py", out, *sys.argv[3:]]
    runpy.run_path(os.path.join(here, "..", "clients", "scripts", "plain_ddp.py"), run_name="__main__")
elif rank == 1 and attempt == 1:
    time.sleep(0.5)
    sys.exit(3)
elif rank == 1 and attempt == 2:
    from torch.distributed.elastic.multiprocessing.errors import record

    @record  # into torch elastic's error file, which the launcher reads
    def fail():
        time.sleep(0.5)
        raise ValueError("bad input 7")

    fail()
elif rank == 1 and attempt == 3:
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGSEGV)
else:
    time.sleep(600)
