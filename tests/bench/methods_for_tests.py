"""Extra methods for the bench tests, registered through PARATRAIN_BENCH_PLUGINS=tests.bench.methods_for_tests."""

from pathlib import Path

from paratrain.bench.methods import Method, register

SCRIPTS = Path(__file__).resolve().parent / "scripts"

register(Method("lr-double", "single with twice the learning rate", str(SCRIPTS / "lr_double.py"), "python",
                multi_process=False))
register(Method("decayed-once", "single with its weights decayed once, as Horovod's broadcast_optimizer_state leaves them",
                str(SCRIPTS / "decayed_once.py"), "python", multi_process=False))
register(Method("raises", "raises at start", str(SCRIPTS / "raises.py"), "python", multi_process=False))
register(Method("hangs", "never ends", str(SCRIPTS / "hangs.py"), "paratrain run"))
register(Method("absent", "needs a library that is not installed", str(SCRIPTS / "raises.py"), "python",
                needs=("paratrain_no_such_library",)))
register(Method("crashes-at-exit", "ddp whose rank 1 aborts after writing its results",
                str(SCRIPTS / "crashes_at_exit.py"), "paratrain run", options={"strategy": "ddp"}))
