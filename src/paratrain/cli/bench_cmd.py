"""``paratrain bench``: train one task with every method and compare them in one table (time, samples/s,
speed-up, memory, dev accuracy, loss parity)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from pathlib import Path

MANUAL = """\
Train the same model with every way there is to spread it over processes, one
method at a time, each in its own process tree with a --timeout, and compare:
wall time (start-up included), time to the first step, steady-state samples/s,
peak memory, final train loss, dev accuracy on every dev sample, speed-up and
loss parity against `single`.

Methods (--methods a,b,... or all):
{methods}
A method whose library is missing is a row that says how to install it
(pip install 'paratrain[bench]'; horovod: paratrain bench --install-horovod).
hsdp runs on this one machine as an explicit 2-D mesh, replicate 2 × shard N/2
(its default, one replica per node, would be fsdp here); with an odd
--nproc-per-node its row is "not run" and says why.

Noise shown, not hidden: --repeats rounds (default 3), every method once per
round and the order rotated each round; each figure is the median with the
slowest and fastest run beside it, and a method is called faster or slower than
the baseline (--baseline, default the fastest of the methods that trained what
single trained) only when the two ranges do not overlap; beside the verdict, its
samples/s over the baseline's in the same round (median and range: the
machine's drift between rounds taken out). Each steady-state window lasts at
least --min-time seconds (the steps are raised for every method when the first
measured one is shorter). Other work
on the machine just before, during and just after each run is noted on its row.
A method that trained and wrote its results but crashed on its way out is
measured, with a note quoting the crash.

Tuning (--tune --budget MINUTES): which of paratrain's own settings train this
task fastest here. Strategy (ddp, fsdp, hsdp as replicate 2 × shard N/2 with an
even N of 4 or more, or one process) × precision × micro-batches
per process (gradient accumulation keeps the global batch) × torch.compile ×
gradient compression, only the values that run on this machine: the default
settings first, then one factor at a time from the best so far, each candidate a
real run of --steps steps (more when the default's steady state is shorter than
--min-time). A candidate whose losses leave the default's (full
precision) or whose dev metric falls below it by more than two standard errors is
left out; the fastest of the rest is printed with its `paratrain train` line and
its pt.Runtime(...) / pt.fit(...) arguments (also in DIR/tune.json). The search
stops before a run that would not end within the budget.

Fair by construction: every method loads the same initial weights, reads the same
samples in the same order, takes --steps optimizer steps of the same global batch
(--batch-size, split evenly over the processes) with the task's optimizer at a
constant learning rate, dropout off; the bench then scores each method's final
weights on the whole dev set with the same code.

Your own model (--task): a built-in task name, or a task object of yours:
  --task examples.my_task:TASK        a module importable from the current directory
  --task path/to/my_task.py:TASK      a file, from anywhere
The object implements paratrain's task interface (datasets, collate, build_model,
forward, evaluator): see examples/my_task.py and docs/benchmarks.md.

Recipes:
  paratrain bench --task digits --nproc-per-node 2
  paratrain bench --task digits --methods single,ddp --repeats 1 --min-time 0 --steps 20   # a quick look
  paratrain bench --task text-cls --repeats 5 --baseline ddp
  paratrain bench --task text-cls --nproc-per-node 2 --steps 200
  paratrain bench --task examples.my_task:TASK --methods single,ddp,accelerate
  paratrain bench --task digits --tune --budget 5      # the fastest settings, in 5 minutes at most
  paratrain bench --install-horovod          # build horovod 0.28.1 for this torch (~3 min)

Output (--out DIR, default runs/bench-TASK; runs/bench-FILE-ATTR for a task of
yours; relative paths are taken from the current folder): bench.md (the table,
also printed), bench.json (every figure of every run, the machine, versions, the
command), bench.png (chart with ranges), methods/NAME/round-R/ (each run's spec,
log and records).
"""


def manual() -> str:
    """The command's help: :data:`MANUAL` with the methods and their summaries from the method registry."""
    from paratrain.bench.methods import METHODS

    width = max(len(name) for name in METHODS) + 2
    return MANUAL.replace("{methods}", "\n".join(f"  {name:<{width}}{method.summary}" for name, method in METHODS.items()))


def register(subparsers) -> None:
    """Add the ``bench`` command."""
    from paratrain.bench.methods import METHODS

    parser = subparsers.add_parser(
        "bench",
        help=f"compare {', '.join(METHODS)} on one task",
        description=manual(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="paratrain bench [--task NAME | --task module:attr] [--methods a,b,...|all] [options]",
    )
    parser.add_argument("--task", default="digits", help="built-in task, module:attr or path/file.py:attr (default digits)")
    parser.add_argument("--methods", metavar="a,b,...|all", help="methods to run, in order (default all)")
    parser.add_argument("--nproc-per-node", type=int, default=2, metavar="N", help="processes of the multi-process methods (default 2)")
    parser.add_argument("--steps", type=int, default=60, metavar="S", help="optimizer steps per method (default 60)")
    parser.add_argument("--batch-size", type=int, metavar="B", help="global batch: samples per step over all processes (default: the task's per-process batch × N)")
    parser.add_argument("--lr", type=float, help="learning rate (default: the task's)")
    parser.add_argument("--precision", choices=("32-true", "bf16-mixed", "fp16-mixed"),
                        help="precision of every method but ddp-amp (default 32-true)")
    parser.add_argument("--zero-stage", type=int, default=2, choices=(1, 2, 3), help="deepspeed's ZeRO stage (default 2)")
    parser.add_argument("--timeout", default="900", metavar="SECONDS[,METHOD=SECONDS...]",
                        help="limit per method, start-up included (default 900); e.g. 600,hf-trainer=1200")
    parser.add_argument("--warmup-steps", type=int, metavar="W", help="steps left out of samples/s (default: a fifth of --steps, 1 to 10)")
    parser.add_argument("--seed", type=int, default=42, help="initial weights and data order (default 42)")
    parser.add_argument("--repeats", type=int, metavar="N",
                        help="rounds: every method once per round, the order rotated; median and range per figure (default 3; 1 for a quick look)")
    parser.add_argument("--min-time", type=float, metavar="SECONDS",
                        help="shortest measured window: more steps for every method when the first one's steady state is shorter (default 3; 0: exactly --steps)")
    parser.add_argument("--baseline", metavar="METHOD",
                        help="judge every method faster / slower / indistinguishable against this one (default: the fastest median of the methods that trained what single trained)")
    parser.add_argument("--out", metavar="DIR", help="output directory (default runs/bench-TASK)")
    parser.add_argument("--tune", action="store_true",
                        help="search strategy × precision × micro-batches × compile × grad compression for the fastest "
                             "settings of this task within --budget, and print the paratrain train / pt.Runtime line")
    parser.add_argument("--budget", type=float, metavar="MINUTES", help="with --tune: how long the search may run")
    task = parser.add_argument_group("task options")
    task.add_argument("--data", help="directory with the task's data files (mnist)")
    task.add_argument("--model-path", help="local pretrained model directory (text-cls)")
    task.add_argument("--limit-train", type=int, metavar="N", help="use only the first N training samples")
    task.add_argument("--limit-eval", type=int, metavar="N", help="use only the first N dev samples")
    task.add_argument("--max-len", type=int, metavar="N", help="longest input in tokens (text tasks)")
    parser.add_argument("--list", action="store_true", help="list the methods and whether each can run here, then exit")
    parser.add_argument("--install-horovod", action="store_true",
                        help="build horovod 0.28.1 against this torch (needs cmake and g++; ~3 min) and exit")
    parser.set_defaults(handler=handler)


def handler(args: argparse.Namespace) -> int:
    from paratrain.bench.methods import METHODS, load_plugins, select_methods

    if args.install_horovod:
        from paratrain.bench.horovod_install import install_horovod

        log = install_horovod()
        print(f"horovod installed (build log: {log}); `paratrain bench --methods horovod` now measures it")
        return 0
    load_plugins()
    if args.tune or args.budget is not None:
        check_tune_options(args)
    elif args.list:
        for method in METHODS.values():
            print(f"  {method.name:<17} {method.summary}" + (f"  [{method.missing()}]" if method.missing() else ""))
        return 0
    from paratrain.tasks import task_ref
    from paratrain.bench.session import Bench
    from paratrain.bench.settings import BenchSettings, parse_timeouts
    from paratrain.tasks.api import TaskOptions

    if args.tune:
        return tune(args)
    methods = select_methods(args.methods or "all")
    timeout, method_timeouts = parse_timeouts(args.timeout, [m.name for m in methods])
    settings = BenchSettings(
        task=args.task,
        methods=methods,
        out=Path(args.out or f"runs/bench-{task_ref.label(args.task)}"),
        nproc=args.nproc_per_node,
        steps=args.steps,
        global_batch=args.batch_size,
        lr=args.lr,
        precision=args.precision or "32-true",
        zero_stage=args.zero_stage,
        timeout_s=timeout,
        method_timeouts=method_timeouts,
        seed=args.seed,
        warmup_steps=args.warmup_steps,
        task_options=TaskOptions(data=args.data, model_path=args.model_path, limit_train=args.limit_train,
                                 limit_eval=args.limit_eval, max_len=args.max_len),
        command=["paratrain", *sys.argv[1:]] if sys.argv[1:2] == ["bench"] else ["paratrain", "bench"],
        repeats=3 if args.repeats is None else args.repeats,
        min_time_s=3.0 if args.min_time is None else args.min_time,
        baseline=args.baseline,
    )
    bench = Bench(settings)
    with terminate_as_interrupt():
        bench.run()
    return 0


# What --tune decides itself, or does not do: each would be silently ignored.
NOT_WITH_TUNE = {"methods": "--methods does not go with it (the candidates are paratrain's own settings)",
                 "precision": "--precision does not go with it (it tries every precision that runs here)",
                 "repeats": "--repeats does not go with it (one run per candidate; re-check a close call with the bench)",
                 "baseline": "--baseline does not go with it (every candidate is judged against the default settings)",
                 "list": "--list does not go with it", "install_horovod": "--install-horovod does not go with it"}


def check_tune_options(args: argparse.Namespace) -> None:
    """``--tune`` needs a positive ``--budget``, ``--budget`` needs ``--tune``, and neither goes with
    an option the search would ignore.

    Raises:
        ConfigError: names the option and what to do instead.
    """
    from paratrain.bench.tune import check_budget
    from paratrain.errors import ConfigError

    if not args.tune:
        raise ConfigError("--budget goes with --tune (paratrain bench --tune --budget MINUTES)")
    check_budget(args.budget)
    for name, text in NOT_WITH_TUNE.items():
        if getattr(args, name) not in (None, False):
            raise ConfigError(f"--tune: {text}; leave it out")


def tune(args: argparse.Namespace) -> int:
    """``paratrain bench --tune --budget MINUTES``: the fastest settings of the task within the budget."""
    from paratrain.tasks import task_ref
    from paratrain.bench.session import Bench
    from paratrain.bench.settings import BenchSettings, parse_timeouts
    from paratrain.bench.tune import check_budget
    from paratrain.bench.tune_session import Tune
    from paratrain.tasks.api import TaskOptions

    from paratrain.bench.round_plan import check_rounds

    min_time = 3.0 if args.min_time is None else args.min_time
    check_rounds(1, min_time)  # before Bench creates --out
    timeout, _ = parse_timeouts(args.timeout, [])
    settings = BenchSettings(
        task=args.task, methods=[], out=Path(args.out or f"runs/tune-{task_ref.label(args.task)}"),
        nproc=args.nproc_per_node, steps=args.steps, global_batch=args.batch_size, lr=args.lr, timeout_s=timeout,
        seed=args.seed, warmup_steps=args.warmup_steps, repeats=1, min_time_s=0.0,
        task_options=TaskOptions(data=args.data, model_path=args.model_path, limit_train=args.limit_train,
                                 limit_eval=args.limit_eval, max_len=args.max_len),
    )
    with terminate_as_interrupt():
        Tune(Bench(settings), check_budget(args.budget), min_time_s=min_time).run()
    return 0


@contextlib.contextmanager
def terminate_as_interrupt():
    """SIGTERM (``kill``, a batch system's time limit) stops the bench like Ctrl-C does: the running
    method's process tree is killed before the bench exits, instead of being left orphaned."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
