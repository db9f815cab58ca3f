"""pt.spawn workers for background (DCP, from each rank's writing thread) sharded checkpoints: 2 ranks, fsdp."""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

import paratrain as pt
from paratrain.checkpoint import Checkpointer, saving
from paratrain.checkpoint.writer_lock import LOCK_FILE
from paratrain.goodput.ledger import LEDGER_FILE
from paratrain.seeding import seed_per_rank
from tests.checkpoint.workers import EPOCHS, SEED, build, full_params, in_runtime, train_step

KILL_AT = 8  # the background save being written when rank 0 is killed


def train(rt, directory: str, background: bool, save_at=(), stop_at=None, resume=False, kill=None,
          wait=True) -> dict:
    """Train the recipe of :mod:`tests.checkpoint.workers`, saving after the steps ``save_at`` (and
    ``stop_at``, then stopping); ``resume``: from the newest checkpoint, every generator scrambled first.
    ``kill`` (a moment of the write): rank 0 SIGKILLs itself while the save of step KILL_AT is written in the
    background, at that moment. ``wait=False``:
    the end does not wait for the last background write (``rt.close()`` must)."""
    model, optimizer, schedule, loader = build(rt, 3 if resume else 1)
    seed_per_rank(SEED + (1000 if resume else 0), rt.rank)
    ckpt = Checkpointer(rt, directory, background=background, model=model, optimizer=optimizer,
                        scheduler=schedule, loader=loader)
    state = ckpt.resume() if resume else None
    step = state.step if state else 0
    in_background = []
    for epoch in rt.epochs(state, total=EPOCHS):
        for x, y in loader:
            train_step(rt, model, optimizer, schedule, x, y)
            step += 1
            if kill and step == KILL_AT + 1 and rt.is_main:
                _kill_while_written(Path(directory), f".step-{KILL_AT:06d}.tmp-*", kill)
            if step in save_at or step == stop_at:
                ckpt.save(step=step, epoch=epoch)
                in_background.append(ckpt._writing_name is not None)  # returned before the write was complete
            if step == stop_at:
                ckpt.finish_writing()
                return {"stopped_at": step, "in_background": in_background}
    if wait:
        ckpt.finish_writing()
    return {"steps": step, "resumed_from": state.step if state else None, "params": full_params(rt, model),
            "in_background": in_background}


def _kill_while_written(directory: Path, hidden: str, moment: str) -> None:
    """Rank 0, training on: wait until its writing thread has reached ``moment`` of the write into the hidden
    directory (``prepared``: made, empty; ``written``: the shards and the one-file parts written; ``sealed``:
    ``COMPLETE`` written, not renamed) and paused there (PARATRAIN_TEST_PAUSE_IN_SAVE), then die by SIGKILL with
    the checkpoint not committed."""
    sign = {"prepared": "", "written": "/rng.pt", "sealed": "/COMPLETE"}[moment]
    deadline = time.monotonic() + 120
    while not list(directory.glob(f"{hidden}{sign}")):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{directory / hidden} never reached {moment!r}: the background write did not pause")
        time.sleep(0.05)
    time.sleep(0.2)  # past the file's creation: into the pause
    os.kill(os.getpid(), signal.SIGKILL)


def background_matches_foreground(root: str) -> dict:
    return in_runtime("fsdp", _background_matches_foreground, root)


def _background_matches_foreground(rt, root: str) -> dict:
    """Foreground and background saves at 4, 8 and 10, stop, resume to the end: the same weights. Then a
    background write that fails on rank 1 (its shards' Future) fails on both ranks at the next wait."""
    results = {}
    for background in (False, True):
        directory = f"{root}/{'background' if background else 'foreground'}"
        stopped = train(rt, directory, background, save_at=(4, 8), stop_at=10)
        resumed = train(rt, directory, background, resume=True)
        results[background] = {**resumed, "in_background": stopped["in_background"],
                               "kept": _listing(directory)}
    # The foreground reference for the kill test: stopped (and saved) at step 4, resumed.
    train(rt, f"{root}/at4", False, stop_at=4)
    at4 = train(rt, f"{root}/at4", False, resume=True)
    return {"foreground": results[False], "background": results[True], "at4": at4["params"],
            "failure": pt.all_gather_object(_failed_write(rt, f"{root}/failing"))}


def _failed_write(rt, directory: str) -> dict:
    """Rank 1's shards fail to be written (a full disk): the next wait raises on both ranks. Then a background
    save whose check fails on rank 1 fails on both at the next wait, before anything is written."""
    model, optimizer, schedule, loader = build(rt, 1)
    ckpt = Checkpointer(rt, directory, background=True, model=model, optimizer=optimizer, loader=loader)
    ckpt.save(step=1)
    real = saving.write_shards

    def full_disk_on_rank_one(target, staged, group, host_copy, written_here):
        real(target, staged, group, host_copy, written_here)
        if rt.rank == 1:  # what DCP's storage writer raises when the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))

    saving.write_shards = full_disk_on_rank_one
    try:
        ckpt.save(step=2)
        error = "no error"
        try:
            ckpt.finish_writing()
        except pt.CheckpointError as exc:
            error = str(exc)
    finally:
        saving.write_shards = real

    def refuse_on_rank_one() -> None:  # save(check=...): what the fit loop checks (weights finite, ...)
        if rt.rank == 1:
            raise RuntimeError("weights are not finite")

    refused, refused_at = "no error", "nowhere"
    try:
        ckpt.save(step=3, check=refuse_on_rank_one)
        refused_at = "finish_writing"
        ckpt.finish_writing()
    except pt.CheckpointError as exc:
        refused = str(exc)
    return {"error": error, "refused": refused, "refused_at": refused_at, "listing": _listing(directory), "latest": ckpt.latest().name}


def _listing(directory: str) -> list[str]:
    """What the checkpoints directory holds but the writer lock and the goodput ledger (hidden leftovers too)."""
    return sorted(name for name in os.listdir(directory) if name not in (LOCK_FILE, LEDGER_FILE))


def killed_while_writing(directory: str, moment: str) -> dict:
    return in_runtime("fsdp", lambda rt: train(rt, directory, True, save_at=(4, KILL_AT, 12), kill=moment))


def resume_after_kill(directory: str) -> dict:
    """Resume, save at 12 (the run's first save: foreground) and 15 (background), and leave it to rt.close()."""
    return in_runtime("fsdp", lambda rt: train(rt, directory, True, save_at=(12, 15), resume=True, wait=False))


def live_sharded_state() -> dict:
    return in_runtime("fsdp", _live_sharded_state)


def _live_sharded_state(rt) -> dict:
    """LiveState on fsdp shards: torch's answer the first time, then the same keys over the very same shards
    without torch; and what the training thread of a background sharded save agrees on (collectives it makes)."""
    import threading

    import torch.distributed.checkpoint.state_dict as dsd

    from paratrain import comm
    from paratrain.checkpoint.snapshot import LiveState, _same_state

    model, optimizer, schedule, loader = build(rt, 1)
    batches = iter(loader)
    for _ in range(2):
        train_step(rt, model, optimizer, schedule, *next(batches))
    live = LiveState()
    first = live.model(model, sharded=True), live.optimizer(model, optimizer, sharded=True)
    reference = dsd.get_model_state_dict(model), dsd.get_optimizer_state_dict(model, optimizer)
    train_step(rt, model, optimizer, schedule, *next(batches))
    calls = []
    real = dsd.get_model_state_dict, dsd.get_optimizer_state_dict
    dsd.get_model_state_dict = dsd.get_optimizer_state_dict = lambda *a, **k: calls.append(a)
    try:
        fast = live.model(model, sharded=True), live.optimizer(model, optimizer, sharded=True)
    finally:
        dsd.get_model_state_dict, dsd.get_optimizer_state_dict = real
    again = dsd.get_model_state_dict(model), dsd.get_optimizer_state_dict(model, optimizer)
    matched = {"first": _same_state(first[0], reference[0]) and _same_state(first[1], reference[1]),
               "fast": _same_state(fast[0], again[0]) and _same_state(fast[1], again[1]),
               "torch_calls": len(calls), "kinds": sorted({type(v).__name__ for v in fast[0].values()}),
               "optimizer_matched": live._optimizers[optimizer]}

    # collectives of the training thread during background saves after the first (foreground) one
    ckpt = Checkpointer(rt, _scratch(rt), background=True, model=model, optimizer=optimizer, loader=loader)
    ckpt.save(step=3)
    counted = []
    wrapped = {}
    for name in ("all_gather_object", "broadcast_object", "barrier", "gather_object"):
        original = getattr(comm, name)
        wrapped[name] = original

        def counting(*args, _name=name, _original=original, **kwargs):
            if threading.current_thread() is threading.main_thread():
                counted.append(_name)
            return _original(*args, **kwargs)

        setattr(comm, name, counting)
    per_save = []
    try:
        for step in (4, 5):
            train_step(rt, model, optimizer, schedule, *next(batches))
            counted.clear()
            ckpt.save(step=step)
            per_save.append(list(counted))
    finally:
        for name, original in wrapped.items():
            setattr(comm, name, original)
    ckpt.finish_writing()
    return {**matched, "collectives_per_save": per_save, "latest": ckpt.latest().name}


def _scratch(rt) -> str:
    """A fresh directory every rank names alike (rank 0's, shared)."""
    import tempfile

    from paratrain import comm

    return comm.broadcast_object(tempfile.mkdtemp(prefix="live-sharded-") if rt.is_main else None)


def optimizer_copied_by_the_thread(directory: str) -> dict:
    return in_runtime("fsdp", _optimizer_copied_by_the_thread, directory)


def _optimizer_copied_by_the_thread(rt, directory: str) -> dict:
    """A background sharded save leaves the copy of the optimizer's shards to the writing thread, which makes it
    here only once the next step waits for it: that step waits (a ``copy_wait`` in the ledger), and the checkpoint
    holds the optimizer's state of the save, not the state after the step."""
    import json

    import torch

    from paratrain.checkpoint.async_shards import HostCopyOfShards
    from tests.checkpoint.helpers import copy_only_once_the_step_waits

    model, optimizer, schedule, loader = build(rt, 1)
    batches = iter(loader)
    for _ in range(2):
        train_step(rt, model, optimizer, schedule, *next(batches))
    ckpt = Checkpointer(rt, directory, background=True, model=model, optimizer=optimizer, scheduler=schedule)
    ckpt.save(step=2)  # the run's first save: in the foreground
    train_step(rt, model, optimizer, schedule, *next(batches))
    first = next(iter(model.parameters()))
    at_save = {key: value.to_local().clone() for key, value in optimizer.state[first].items() if key != "step"}
    with copy_only_once_the_step_waits(ckpt, HostCopyOfShards, "copy_the_rest"):
        ckpt.save(step=3)
        train_step(rt, model, optimizer, schedule, *next(batches))  # its step() waits for the copy
        ckpt.finish_writing()
    moved = not torch.equal(optimizer.state[first]["exp_avg"].to_local(), at_save["exp_avg"])
    fresh, fresh_optimizer, fresh_schedule, _ = build(rt, 5)
    Checkpointer(rt, directory, model=fresh, optimizer=fresh_optimizer, scheduler=fresh_schedule).resume()
    loaded = fresh_optimizer.state[next(iter(fresh.parameters()))]
    waits = [json.loads(line)["name"] for line in (Path(directory) / LEDGER_FILE).read_text().splitlines()
             if '"copy_wait"' in line]
    return {"moved_after_the_save": moved, "waits": waits, "latest": ckpt.latest().name,
            "saved_is_the_state_at_the_save": all(torch.equal(loaded[key].to_local(), value)
                                                  for key, value in at_save.items())}


def slow_shard_writer(directory: str) -> dict:
    """fsdp, background saves: rank 1's writing thread writes its shards of step 6 slowly (past
    ``PARATRAIN_TIMEOUT``): what rank 0's next save raised, and the checkpoints left. 2 ranks."""
    return in_runtime("fsdp", _slow_shard_writer, directory)


def _slow_shard_writer(rt, directory: str) -> dict:
    from paratrain import comm
    from paratrain.checkpoint.files import PAUSE_ENV

    model, optimizer, *_ = build(rt, 1)
    ckpt = Checkpointer(rt, directory, model=model, optimizer=optimizer, background=True)
    ckpt.save(step=2)  # the first one: in the foreground
    ckpt.save(step=4)
    ckpt.finish_writing("the slow one")
    if rt.rank == 1:
        os.environ[PAUSE_ENV] = f"{comm.DEFAULT_TIMEOUT_S + 5:g}@6:shards"
    ckpt.save(step=6)  # returns at once on both ranks; rank 1's thread then writes its shards slowly
    raised = None
    try:
        ckpt.save(step=8)
    except pt.ParatrainError as exc:
        raised = f"{type(exc).__name__}: {exc}"
    os.environ.pop(PAUSE_ENV, None)
    try:
        ckpt.finish_writing("the end")
    except pt.ParatrainError:
        pass
    return {"rank": rt.rank, "raised": raised, "complete": [path.name for path in ckpt.checkpoints()]}
