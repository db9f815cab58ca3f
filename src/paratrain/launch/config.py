"""``LaunchConfig``: what ``paratrain run`` was asked to start, parsed and checked.

Flags (strings) → :meth:`LaunchConfig.from_args` (types: :mod:`~paratrain.launch.flag_values`;
flags not given: :mod:`~paratrain.launch.env_defaults`, torchrun's ``PET_*`` and SLURM) →
:meth:`LaunchConfig.validate` (every mistake we can see before starting anything,
each one line naming the fix) → :mod:`paratrain.launch.torchrun` (argv for
torch.distributed.run).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from paratrain.errors import ConfigError
from paratrain.launch import network, torchrun_flags
from paratrain.launch.env_defaults import environment_defaults, slurm_cpus, with_pet_defaults
from paratrain.launch.flag_values import parse_int, parse_local_ranks, parse_nnodes, parse_nproc, parse_seconds
from paratrain.launch.legacy import CHOICES as LEGACY_CHOICES
from paratrain.launch.module_path import find_module

RDZV_BACKENDS = ("static", "c10d", "etcd", "etcd-v2")
DEFAULT_MASTER_PORT = 29500  # torchrun's default for the static rendezvous
DEFAULT_C10D_PORT = 29400  # torchrun's default for the c10d rendezvous
DEFAULT_RDZV_TIMEOUT_S = 600  # torch's static and c10d defaults
# --nnodes MIN:MAX without --max-restarts: room to lose a node and go on (torchrun's default is 0,
# with which a node range can never lose a node; the job's first line says which applies).
DEFAULT_ELASTIC_RESTARTS = 3
OUTPUT_MODES = ("auto", "prefixed", "raw")
# paratrain: the worker's own exit code, 128+signal, 75 preempted, 124 stalled; torchrun: 1 on any failure.
EXIT_CODE_MODES = ("paratrain", "torchrun")
# torch elastic's Std.from_str: one digit 0-3 for every local rank, or LOCAL_RANK:DIGIT,...
_STD_SPEC = re.compile(r"[0-3]|\d+:[0-3](,\d+:[0-3])*")


@dataclass(frozen=True)
class LaunchConfig:
    """One node's view of a launch. Build with :meth:`from_args`; check with :meth:`validate`.

    ``master_port`` is ``None`` on one node without ``--master-port``: the launcher
    then takes a free loopback port (see :mod:`paratrain.launch.loopback_store`).
    """

    target: str  # script path, or module name when ``module`` is true
    target_args: tuple[str, ...] = ()
    module: bool = False
    nproc_per_node: int = 1
    min_nodes: int = 1
    max_nodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    max_restarts: int = 0
    rdzv_backend: str = "static"
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    rdzv_timeout: int = DEFAULT_RDZV_TIMEOUT_S
    rdzv_last_call: int | None = None  # seconds a dynamic rendezvous waits for more nodes once MIN joined
    backend: str = "auto"
    legacy_local_rank: str | None = None  # None, "auto", "local_rank" or "local-rank"
    log_dir: str | None = None
    threads_per_proc: int | None = None
    cpu_binding: str = "auto"  # one of env.cpu_binding.CPU_BINDING_MODES
    verbose: bool = False
    slurm_cpus: int | None = None  # CPUs the SLURM step gave this node (SLURM_CPUS_ON_NODE), if any
    output: str = "auto"  # "prefixed": whole lines tagged [rankN]: ; "raw": the workers' streams as they are
    local_ranks_filter: tuple[int, ...] | None = None  # show only these local ranks on the console
    stall_timeout: float | None = None  # exported as PARATRAIN_STALL_TIMEOUT for the workers' watchdog
    standalone: bool = False  # torchrun's --standalone: one node on a free local port (here: the loopback store)
    rdzv_conf: str | None = None  # torchrun's --rdzv-conf KEY=VALUE,...; its keys win over ours
    no_python: bool = False  # the target is an executable, not a Python script
    redirects: str | None = None  # torchrun's -r/--redirects, as given (then the streams are the user's)
    tee: str | None = None  # torchrun's -t/--tee, as given
    local_addr: str | None = None  # torchrun's --local-addr; without it several nodes announce the route to node 0
    exit_codes: str = "paratrain"  # one of EXIT_CODE_MODES
    restarts_by_default: bool = False  # max_restarts is DEFAULT_ELASTIC_RESTARTS because --nnodes was a range
    torch_flags: tuple[str, ...] = ()  # torchrun flags passed as given (torchrun_flags.PASSED_THROUGH)
    warm_workers: bool = False  # a warm pool on this node forks the workers (launch/warm_pool.py)

    @property
    def prefixed_output(self) -> bool:
        """Rank-tagged whole lines: the default as soon as two processes share a console,
        unless ``-r``/``-t`` hand the streams to torch as in torchrun."""
        if self.output == "auto":
            if self.redirects is not None or self.tee is not None:
                return False
            return self.nproc_per_node * self.max_nodes > 1 or self.local_ranks_filter is not None
        return self.output == "prefixed"

    # ---- derived answers --------------------------------------------------------------
    @property
    def multi_node(self) -> bool:
        return self.max_nodes > 1

    @property
    def rendezvous_host(self) -> str | None:
        """The host the agents meet at: ``--master-addr`` (static) or the endpoint's host."""
        if self.rdzv_backend == "static" or not self.rdzv_endpoint:
            return self.master_addr
        return self.rdzv_endpoint.rsplit(":", 1)[0].strip("[]")

    @property
    def loopback_only(self) -> bool:
        """One node meeting on this machine's loopback: nothing needs to listen elsewhere."""
        host = self.rendezvous_host
        return not self.multi_node and (host is None or network.is_loopback(host))

    # ---- building ---------------------------------------------------------------------
    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> LaunchConfig:
        """Parse the ``paratrain run`` flags; a flag not given comes from its ``PET_*``
        variable (as in torchrun), then under SLURM from SLURM.

        Raises:
            ConfigError: a flag value is malformed (not a number, bad ``MIN:MAX``).
        """
        environ = os.environ if environ is None else environ
        args = with_pet_defaults(args, environ)
        command = list(args.target or [])
        legacy = args.legacy_local_rank
        if legacy == "auto" and len(command) > 1 and command[0] in LEGACY_CHOICES:
            # `--legacy-local-rank local_rank train.py`: the word after the flag is its value.
            legacy, command = command[0], command[1:]
        target, target_args = (command[0], tuple(command[1:])) if command else ("", ())
        nnodes = args.nnodes
        standalone = bool(getattr(args, "standalone", None))
        if standalone:
            # As in torchrun, --standalone overrides the rendezvous flags: one node, a free local
            # port (the loopback store's), a fresh run id.
            args.rdzv_backend = args.rdzv_endpoint = args.rdzv_id = args.master_port = None
        node_rank = parse_int("--node-rank", args.node_rank)
        master_addr = args.master_addr
        if master_addr and master_addr.startswith("[") and master_addr.endswith("]"):
            master_addr = master_addr[1:-1]  # an IPv6 literal as URLs write it: [fd00::1]
        master_port = parse_int("--master-port", args.master_port)
        given = environment_defaults(environ) if nnodes is None and not standalone else None
        if given:
            nnodes = str(given["nnodes"])
            node_rank = given["node_rank"] if node_rank is None else node_rank
            master_addr = master_addr or given["master_addr"]
            master_port = given["master_port"] if master_port is None else master_port
        min_nodes, max_nodes = parse_nnodes(nnodes or "1")
        # A node range is elastic: only a dynamic rendezvous lets the job go on with fewer nodes,
        # and only restarts make it re-rendezvous when one is lost.
        elastic = min_nodes < max_nodes
        rdzv_backend = args.rdzv_backend or ("c10d" if elastic else "static")
        if rdzv_backend == "static" and args.rdzv_endpoint:
            # torchrun's static rendezvous meets at --rdzv-endpoint when one is given, not --master-addr.
            host, colon, port = str(args.rdzv_endpoint).rpartition(":")
            host, port = (host, port) if colon else (port, "")
            if ":" in host and not (host.startswith("[") and host.endswith("]")):
                raise ConfigError(f"--rdzv-endpoint {args.rdzv_endpoint!r}: an IPv6 address goes in brackets before "
                                  "the port; write --rdzv-endpoint [fd00::1]:29500 (or --master-addr fd00::1 "
                                  "--master-port 29500)")
            master_addr, master_port = host.strip("[]"), parse_int("--rdzv-endpoint port", port, master_port)
            args.rdzv_endpoint = None
        max_restarts = parse_int("--max-restarts", args.max_restarts, DEFAULT_ELASTIC_RESTARTS if elastic else 0)
        restarts_by_default = elastic and args.max_restarts in (None, "")
        if max_nodes > 1 and rdzv_backend == "static" and master_port is None:
            master_port = DEFAULT_MASTER_PORT
        return cls(
            target=target,
            target_args=target_args,
            module=bool(args.module),
            nproc_per_node=parse_nproc(args.nproc_per_node or "1"),
            min_nodes=min_nodes,
            max_nodes=max_nodes,
            node_rank=node_rank or 0,
            master_addr=master_addr,
            master_port=master_port,
            max_restarts=max_restarts,
            rdzv_backend=rdzv_backend,
            rdzv_endpoint=args.rdzv_endpoint or None,
            rdzv_id=args.rdzv_id or None,
            rdzv_timeout=parse_int("--rdzv-timeout", args.rdzv_timeout, DEFAULT_RDZV_TIMEOUT_S),
            rdzv_last_call=parse_int("--rdzv-last-call", args.rdzv_last_call),
            backend=(args.backend or "auto").lower(),
            legacy_local_rank=legacy,
            log_dir=args.log_dir or None,
            threads_per_proc=parse_int("--threads-per-proc", args.threads_per_proc),
            cpu_binding=getattr(args, "cpu_binding", None) or "auto",
            verbose=bool(args.verbose),
            slurm_cpus=slurm_cpus(environ),
            output=getattr(args, "output", None) or "auto",
            local_ranks_filter=parse_local_ranks("--local-ranks-filter", getattr(args, "local_ranks_filter", None)),
            stall_timeout=parse_seconds("--stall-timeout", getattr(args, "stall_timeout", None)),
            standalone=standalone,
            rdzv_conf=getattr(args, "rdzv_conf", None) or None,
            no_python=bool(getattr(args, "no_python", None)),
            redirects=getattr(args, "redirects", None),
            tee=getattr(args, "tee", None),
            local_addr=getattr(args, "local_addr", None) or None,
            exit_codes=getattr(args, "exit_codes", None) or "paratrain",
            restarts_by_default=restarts_by_default,
            torch_flags=torchrun_flags.torch_words(args),
            warm_workers=bool(getattr(args, "warm_workers", None)),
        )

    # ---- checking ---------------------------------------------------------------------
    def validate(self) -> None:
        """Refuse, before any process starts, every mistake visible from here.

        Raises:
            ConfigError: a bad value or combination; the message names the flag and the fix.
        """
        self._check_target()
        self._check_sizes()
        self._check_rendezvous()
        self._check_backend()
        self._check_log_dir()

    def _check_log_dir(self) -> None:
        """``--log-dir`` must be a folder this process can create (torch's agent would fail on it
        with a traceback once the rendezvous is done); it is the user's folder, made here."""
        if not self.log_dir:
            return
        import os

        try:
            os.makedirs(self.log_dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--log-dir {self.log_dir} cannot be created ({exc.strerror or exc}): "
                              "give a folder you can write") from None

    def _check_target(self) -> None:
        if not self.target:
            raise ConfigError("no script given; usage: paratrain run [flags] script.py [script args] (or -m module)")
        if self.module and self.no_python:
            raise ConfigError("-m runs a Python module and --no-python runs an executable: give one of them")
        if self.module:
            if find_module(self.target) is None:
                raise ConfigError(
                    f"module {self.target!r} is not importable from {Path.cwd()} (python -m would not find it); "
                    "install it, or run from the directory that contains its top-level package"
                )
            return
        if self.no_python:
            if shutil.which(self.target) is None:
                raise ConfigError(
                    f"--no-python: {self.target!r} is not an executable file or a command on PATH; check the name"
                )
            return
        path = Path(self.target)
        if not path.exists():
            raise ConfigError(f"script {self.target!r} not found (looked in {Path.cwd()}); check the path")
        if not path.is_file():
            raise ConfigError(f"{self.target!r} is a directory, not a script; pass the .py file (or -m package.module)")

    def _check_sizes(self) -> None:
        if self.nproc_per_node < 1:
            raise ConfigError(
                f"--nproc-per-node {self.nproc_per_node} must be at least 1 (or gpu: one per GPU; cpu: one per CPU)"
            )
        if self.min_nodes < 1 or self.min_nodes > self.max_nodes:
            raise ConfigError(f"--nnodes {self.min_nodes}:{self.max_nodes} needs 1 <= MIN <= MAX")
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts {self.max_restarts} must be 0 or more")
        if self.output not in OUTPUT_MODES:
            raise ConfigError(f"--output {self.output!r} is not one of {', '.join(OUTPUT_MODES)}")
        if self.exit_codes not in EXIT_CODE_MODES:
            raise ConfigError(f"--exit-codes {self.exit_codes!r} is not one of {', '.join(EXIT_CODE_MODES)}")
        for flag, spec in (("-r/--redirects", self.redirects), ("-t/--tee", self.tee)):
            if spec is not None and not _STD_SPEC.fullmatch(spec):
                raise ConfigError(
                    f"{flag} {spec!r} is not a stream choice: 0 none, 1 stdout, 2 stderr, 3 both, for every "
                    "local rank (e.g. 3) or per local rank (e.g. 0:3,1:2)"
                )
        if self.output == "prefixed" and (self.redirects is not None or self.tee is not None):
            raise ConfigError(
                "--output prefixed sends the streams through files itself; drop -r/--redirects and -t/--tee, "
                "or use --output raw to have them as in torchrun"
            )
        if self.local_ranks_filter is not None and not all(0 <= r < self.nproc_per_node for r in self.local_ranks_filter):
            raise ConfigError(
                f"--local-ranks-filter {','.join(map(str, self.local_ranks_filter))} names local ranks outside "
                f"0..{self.nproc_per_node - 1}; list local ranks of this node, e.g. 0 or 0,1"
            )
        if self.stall_timeout is not None and not 0 <= self.stall_timeout < float("inf"):
            raise ConfigError(f"--stall-timeout {self.stall_timeout:g} must be a finite number of seconds, or 0 to turn the watchdog off")
        if self.threads_per_proc is not None and self.threads_per_proc < 1:
            raise ConfigError(f"--threads-per-proc {self.threads_per_proc} must be at least 1")
        if self.warm_workers and self.no_python:
            raise ConfigError("--warm-workers forks Python workers from a pool that imported torch; --no-python runs "
                              "an executable: drop one of them")
        if self.warm_workers and any(word.startswith(("--numa-binding", "--numa_binding")) for word in self.torch_flags):
            raise ConfigError("--warm-workers forks the workers from one pool, which --numa-binding's numactl cannot "
                              "bind per worker: drop one of them")
        if self.legacy_local_rank is not None and self.legacy_local_rank not in LEGACY_CHOICES:
            raise ConfigError(
                f"--legacy-local-rank {self.legacy_local_rank!r} is not one of {', '.join(LEGACY_CHOICES)}"
            )

    def _check_rendezvous(self) -> None:
        if self.standalone and self.max_nodes > 1:
            raise ConfigError(
                f"--standalone is one node, but --nnodes {self.min_nodes}:{self.max_nodes} asks for more; "
                "drop --standalone and give --master-addr (or --rdzv-endpoint) for several nodes"
            )
        if self.rdzv_conf is not None:
            for pair in self.rdzv_conf.split(","):
                if not re.fullmatch(r"\s*[\w.-]+\s*=.*", pair):
                    raise ConfigError(
                        f"--rdzv-conf {self.rdzv_conf!r} is not KEY=VALUE,...: {pair!r}; e.g. join_timeout=900"
                    )
        if self.rdzv_backend not in RDZV_BACKENDS:
            raise ConfigError(f"--rdzv-backend {self.rdzv_backend!r} is not one of {', '.join(RDZV_BACKENDS)}")
        if self.rdzv_timeout <= 0:
            raise ConfigError(f"--rdzv-timeout {self.rdzv_timeout} must be a positive number of seconds")
        if self.rdzv_last_call is not None:
            if self.rdzv_last_call <= 0:
                raise ConfigError(f"--rdzv-last-call {self.rdzv_last_call} must be a positive number of seconds")
            if self.rdzv_backend == "static":
                raise ConfigError(
                    "--rdzv-last-call applies to a dynamic rendezvous: give a node range (--nnodes MIN:MAX) "
                    "or --rdzv-backend c10d"
                )
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise ConfigError(f"--master-port {self.master_port} is not a TCP port (1-65535)")
        static = self.rdzv_backend == "static"
        if static and not 0 <= self.node_rank < self.max_nodes:
            raise ConfigError(
                f"--node-rank {self.node_rank} is outside --nnodes {self.max_nodes}; "
                f"number the nodes 0 to {self.max_nodes - 1}, node 0 being the one at --master-addr"
            )
        if self.multi_node and self.rendezvous_host is None:
            raise ConfigError(
                f"--nnodes {self.max_nodes} needs --master-addr (static) or --rdzv-endpoint HOST:PORT: "
                "the address of node 0 that every node can reach"
            )
        if self.master_addr is not None:
            network.check_address_form("--master-addr", self.master_addr)
        if self.rendezvous_host is not None:
            network.resolve(self.rendezvous_host)
        if static and self.node_rank == 0 and self.master_port is not None:
            # Node 0 hosts the store; the loopback one binds 127.0.0.1, torch's binds every address.
            listen_on = network.LOOPBACK if self.loopback_only else "0.0.0.0"
            if network.port_in_use(listen_on, self.master_port):
                raise ConfigError(
                    f"--master-port {self.master_port} is already in use on this machine (another job?); "
                    "pick another port" + ("" if self.multi_node else ", or leave --master-port out to get a free one")
                )

    def _check_backend(self) -> None:
        from paratrain.runtime.device import resolve_backend

        backend = resolve_backend(self.backend)  # refuses nccl without CUDA, unknown names
        if (backend == "gloo" and self.slurm_cpus is not None and self.nproc_per_node > self.slurm_cpus
                and self.threads_per_proc is None):
            # Workers sharing CPUs that SLURM pinned for fewer processes crawl; saying how many
            # threads each gets (--threads-per-proc) is how a user says they mean it.
            raise ConfigError(
                f"this SLURM step has {self.slurm_cpus} CPU(s) on this node but --nproc-per-node "
                f"{self.nproc_per_node} starts {self.nproc_per_node} CPU workers; ask for one CPU per worker "
                f"(srun --cpus-per-task {self.nproc_per_node} ...), use --nproc-per-node {self.slurm_cpus}, "
                "or add --threads-per-proc 1 to share them anyway"
            )
        if backend == "nccl":
            import torch

            gpus = torch.cuda.device_count()
            if self.nproc_per_node > gpus:
                raise ConfigError(
                    f"--nproc-per-node {self.nproc_per_node} with NCCL needs that many GPUs, {gpus} visible; "
                    f"use --nproc-per-node {gpus} (or gpu)"
                )
