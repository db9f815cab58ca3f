"""CPU workers' compute threads on CPUs of their own (paratrain.env.cpu_binding).

The plan is checked on given CPU lists and a made-up sysfs; the binding on 2 real processes
through ``paratrain run`` and ``pt.spawn``, reading every thread's allowed CPUs from /proc."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import threading

import pytest

import paratrain as pt
from paratrain.env import cpu_binding
from paratrain.env.cpu_binding import CPU_CORES_VAR, core_order, decode, encode, plan, share_for
from tests.env.binding_worker import report
from tests.support import ROOT, clean_env, paratrain_cmd

USABLE = sorted(os.sched_getaffinity(0))
WORKER = ROOT / "tests" / "env" / "binding_worker.py"


# ---- the plan ---------------------------------------------------------------------------------
def test_two_workers_get_a_cpu_each_and_one_worker_is_left_alone():
    assert plan(2, 1, [0, 1]) == [(0,), (1,)]
    assert plan(1, 1, [0, 1, 2, 3]) is None  # nothing to share with
    assert plan(2, 4, list(range(8))) == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_a_worker_with_one_thread_still_gets_an_equal_share():
    # Its OpenMP pool has one thread; the rest of the share is room for its other threads,
    # and a hyperthread sibling is never handed to the neighbouring rank.
    assert plan(2, 1, [0, 4, 1, 5]) == [(0, 4), (1, 5)]
    assert plan(3, 2, list(range(8))) == [(0, 1), (2, 3), (4, 5)]  # 6 and 7 belong to no one


def test_no_binding_when_the_threads_do_not_fit_in_a_share():
    assert plan(2, 2, [0, 1]) is None  # oversubscribed: binding would only choose who takes turns
    assert plan(3, 1, [0, 1]) is None


def test_cpus_are_ordered_by_socket_and_physical_core(tmp_path):
    # 2 sockets × 2 cores × 2 hyperthreads, numbered as Linux often does: siblings 4 apart.
    layout = {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1), 4: (0, 0), 5: (0, 1), 6: (1, 0), 7: (1, 1)}
    for cpu, (package, core) in layout.items():
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{package}\n")
        (topology / "core_id").write_text(f"{core}\n")
    ordered = core_order(range(8), sysfs=tmp_path)
    assert ordered == [0, 4, 1, 5, 2, 6, 3, 7]
    assert plan(2, 4, ordered) == [(0, 4, 1, 5), (2, 6, 3, 7)]  # one socket each
    assert plan(4, 1, ordered) == [(0, 4), (1, 5), (2, 6), (3, 7)]  # one physical core each
    assert core_order([3, 1, 2], sysfs=tmp_path / "absent") == [1, 2, 3]  # no topology: by number


def test_shares_travel_as_taskset_lists():
    shares = [(0, 1, 2, 3), (4, 6), (8,)]
    assert encode(shares) == "0-3;4,6;8"
    assert decode("0-3;4,6;8") == shares
    assert share_for({CPU_CORES_VAR: f"{USABLE[0]};{USABLE[-1]}"}, 1) == (USABLE[-1],)
    assert share_for({CPU_CORES_VAR: f"{USABLE[0]};{USABLE[-1]}"}, 2) is None  # planned for fewer ranks
    assert share_for({}, 0) is None and share_for({CPU_CORES_VAR: " "}, 0) is None


@pytest.mark.parametrize("text", ["x", "0;;1", "3-1", "-1", "0,a"])
def test_a_malformed_variable_is_named_with_the_fix(text):
    with pytest.raises(pt.ConfigError, match=rf"{CPU_CORES_VAR}=.* is not a ';'-separated list .*--cpu-binding none"):
        share_for({CPU_CORES_VAR: text}, 0)


def test_cpus_this_process_may_not_use_are_refused():
    with pytest.raises(pt.ConfigError, match=r"gives local rank 1 CPU 4096-4097, which this process may not use"):
        share_for({CPU_CORES_VAR: f"{USABLE[0]};4096,4097"}, 1)
    assert share_for({CPU_CORES_VAR: f"{USABLE[0]};4096,4097"}, 0) == (USABLE[0],)  # rank 0's share is fine


def test_an_unknown_mode_is_refused_naming_where_it_came_from():
    with pytest.raises(pt.ConfigError, match=r"--cpu-binding 'always' is not one of auto, none"):
        cpu_binding.node_plan("always", 2, 1)
    assert cpu_binding.node_plan("none", 2, 1) is None


# ---- two real processes -----------------------------------------------------------------------
def _check_bound(seen: list[dict]) -> None:
    """Each rank's main thread on its own share (disjoint, inside the usable CPUs); gloo's threads on all."""
    shares = [set(s["share"]) for s in sorted(seen, key=lambda s: s["rank"])]
    assert shares == [set(share) for share in plan(2, 1, core_order(USABLE))]
    assert not shares[0] & shares[1]
    for s, share in zip(sorted(seen, key=lambda s: s["rank"]), shares, strict=True):
        assert s["threads"]["main"] == [sorted(share)]
        assert s["threads"]["gloo_tcp_loop"] and all(cpus == USABLE for cpus in s["threads"]["gloo_tcp_loop"])
        assert s["total"] == 2.0


def _check_free(seen: list[dict]) -> None:
    for s in seen:
        assert s["share"] is None
        assert all(cpus == USABLE for threads in s["threads"].values() for cpus in threads), s["threads"]


def _run(tmp_path, *flags: str, strategy: tuple[str, ...] = ()) -> tuple[list[dict], str]:
    proc = subprocess.run(paratrain_cmd("run", "--nproc-per-node", "2", *flags, str(WORKER), *strategy), cwd=tmp_path,
                          env=clean_env(BINDING_OUT=str(tmp_path)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(p.read_text()) for p in sorted(tmp_path.glob("binding.*.json"))], proc.stderr


def test_paratrain_run_binds_each_workers_compute_threads_and_leaves_gloos_free(tmp_path):
    seen, stderr = _run(tmp_path)
    assert len(seen) == 2
    if len(USABLE) < 2:  # one CPU: two workers cannot have one each
        _check_free(seen)
        assert "CPUs of its own" not in stderr
        return
    _check_bound(seen)
    expected = cpu_binding.describe(plan(2, 1, core_order(USABLE)))
    assert f"paratrain run: each CPU worker computes on CPUs of its own: {expected} (" in stderr
    assert "--cpu-binding none" in stderr


def test_process_groups_a_strategy_makes_after_the_binding_talk_on_every_cpu(tmp_path):
    seen, _ = _run(tmp_path, strategy=("deepspeed",))
    assert len(seen) == 2
    if len(USABLE) < 2:
        _check_free(seen)
        return
    _check_bound(seen)
    for s in seen:  # DeepSpeed's own group started its gloo threads in setup, from the bound thread
        assert len(s["threads"]["gloo_tcp_loop"]) > s["before_setup"]["gloo_tcp_loop"], s
        assert len(s["threads"]["pt_gloo_runloop"]) > s["before_setup"]["pt_gloo_runloop"], s
        assert all(cpus == USABLE for cpus in s["threads"]["pt_gloo_runloop"]), s["threads"]


def _named_thread(name: str, cpus: set[int], ready: threading.Event, done: threading.Event, tids: dict) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: what /proc/self/task/TID/comm shows
    os.sched_setaffinity(0, cpus)  # this thread only
    tids[name] = threading.get_native_id()
    ready.set()
    done.wait(30)


def test_only_gloo_threads_get_every_cpu_back():
    ready = {name: threading.Event() for name in ("gloo_test_loop", "compute_pool")}
    done, tids = threading.Event(), {}
    threads = [threading.Thread(target=_named_thread, args=(name, {USABLE[0]}, event, done, tids))
               for name, event in ready.items()]
    for thread in threads:
        thread.start()
    try:
        assert all(event.wait(30) for event in ready.values())
        moved = cpu_binding.free_communication_threads(USABLE)
        assert os.sched_getaffinity(tids["gloo_test_loop"]) == set(USABLE)
        assert os.sched_getaffinity(tids["compute_pool"]) == {USABLE[0]}  # not communication: stays bound
        assert moved == (1 if len(USABLE) > 1 else 0)
    finally:
        done.set()
        for thread in threads:
            thread.join()


def test_cpu_binding_none_leaves_every_thread_to_the_scheduler(tmp_path):
    seen, stderr = _run(tmp_path, "--cpu-binding", "none")
    assert len(seen) == 2
    _check_free(seen)
    assert "CPUs of its own" not in stderr


def test_a_bad_cpu_binding_flag_is_refused_before_any_worker_starts(tmp_path):
    proc = subprocess.run(paratrain_cmd("run", "--nproc-per-node", "2", "--cpu-binding", "always", str(WORKER)),
                          cwd=tmp_path, env=clean_env(BINDING_OUT=str(tmp_path)), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "--cpu-binding" in proc.stderr and "always" in proc.stderr
    assert not list(tmp_path.glob("binding.*.json"))


def test_pt_spawn_binds_like_paratrain_run_and_can_be_told_not_to():
    seen = [pt.spawn(report, 2)]
    # rank 0's view is what comes back; its share and the plan for two workers must agree
    if len(USABLE) >= 2:
        assert seen[0]["share"] == list(plan(2, 1, core_order(USABLE))[0])
        assert seen[0]["threads"]["main"] == [seen[0]["share"]]
        assert all(cpus == USABLE for cpus in seen[0]["threads"]["gloo_tcp_loop"])
    else:
        _check_free(seen)
    _check_free([pt.spawn(report, 2, cpu_binding="none")])
    with pytest.raises(pt.ConfigError, match=r"pt.spawn\(cpu_binding=\) 'on' is not one of auto, none"):
        pt.spawn(report, 2, cpu_binding="on")


def test_a_variable_set_by_hand_that_names_foreign_cpus_fails_the_workers_with_the_fix():
    with pytest.raises(pt.WorkerError, match=r"CPU 409[67], which this process may not use.*--cpu-binding none"):
        pt.spawn(report, 2, env={CPU_CORES_VAR: "4096;4097"})
