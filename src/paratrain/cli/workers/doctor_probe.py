"""The worker of ``paratrain doctor``'s probe:
``python -m paratrain.cli.workers.doctor_probe RESULT.json [REPLICATE SHARD]`` (0: not given).

Started on every rank by the launch layer; joins the job, checks that every rank got
there with the same software, times all-reduces (:mod:`paratrain.diagnostics.link_probe`)
and checks their result, and plans hsdp's mesh on the job's topology as every rank saw
it. Local rank 0 of every node writes the (identical) outcome to RESULT.json for its
node's ``paratrain doctor`` to report.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str] | None = None) -> int:
    import torch

    from paratrain import comm
    from paratrain.diagnostics.desync import check_same_setup
    from paratrain.diagnostics.link_probe import measure_allreduce
    from paratrain.env.machine import machine_key, machine_label
    from paratrain.runtime.runtime import Runtime

    from paratrain.cli.doctor_checks import hsdp_mesh

    result_path, *shape = argv or sys.argv[1:]
    replicate, shard = (int(value) or None for value in (shape or ["0", "0"]))
    with Runtime(seed=None) as rt:
        check_same_setup(rt)
        total = comm.all_reduce(torch.tensor(float(rt.rank + 1)), op="sum")
        expected = rt.world_size * (rt.world_size + 1) / 2
        link = measure_allreduce(sizes_bytes=(4096, 1 << 20, 8 << 20), repeats=3)
        machines = comm.all_gather_object((machine_key(), machine_label()))
        outcome = {
            "world_size": rt.world_size,
            "backend": rt.backend,
            "hosts": [label for _, label in machines],
            "machines": len({key for key, _ in machines}),
            "sum_ok": float(total) == expected,
            "link": link.to_dict(),
            "describe": link.describe(),
            "hsdp_mesh": hsdp_mesh(rt.world_size, rt.topology.num_nodes,
                                   None if rt.topology.uneven else rt.process.local_world_size,
                                   replicate, shard).to_dict(),
        }
        if rt.local_rank == 0:
            with open(result_path, "w") as out:
                json.dump(outcome, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
