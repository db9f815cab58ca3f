"""``paratrain run``: start a script on N processes per node, on one or several nodes."""

from __future__ import annotations

import argparse
import sys

from paratrain.launch import torchrun_flags
from paratrain.launch.legacy import CHOICES as LEGACY_CHOICES

MANUAL = """\
Start SCRIPT (or -m MODULE) on --nproc-per-node processes per node through
torch.distributed.run's elastic agent. Each worker gets RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; inside, `pt.Runtime()`
(or plain `torch.distributed.init_process_group("env://")`) joins the group.

Same as torchrun: replace the word `torchrun` (or `python -m torch.distributed.run`)
with `paratrain run`. Every torchrun flag is accepted, with torchrun's meaning,
both spellings (--nproc-per-node / --nproc_per_node), and from its PET_* variable;
the workers see torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
GROUP_RANK, GROUP_WORLD_SIZE, ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,
TORCHELASTIC_RUN_ID, TORCHELASTIC_ERROR_FILE, ...). Where paratrain differs, on purpose
(docs/torchrun-compatibility.md has the table, checked by tests/launch/test_torchrun_compat.py):
  * one node: the rendezvous and gloo listen on 127.0.0.1 only (MASTER_ADDR=127.0.0.1,
    torchrun: localhost) on a free port, --standalone or not;
  * 2+ processes: every console line is whole and tagged [rankN]: (torchrun: as the
    workers write them) -- --output raw for torchrun's console; -r/-t choose as in torchrun;
  * --log-dir also keeps each rank's stdout/stderr (torchrun: only with -r/-t);
  * OMP_NUM_THREADS is cores / local workers (torchrun: 1 with 2+ workers) -- set it to choose;
  * 2+ CPU workers each compute on an equal share of the node's CPUs (pt.Runtime binds
    its compute threads there; gloo's stay free) -- --cpu-binding none to leave them all
    to the scheduler (torchrun's --numa-binding is for GPU workers);
  * extra worker variables, below;
  * --nnodes MIN:MAX restarts up to 3 times unless --max-restarts says otherwise (torchrun: 0);
  * exit codes say what happened (below); --exit-codes torchrun gives torchrun's 1;
  * errors are one line (--verbose adds torch elastic's own log lines); refused at
    once where torchrun would wait: --node-rank outside --nnodes, --standalone with
    several nodes, a busy --master-port, a missing script or module.

One node (no port to pick: a free one is taken, and the rendezvous and gloo
sockets listen on 127.0.0.1 only, so two jobs on one machine never collide):

    paratrain run --nproc-per-node 2 train.py --epochs 3
    paratrain run --standalone --nproc-per-node 2 train.py   # torchrun's spelling works too
    paratrain run --nproc-per-node gpu train.py         # one per GPU (auto: per accelerator, else per CPU)

Two nodes (run one command on each; node 0 is the one at --master-addr, and
every node must reach it on --master-port):

    node0$ paratrain run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 --nproc-per-node 8 train.py
    node1$ paratrain run --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29500 --nproc-per-node 8 train.py

  paratrain exports GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME to the interface
  that routes to --master-addr (one info line says which). Without them gloo
  resolves the host name, often to 127.0.0.1, and the other node gets
  "Connection refused". Set them yourself to choose another interface.

Elastic nodes (c10d rendezvous: any node may start first, 2 to 4 nodes):

    paratrain run --nnodes 2:4 --rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29400 --rdzv-id exp1 train.py

Fault tolerance per step (strategy="ft-ddp", or "ft-fsdp" to shard each group; pip install 'paratrain[ft]'): torchft's
Lighthouse and 3 replica groups of 2 processes each; a group that loses a process is
started again, whole, and heals from a live one while the others train on
(docs/fault-tolerance.md):

    paratrain run --fault-tolerance replicas --replica-groups 3 --nproc-per-node 2 train.py

On several nodes every node runs its groups against node 0's Lighthouse, which listens on
--master-addr:--master-port (default 29500):

    node0$ paratrain run --fault-tolerance replicas --replica-groups 2 --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 train.py
    node1$ paratrain run --fault-tolerance replicas --replica-groups 2 --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 train.py

SLURM (one launcher per node; nodes, node rank, master address and a port
derived from the job id come from SLURM when the flags are not given):

    srun --nodes 2 --ntasks-per-node 1 paratrain run --nproc-per-node 4 train.py

  A step whose CPUs on the node are fewer than --nproc-per-node (CPU workers)
  is refused: ask for srun --cpus-per-task N.

Kubernetes (Kubeflow PyTorchJob): like torchrun, every flag not given is read
from its PET_* variable (PET_NPROC_PER_NODE, PET_NNODES, PET_NODE_RANK,
PET_MASTER_ADDR, PET_MASTER_PORT, PET_RDZV_BACKEND, PET_RDZV_ENDPOINT,
PET_RDZV_ID, PET_MAX_RESTARTS, PET_LOG_DIR, PET_MODULE), so the job's command
is just `paratrain run train.py`; see examples/k8s/.

Legacy scripts that parse --local_rank (torch.distributed.launch style):

    paratrain run --nproc-per-node 2 --legacy-local-rank old_train.py
    paratrain run --nproc-per-node 2 --legacy-local-rank=local-rank old_train.py

  `auto` (the default when the flag is given bare) reads the script to pick
  --local_rank or --local-rank; torch elastic substitutes each worker's number.

Environment for the workers, besides torchrun's (what you set yourself wins):
  OMP_NUM_THREADS      --threads-per-proc, else cores / local processes (at least 1)
  PARATRAIN_BACKEND    --backend; pt.Runtime() follows it
  PARATRAIN_CPU_CORES  each local worker's share of the CPUs (0;1), for pt.Runtime to
                       bind its compute threads to (2+ CPU workers; --cpu-binding none)
  GLOO_SOCKET_IFNAME   lo on one node, the route to the master on several
  NCCL_SOCKET_IFNAME   same
  PARATRAIN_LAUNCHER_PID  the launcher's pid: a worker ends when its launcher is killed
  PARATRAIN_STALL_TIMEOUT --stall-timeout, for the workers' watchdog
  PARATRAIN_WARM_POOL  --warm-workers: the warm pool's socket, where each worker
                       torch's agent starts hands itself over
  TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE  [rank${rank}]: with tagged output (torch's own
                       variable; it tells a worker its lines are tagged already)
  PARATRAIN_PROGRESS_TTY  the terminal rank 0 draws its progress bar on (tagged output
                       on a terminal)
  PARATRAIN_DEBUG=1    full tracebacks from paratrain itself

Output: with 2+ processes every line is whole and tagged ([rank1]: ...), so
two ranks never print onto one line; --local-ranks-filter 0 shows one rank,
--output raw passes the streams through (tqdm bars need it), --log-dir keeps
every rank's stdout/stderr in files (otherwise they go to a temporary folder
that failure messages name, removed when every worker succeeded).

Restarts and preemption:
  --max-restarts R     torch's agent restarts the whole group up to R times when a
                       worker dies; paratrain train / pt.fit / Checkpointer.resume()
                       continue from the newest complete checkpoint
  --warm-workers       a pool on each node imports torch once (started before the
                       workers, ended with the launcher) and every worker is forked
                       from it: a restart skips torch's imports. The workers torch's
                       agent starts are torchrun's (same argv, pids, logs, exit codes
                       and signals); each hands its streams to the pool's child and
                       waits. A worker the pool cannot take starts cold, said in one
                       line. Not with --no-python or --numa-binding
  SIGTERM              (scancel, Kubernetes eviction, kill) to the launcher or the
                       workers: pt.fit / paratrain train finish the step, save, and
                       exit with code 75 (EX_TEMPFAIL, "preempted"); rerun to resume
  --stall-timeout S    every pt.Runtime watches itself: when a rank has waited S
                       seconds inside a collective (default: the process group's
                       timeout), every rank dumps its stacks to its log and the job
                       ends naming the rank(s) not in it, host, step, phase and
                       frames; exit 124. pt.fit / rt.watchdog: S seconds without
                       progress on some rank (default 300). 0: no watchdog
                       (`with rt.busy("evaluation"):` declares a long one-rank phase)

Exit codes (--exit-codes paratrain, the default):
  0                    every worker succeeded
  the worker's own     the rank that failed first exited with it (1-255, but 75 and
                       124: a worker's own 75 or 124 gives 1, the message names it)
  128+N                that rank was killed by signal N, or the launcher was stopped by
                       signal N (SIGTERM with workers that did not save: 143)
  75                   preempted: the workers saved (pt.fit, paratrain train, rt.preemption())
  124                  stalled: the watchdog ended the job (--stall-timeout)
  1                    the rendezvous failed or timed out
  2                    refused flags (nothing started)
  --exit-codes torchrun: 1 for every failure above, as torchrun (refused flags: 2).

Failure modes (each one line and a non-zero exit code):
  a worker fails       names the rank that failed first, how (exit code, signal,
                       likely OOM kill, its exception), its log, and what the other
                       ranks did
  a node never joins   node 0 stops after --rdzv-timeout naming the address
  master unreachable   other nodes stop after --rdzv-timeout naming address:port
  bad flags            refused before anything starts: missing script, fewer
                       than 1 process, --node-rank outside --nnodes, a busy
                       --master-port, --backend nccl without CUDA, a master
                       address that does not resolve
"""


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``run`` command; returns its parser (``train`` reads its process flags there)."""
    parser = subparsers.add_parser(
        "run",
        help="launch a script on N processes / M nodes (torchrun's elastic agent)",
        description=MANUAL,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="paratrain run [flags] script.py [script args] | paratrain run [flags] -m module [args]",
    )
    size = parser.add_argument_group("processes and nodes")
    size.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        metavar="N|auto|cpu|gpu|xpu",
        help="workers on this node (default 1); as torchrun: cpu one per usable CPU, gpu/xpu one per device, "
        "auto one per accelerator, else one per CPU",
    )
    size.add_argument("--nnodes", metavar="N|MIN:MAX", help="number of nodes (default 1, or SLURM's)")
    size.add_argument(
        "--node-rank", "--node_rank", metavar="K", help="this node's rank, 0 to nnodes-1 (static rendezvous)"
    )
    size.add_argument(
        "--max-restarts",
        "--max_restarts",
        metavar="R",
        help="restart the worker group up to R times on failure (default 0; with --nnodes MIN:MAX 3, "
        "where torchrun's is 0: the job's first line says so)",
    )
    size.add_argument(
        "--threads-per-proc", metavar="T", help="OMP_NUM_THREADS per worker (default: cores / local workers)"
    )
    size.add_argument(
        "--cpu-binding",
        choices=("auto", "none"),
        help="auto (default): 2+ CPU workers each compute on an equal share of this node's CPUs of their own "
        "(pt.Runtime binds its compute threads; gloo's stay free); none: the scheduler places every thread",
    )

    rdzv = parser.add_argument_group("rendezvous")
    rdzv.add_argument("--master-addr", "--master_addr", metavar="HOST", help="address of node 0 (several nodes)")
    rdzv.add_argument(
        "--master-port",
        "--master_port",
        metavar="PORT",
        help="port on node 0 (default: a free loopback port on one node, 29500 on several)",
    )
    rdzv.add_argument(
        "--rdzv-backend", "--rdzv_backend", metavar="static|c10d", help="rendezvous kind (default static)"
    )
    rdzv.add_argument("--rdzv-endpoint", "--rdzv_endpoint", metavar="HOST:PORT", help="c10d/etcd rendezvous address")
    rdzv.add_argument("--rdzv-id", "--rdzv_id", metavar="ID", help="job id shared by all nodes (c10d/etcd)")
    rdzv.add_argument(
        "--rdzv-conf",
        "--rdzv_conf",
        metavar="KEY=VALUE,...",
        help="torch's rendezvous options (join_timeout, last_call_timeout, read_timeout, is_host, ...); "
        "they win over the ones --rdzv-timeout and --rdzv-last-call set",
    )
    rdzv.add_argument(
        "--standalone",
        action="store_true",
        default=None,
        help="one node on a free local port, ignoring --rdzv-backend/--rdzv-endpoint/--rdzv-id/--master-port "
        "(what paratrain does on one node anyway)",
    )
    rdzv.add_argument(
        "--local-addr",
        "--local_addr",
        metavar="HOST",
        help="the address this node's agent announces (default on several nodes: the one that routes to node 0)",
    )
    rdzv.add_argument("--rdzv-timeout", metavar="SECONDS", help="how long nodes wait for each other (default 600)")
    rdzv.add_argument(
        "--rdzv-last-call",
        metavar="SECONDS",
        help="with a node range: how long the group waits for more nodes once MIN have joined, at the start "
        "and after losing one (default torch's 30)",
    )

    work = parser.add_argument_group("workers")
    work.add_argument(
        "--backend",
        metavar="auto|gloo|nccl",
        help="process-group backend for pt.Runtime (default auto: nccl on CUDA, else gloo)",
    )
    # `--legacy-local-rank[=SPELLING]`. A plain optional value (nargs="?") would swallow the
    # script in `--legacy-local-rank train.py`, so each spelled form is its own flag
    # (argparse matches a whole "--flag=value" string against known flags first).
    work.add_argument(
        "--legacy-local-rank",
        action="store_const",
        const="auto",
        dest="legacy_local_rank",
        help="pass --local_rank=N or --local-rank=N to scripts that parse it; the bare flag reads "
        "the script to pick the spelling, --legacy-local-rank=local_rank or =local-rank forces one",
    )
    for choice in LEGACY_CHOICES:
        work.add_argument(
            f"--legacy-local-rank={choice}",
            action="store_const",
            const=choice,
            dest="legacy_local_rank",
            help=argparse.SUPPRESS,
        )
    work.add_argument(
        "--log-dir", "--log_dir", metavar="DIR", help="also write each worker's stdout/stderr to files under DIR"
    )
    work.add_argument(
        "-r",
        "--redirects",
        metavar="STD",
        help="as torchrun: send workers' streams to files only (0 none, 1 stdout, 2 stderr, 3 both; per local "
        "rank 0:3,1:2); the console output is then torch's, untagged",
    )
    work.add_argument(
        "-t", "--tee", metavar="STD", help="as torchrun: streams to files and the console (see -r)"
    )
    work.add_argument(
        "--output",
        metavar="auto|prefixed|raw",
        help="console output: prefixed tags every whole line with [rankN]: so ranks never share a line "
        "(default when there are 2+ processes); raw passes the workers' streams through",
    )
    work.add_argument(
        "--local-ranks-filter",
        "--local_ranks_filter",
        metavar="R[,R]",
        help="show only these local ranks' output on the console (all of it stays in the logs)",
    )
    work.add_argument(
        "--stall-timeout",
        metavar="SECONDS",
        help="end the job with the stalled rank named after a rank waited this long in a collective "
        "(default: the process group's timeout; pt.fit / rt.watchdog: this long without progress, default 300; "
        "0: off)",
    )
    work.add_argument("-m", "--module", action="store_true", help="run a module like python -m")
    work.add_argument(
        "--no-python",
        "--no_python",
        action="store_true",
        default=None,
        help="the target is an executable (or a command on PATH), started without python",
    )
    work.add_argument(
        "--use-env",
        "--use_env",
        action="store_true",
        help="accepted for python -m torch.distributed.launch commands: workers always read LOCAL_RANK from the "
        "environment here (launch without it passed --local-rank: use --legacy-local-rank)",
    )
    work.add_argument(
        "--exit-codes",
        metavar="paratrain|torchrun",
        help="paratrain (default): the failed worker's own code, 128+N for a signal, 75 preempted, 124 stalled; "
        "torchrun: 1 for any failure, as torchrun",
    )
    work.add_argument(
        "--warm-workers",
        action="store_true",
        default=None,
        help="keep a pool on each node that imported torch once and fork every worker from it: a restart of the "
        "group skips torch's imports (docs/goodput.md, section Warm workers); the workers torch's agent starts stay "
        "torchrun's, and one the pool cannot take starts cold, said in one line",
    )
    work.add_argument(
        "-v", "--verbose", action="store_true", help="show torch elastic's own log lines and the torchrun argv"
    )

    ft = parser.add_argument_group("fault tolerance per step (strategy='ft-ddp' or 'ft-fsdp', torchft)")
    ft.add_argument(
        "--fault-tolerance", choices=["replicas"],
        help="replicas: start torchft's Lighthouse and --replica-groups copies of this launch (one replica "
        "group each), restart a group that fails (it heals from a live one while the others go on), and "
        "restart everything from disk checkpoints if the Lighthouse dies (docs/fault-tolerance.md)")
    ft.add_argument("--replica-groups", type=int, default=2, metavar="N",
                    help="replica groups with --fault-tolerance replicas (default 2)")
    ft.add_argument("--replica-restarts", type=int, default=20, metavar="N",
                    help="times each replica group may be started again after an error (default 20)")

    torch_group = parser.add_argument_group("torchrun's other flags (handed to torch's launcher as given)")
    torchrun_flags.add_to(torch_group)

    parser.add_argument("target", nargs=argparse.REMAINDER, metavar="script.py [args]", help=argparse.SUPPRESS)
    parser.set_defaults(handler=handler, legacy_local_rank=None)
    return parser


def handler(args: argparse.Namespace) -> int:
    """Build, check and launch; returns the exit code (0 when every worker succeeded). The variables
    paratrain sets only for its workers (``PARATRAIN_RUN_LOCK``, ``PARATRAIN_LAUNCHER_PID`` …), found
    here, were left in the shell: ignored, said in one line. (torchrun's ``RANK``, ``MASTER_ADDR`` …
    are harmless here, torch's agent sets its workers' own, and a Kubeflow PyTorchJob sets them.)"""
    from paratrain.env.variables import PARATRAIN_WORKER_VARIABLES, ignoring_stale_launcher_variables
    from paratrain.launch.config import LaunchConfig

    if args.fault_tolerance:
        from paratrain.launch.replica_argv import check_group_shape, group_words
        from paratrain.launch.replica_groups import Nodes, ReplicaGroups

        config = LaunchConfig.from_args(args)
        check_group_shape(config.min_nodes, config.max_nodes, config.master_addr)
        nodes = Nodes(port=config.master_port)  # one node: the Lighthouse's loopback port
        if config.multi_node:  # each group is a one-node run of its own; the node flags place the Lighthouse
            config.validate()
            nodes = Nodes(config.max_nodes, config.node_rank, config.master_addr, config.master_port,
                          config.rdzv_timeout)
        return ReplicaGroups(group_words(sys.argv), args.replica_groups, args.replica_restarts, nodes=nodes).run()
    with ignoring_stale_launcher_variables("run", PARATRAIN_WORKER_VARIABLES):
        config = LaunchConfig.from_args(args)
        config.validate()  # before torch is imported: a refused flag answers at once
        from paratrain.launch.torchrun import launch

        return launch(config)
