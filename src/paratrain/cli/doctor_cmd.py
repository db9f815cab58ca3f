"""``paratrain doctor``: check this machine, its network and (with 2+ ranks) a real all_reduce."""

from __future__ import annotations

import argparse
import json
import os
import tempfile

MANUAL = """\
Check what a distributed job needs, and say how to fix what is wrong: Python,
torch, CUDA, cuDNN, NCCL and gloo; devices and free memory; the environment
variables that steer a job (MASTER_*, RANK..., *_SOCKET_IFNAME, NCCL_*,
OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES); network interfaces and the one that
routes to the master; whether the master port is free (node 0) or answers
(other nodes). With --nproc-per-node N > 1, or on several nodes, it also starts
a real job and all-reduces across every rank: latency and bus bandwidth. It says
which 2-D mesh strategy hsdp would build on this job (from the nodes and
processes every rank saw, or --replicate / --shard), and refuses a shape that
cannot be built.
On a machine with CUDA GPUs it runs a self-test of the CUDA paths paratrain
takes (about a minute; --no-gpu-test skips it): the rank's device, the TF32
switch, bf16, fp16 with GradScaler, the fit loop's clock, torch.compile, and
with two GPUs DDP over NCCL. `pytest -m gpu` proves the same paths at length.

Every finding is ok, info, warning or problem (with its fix). The exit code is
1 when a problem would stop a job, else 0.

  paratrain doctor                                   # this machine
  paratrain doctor --nproc-per-node 2                # + a 2-process all_reduce here
  node0$ paratrain doctor --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500
  node1$ paratrain doctor --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29500
  paratrain doctor --nproc-per-node 4 --replicate 2  # + hsdp's mesh: replicate 2 × shard 2
  paratrain doctor --json                            # the same as one JSON object
"""


def register(subparsers) -> None:
    """Add the ``doctor`` command."""
    parser = subparsers.add_parser(
        "doctor", help="environment and network report, cross-node all_reduce probe",
        description=MANUAL, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nnodes", metavar="N", help="nodes in the probe job (run doctor on each)")
    parser.add_argument("--node-rank", metavar="K", help="this node's rank")
    parser.add_argument("--master-addr", metavar="HOST", help="address of node 0")
    parser.add_argument("--master-port", metavar="PORT", help="port on node 0")
    parser.add_argument("--nproc-per-node", metavar="N", help="processes per node for the all_reduce probe")
    parser.add_argument("--rdzv-timeout", metavar="SECONDS", default="120", help="how long nodes wait for each other (default 120)")
    parser.add_argument("--replicate", type=int, metavar="N",
                        help="hsdp: the mesh's replicas to check (default: the number of nodes)")
    parser.add_argument("--shard", type=int, metavar="N",
                        help="hsdp: processes per replica to check (default: processes per node)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument("--no-gpu-test", action="store_true",
                        help="skip the GPU self-test (about a minute on a machine with CUDA GPUs)")
    parser.set_defaults(handler=handler)


def handler(args: argparse.Namespace) -> int:
    from paratrain.cli import doctor_checks
    from paratrain.launch.config import parse_nnodes, parse_nproc

    nproc = parse_nproc(args.nproc_per_node or "1")
    _, max_nodes = parse_nnodes(args.nnodes or "1")
    doctor_checks.check_hsdp_shape(nproc * max_nodes, args.replicate, args.shard)  # one line, before anything starts
    config = None
    if nproc > 1 or max_nodes > 1:
        config = _probe_config(args)
        config.validate()  # bad flags: one line, before anything starts
    node_rank = config.node_rank if config else 0
    findings = doctor_checks.software() + doctor_checks.devices() + doctor_checks.environment()
    if not args.no_gpu_test:
        from paratrain.cli.gpu_selftest import gpu_self_test

        findings += gpu_self_test()  # nothing without a CUDA GPU
    findings += doctor_checks.network(args.master_addr, config.master_port if config else None, node_rank)
    probe = None
    if config is not None and not doctor_checks.has_problem(findings):
        probe, finding = _run_probe(config, args.replicate, args.shard)
        findings.append(finding)
    if probe and "hsdp_mesh" in probe:  # the job as every rank saw it (nodes may run different numbers)
        findings.append(doctor_checks.Finding(**probe["hsdp_mesh"]))
    else:
        findings.append(doctor_checks.hsdp_mesh(nproc * max_nodes, max_nodes, nproc, args.replicate, args.shard,
                                          " (from the flags)"))
    if args.json:
        print(json.dumps({"findings": [f.to_dict() for f in findings], "probe": probe,
                          "ok": not doctor_checks.has_problem(findings)}, indent=2))
    else:
        for finding in findings:
            print(finding.line())
        problems = sum(f.status == doctor_checks.PROBLEM for f in findings)
        print(f"{problems} problem(s)" if problems else "no problems found")
    return 1 if doctor_checks.has_problem(findings) else 0


def _probe_config(args: argparse.Namespace):
    from paratrain.cli.main import build_parser
    from paratrain.launch.config import LaunchConfig

    words = ["run", "--output", "raw", "--rdzv-timeout", str(args.rdzv_timeout)]
    for flag in ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--nproc-per-node"):
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            words += [flag, str(value)]
    run_args = build_parser().parse_args([*words, "-m", "paratrain.cli.workers.doctor_probe", "RESULT"])
    return LaunchConfig.from_args(run_args)


def _run_probe(config, replicate: int | None = None, shard: int | None = None):
    """Start the probe job on this node (it also plans hsdp's mesh, given ``replicate`` / ``shard``);
    returns (its result or None, a finding)."""
    import dataclasses

    from paratrain.cli.doctor_checks import OK, PROBLEM, Finding
    from paratrain.errors import ParatrainError
    from paratrain.launch.torchrun import launch

    with tempfile.TemporaryDirectory(prefix="paratrain-doctor-") as tmp:
        path = os.path.join(tmp, "probe.json")
        config = dataclasses.replace(config, target_args=(path, str(replicate or 0), str(shard or 0)))
        try:
            launch(config)
        except ParatrainError as exc:
            return None, Finding("all_reduce probe", PROBLEM, str(exc),
                                 "run doctor on every node with the same --nnodes/--master-addr/--master-port; "
                                 "fix the findings above")
        if not os.path.exists(path):
            return None, Finding("all_reduce probe", PROBLEM, "the probe job ended without a result", "run again with -v")
        with open(path) as result:
            probe = json.load(result)
    if not probe["sum_ok"]:
        return probe, Finding("all_reduce probe", PROBLEM, "the all_reduce returned a wrong sum",
                              "check the network (packet corruption) and the backend")
    hosts = sorted(set(probe["hosts"]))  # names with the address toward the master: unique per machine
    machines = probe.get("machines", len(hosts))
    return probe, Finding("all_reduce probe", OK,
                          f"{probe['world_size']} ranks on {machines} machine(s) ({', '.join(hosts)}), backend "
                          f"{probe['backend']}: {probe['describe']}")
