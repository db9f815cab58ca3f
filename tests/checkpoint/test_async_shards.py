"""Background sharded checkpoints (DCP, written by each rank's writing thread) on 2 real fsdp ranks: the same weights as foreground
saves after a resume; a failed write raises on every rank; kill -9 mid-write resumes the previous one;
``rt.close()`` completes a write still running."""

from __future__ import annotations

import pytest

import paratrain as pt
from tests.checkpoint import async_shards_workers as workers
from paratrain.checkpoint import Checkpointer
from tests.checkpoint.workers import Net, equal


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("async")
    return pt.spawn(workers.background_matches_foreground, 2, args=(str(root),))


def test_background_sharded_saves_resume_to_the_same_weights_as_foreground_ones(runs):
    foreground, background = runs["foreground"], runs["background"]
    assert foreground["in_background"] == [False, False, False]
    assert background["in_background"] == [False, True, True]  # the first save of a run is in the foreground
    assert foreground["resumed_from"] == background["resumed_from"] == 10
    assert foreground["steps"] == background["steps"] == 15
    assert equal(foreground["params"], background["params"])  # bit-identical
    assert background["kept"] == foreground["kept"] == ["latest", "step-000004", "step-000008", "step-000010"]


def test_a_failed_background_write_or_check_raises_on_every_rank_and_leaves_the_previous_checkpoint(runs):
    for rank in runs["failure"]:
        assert rank["error"].startswith("checkpoint step-000002 was not saved: rank 1: writing checkpoint "
                                        "step-000002:"), rank["error"]
        assert "No space left on device" in rank["error"]
        # a check refused on rank 1: the save returns, every rank raises it at the next wait (one save later)
        assert rank["refused"] == ("checkpoint step-000003 was not saved: rank 1: saving checkpoint step-000003: "
                                   "RuntimeError: weights are not finite")
        assert rank["refused_at"] == "finish_writing"
        assert rank["listing"] == ["latest", "step-000001"]  # the half-written one removed
        assert rank["latest"] == "step-000001"


@pytest.mark.parametrize("moment", ["prepared", "written", "sealed"])
def test_kill_9_during_a_background_sharded_write_resumes_the_previous_checkpoint(runs, tmp_path, moment):
    """Rank 0 killed while its writing thread pauses with the hidden directory just made, with every file written,
    or with the checkpoint sealed but not renamed."""
    with pytest.raises((pt.LaunchError, pt.WorkerError)):
        pt.spawn(workers.killed_while_writing, 2, args=(str(tmp_path), moment),
                 env={"PARATRAIN_TEST_PAUSE_IN_SAVE": f"60@{workers.KILL_AT}:{moment}"})
    resumed = pt.spawn(workers.resume_after_kill, 2, args=(str(tmp_path),))
    assert resumed["resumed_from"] == 4  # step 8's checkpoint was never committed
    assert resumed["steps"] == 15
    assert equal(resumed["params"], runs["at4"])  # bit-identical to a run stopped and resumed at step 4
    # Its last save, in the background when the function returned, was completed before rt.close() left the group.
    assert resumed["in_background"] == [False, True]
    assert Checkpointer(None, tmp_path, model=Net()).latest().name == "step-000015"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".step-")) == []  # no leftovers


def test_a_background_sharded_save_makes_no_collective_in_the_training_thread():
    """The previous write's outcome, the checks, the copies and DCP's write are agreed by the writing threads
    (on their own group): the training thread makes no collective at a background sharded save."""
    result = pt.spawn(workers.live_sharded_state, 2)
    assert result["collectives_per_save"] == [[]] * 2
    assert result["latest"] == "step-000005"


def test_the_optimizers_shards_are_copied_by_the_writing_thread_before_their_next_step(tmp_path):
    """The training thread copies the model's shards; the writing thread the optimizer's, while the next forward
    and backward run; the next step waits for it; the checkpoint holds the state of the save."""
    result = pt.spawn(workers.optimizer_copied_by_the_thread, 2, args=(str(tmp_path),))
    assert result["latest"] == "step-000003"
    assert result["moved_after_the_save"]  # the step after the save changed the live state
    assert result["saved_is_the_state_at_the_save"]
    assert result["waits"] == ["step-000003"]  # that step waited for the copy, counted in the ledger


def test_an_optimizers_state_left_for_later_is_copied_then_into_the_kept_copy_in_its_place():
    import torch

    from paratrain.checkpoint.async_shards import HostCopyOfShards

    state = {"model": {"w": torch.arange(3.0)},
             "optimizer": {"state": {"w": {"exp_avg": torch.ones(3)}}, "param_groups": [{"lr": 0.1}]}}
    host = HostCopyOfShards()
    host.stage(state)
    staged = host.stage(state, later=["optimizer"])
    assert staged["optimizer"]["state"] is None and staged["optimizer"]["param_groups"] == [{"lr": 0.1}]
    assert list(staged["optimizer"]) == ["state", "param_groups"]  # the live state's order: the same DCP plan
    state["optimizer"]["state"]["w"]["exp_avg"] += 1  # before the next step, the thread copies what is there then
    state["optimizer"]["param_groups"][0]["lr"] = 0.05  # a scheduler after the save: the save keeps its own
    host.copy_the_rest(staged)
    assert staged["optimizer"]["state"]["w"]["exp_avg"].tolist() == [2.0] * 3
    assert staged["optimizer"]["state"]["w"]["exp_avg"].data_ptr() != state["optimizer"]["state"]["w"]["exp_avg"].data_ptr()
    assert staged["optimizer"]["param_groups"] == [{"lr": 0.1}]


def test_the_host_copy_of_the_shards_is_kept_between_saves_and_made_again_for_another_layout():
    import torch

    from paratrain.checkpoint.async_shards import HostCopyOfShards

    state = {"model": {"w": torch.arange(6.0)}, "optimizer": {"state": {}, "param_groups": [{"lr": 0.1}]}}
    host = HostCopyOfShards()
    first = host.stage(state)
    state["model"]["w"] += 1  # training goes on: the copy keeps the values at the save
    assert first["model"]["w"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    second = host.stage(state)
    assert second["model"]["w"].data_ptr() == first["model"]["w"].data_ptr()  # the same host memory, copied into
    assert second["model"]["w"].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    state["optimizer"]["param_groups"][0]["lr"] = 0.05
    assert host.stage(state)["optimizer"]["param_groups"][0]["lr"] == 0.05  # plain values: the save's own
    state["optimizer"]["state"] = {"w": {"exp_avg": torch.ones(6)}}  # an optimizer's first state: another layout
    third = host.stage(state)
    assert third["optimizer"]["state"]["w"]["exp_avg"].tolist() == [1.0] * 6
    assert third["model"]["w"].data_ptr() != first["model"]["w"].data_ptr()


def test_the_host_copy_of_the_shards_copies_every_tensor_of_a_save_in_one_call_into_torch(monkeypatch):
    """Invariant: a host copy makes one call into torch per copy (the training thread's, then the writing thread's for
    the optimizers' state), not one per tensor; containers, plain values and objects come out as they went in."""
    import torch

    from paratrain.checkpoint.async_shards import HostCopyOfShards

    calls = []
    copy = torch._foreach_copy_
    monkeypatch.setattr(torch, "_foreach_copy_", lambda kept, live, **kw: (calls.append(len(live)), copy(kept, live, **kw)))
    state = {"model": {"w": torch.arange(4.0), "b": torch.zeros(2), "steps": (torch.tensor(3), 7)},
             "optimizer": {"state": {"w": {"exp_avg": torch.ones(4), "step": torch.tensor(1.0)}},
                           "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99)}]},
             "extra": {"note": "x", "sizes": [1, 2], "object": {1, 2}}}
    host = HostCopyOfShards()
    host.stage(state)
    calls.clear()
    staged = host.stage(state, later=["optimizer"])
    assert calls == [3]  # w, b and the tensor in the tuple: the optimizer's two are left to the writing thread
    host.copy_the_rest(staged)
    assert calls == [3, 2]
    assert staged["model"]["steps"][1] == 7 and isinstance(staged["model"]["steps"], tuple)
    assert staged["model"]["steps"][0].item() == 3 and staged["optimizer"]["state"]["w"]["step"].item() == 1.0
    assert staged["optimizer"]["param_groups"] == [{"lr": 0.1, "betas": (0.9, 0.99)}]
    assert staged["extra"] == {"note": "x", "sizes": [1, 2], "object": {1, 2}}
    assert staged["extra"]["object"] is not state["extra"]["object"]  # deep-copied, as torch's stager does


def test_dcp_plans_are_kept_per_host_copy_and_a_changed_layout_still_saves_everything(tmp_path):
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.planner import SavePlanner

    from paratrain.checkpoint.async_shards import HostCopyOfShards

    host = HostCopyOfShards()
    state = {"model": {"w": torch.arange(6.0)}}
    written = []
    for save, extra in enumerate((None, None, "b", None)):
        if extra:  # another tensor: the local plan changes, the kept plans are merged, not reused as they were
            state["model"][extra] = torch.full((3,), 7.0)
        state["model"]["w"] += 1
        planner = host.planner()
        dcp.save(host.stage(state), checkpoint_id=str(tmp_path / f"s{save}"), planner=planner, no_dist=True)
        written.append({key: value.clone() for key, value in state["model"].items()})
        assert host.plans_key in SavePlanner._cached_save_plan  # the plans of this copy, under its own name
    assert "DefaultSavePlanner" not in SavePlanner._cached_save_plan  # a user's own DCP saves keep theirs apart
    for save, expected in enumerate(written):
        loaded = {"model": {key: torch.zeros_like(value) for key, value in expected.items()}}
        dcp.load(loaded, checkpoint_id=str(tmp_path / f"s{save}"), no_dist=True)
        assert all(torch.equal(loaded["model"][key], expected[key]) for key in expected)


def test_a_rank_whose_writing_thread_is_late_with_its_shards_is_named_by_the_others(tmp_path):
    """Every wait ends in an error naming who is late: rank 0's writing thread waits inside DCP's collectives for
    rank 1, which is still writing its shards, and says so (not "a rank", nor rank 0's own timeout)."""
    first = pt.spawn(workers.slow_shard_writer, 2, args=(str(tmp_path),), env={"PARATRAIN_TIMEOUT": "8"})
    assert first["rank"] == 0 and first["raised"] is not None, first
    assert "rank(s) 1 (still writing their shards)" in first["raised"], first["raised"]
    assert "step-000006" not in first["complete"]
