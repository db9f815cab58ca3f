"""One save, step by step; every step ends on all ranks together (see :mod:`.all_or_none`).

1. rank 0 makes a hidden temporary directory (and clears ones left by killed saves);
2. fsdp: every rank writes its shards there with DCP;
3. rank 0 writes the one-file parts: model weights (non-sharded), optimizer,
   other objects, and the RNG states gathered from every rank;
4. rank 0 seals it (checksums → ``manifest.json`` → ``COMPLETE``), renames it to
   its visible name, fsyncs, points ``latest`` at it and applies retention.

With ``background=True`` (after the first save) every rank blocks only for its own checks and, on
rank 0, a host copy of the state (the optimizers' state in host memory: copied by rank 0's thread, before
their next step); a thread on every rank then agrees with the others, and rank 0's runs
steps 1, 3 and 4 (:mod:`.background`) only when every rank succeeded, while training goes on. Sharded
checkpoints: every rank also copies its shards to host memory (:mod:`.async_shards`); once the threads agreed,
rank 0's runs step 1, every rank's step 2, rank 0's steps 3 and 4.

A process killed at any point leaves either the old set of checkpoints or the
new one; a half-written directory keeps its hidden name and is never read.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from paratrain import comm
from paratrain.checkpoint import catalog, rng
from paratrain.checkpoint.all_or_none import (
    Outcome,
    agree,
    main_then_share,
    on_all_ranks,
    run_here,
)
from paratrain.checkpoint.async_shards import write_shards
from paratrain.checkpoint.background import start_writing_thread
from paratrain.checkpoint.files import (
    check_writable_directory,
    fsync_path,
    pause_if_requested,
    remove_tree,
)
from paratrain.checkpoint.layout import (
    COMPLETE,
    checkpoint_name,
    is_own_leftover,
    set_aside_name,
    temporary_name,
)
from paratrain.checkpoint.manifest import Manifest, seal
from paratrain.checkpoint.model_state import (
    model_state,
    optimizer_is_fresh,
    optimizer_state,
)
from paratrain.checkpoint.packed import is_packed
from paratrain.checkpoint.safe_load import check_plain
from paratrain.checkpoint.snapshot import LiveState, can_wait
from paratrain.checkpoint.write_marks import WriteMarks
from paratrain.checkpoint.writer import (
    check_free_space,
    safetensors_ready,
    tensor_bytes,
    write_model,
    write_sharded,
    write_state,
)
from paratrain.errors import CheckpointError, CollectiveTimeoutError, ConfigError

if TYPE_CHECKING:
    from paratrain.checkpoint.checkpointer import Checkpointer


def clean_metrics(metrics: dict[str, Any] | None) -> dict[str, float]:
    """Metrics as JSON numbers (0-dim tensors become floats).

    Raises:
        ConfigError: a value that is not a number.
    """
    cleaned: dict[str, float] = {}
    for key, value in (metrics or {}).items():
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"save(metrics=...): {key!r} is {type(value).__name__}, not a number; pass numbers only")
        cleaned[str(key)] = float(value)
    return cleaned


def clean_extra(extra: dict[str, Any] | None) -> dict[str, Any]:
    """``extra`` as stored in the manifest (JSON).

    Raises:
        ConfigError: it is not a JSON-serialisable dict.
    """
    if extra is None:
        return {}
    try:
        return json.loads(json.dumps(extra))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"save(extra=...) must be a JSON-serialisable dict ({exc}); keep tensors in stateful objects") from exc


def save(
    ckpt: Checkpointer,
    step: int | None,
    epoch: int | None,
    metrics: dict[str, Any] | None,
    extra: dict[str, Any] | None,
    check: Callable[[], None] | None = None,
) -> Path:
    """Write one checkpoint of ``ckpt``'s objects; return its directory. Collective. ``check`` runs on
    every rank before anything is read or written; what it raises fails the save on every rank."""
    name = checkpoint_name(step, epoch)
    manifest = Manifest(name=name, sequence=0, step=step, epoch=epoch, metrics=clean_metrics(metrics),
                        extra=clean_extra(extra), run=ckpt.run_config(), sharded=ckpt.sharded)
    if ckpt.background and ckpt.storage_checked:
        if ckpt.sharded:
            return _save_shards_in_background(ckpt, name, manifest, step, check)
        return _save_in_background(ckpt, name, manifest, step, check)
    if check is not None:
        on_all_ranks(f"saving checkpoint {name}", check)
    ckpt.hold_directory()  # one writer per directory; after the arguments were checked, so a refused save writes nothing
    ckpt.finish_writing(f"saving {name}", say=False)  # one write at a time; a failed one raises here, on every rank
    rng_states = comm.gather_object(rng.capture())  # before anything else runs: the state the loop has now
    per_rank = {e.name: comm.gather_object(e.obj.state_dict()) for e in ckpt.entries if e.kind == "per_rank"}
    temporary = Path(main_then_share(f"cannot start checkpoint {name}", lambda: str(_prepare(ckpt.directory, name))))
    try:
        if ckpt.sharded:
            shards = on_all_ranks(f"collecting the state of checkpoint {name}", lambda: _sharded_states(ckpt))
            on_all_ranks(f"writing the shards of checkpoint {name}", lambda: write_sharded(temporary, shards))
        gathered = {}
        if getattr(ckpt.access, "collective", False):
            gathered = on_all_ranks(f"collecting the state of checkpoint {name}", lambda: _whole_states(ckpt))
        manifest.objects = main_then_share(
            f"writing checkpoint {name}", lambda: _write_files(ckpt, temporary, rng_states, step, {**gathered, **per_rank})
        )
        final = main_then_share(f"completing checkpoint {name}", lambda: str(_commit(ckpt, temporary, manifest)))
        if not ckpt.storage_checked:
            ckpt.storage_checked = True
            _warn_unless_every_rank_sees(Path(final))
            if ckpt.background:
                ckpt.writing_group()  # collective: made here, where every rank waits anyway, not in a background save
                start_writing_thread()  # and the thread the next saves hand their writes to
                if ckpt.sharded:  # and the host copy of this rank's shards, which the next saves copy into
                    ckpt.host_copy.stage(shards)
                if comm.is_main() and not ckpt.sharded:
                    _prepare_host_copies(ckpt)
    except CheckpointError:
        # Raised on every rank together (agreement): remove the half-written directory,
        # then let all ranks return only once it is gone. Earlier checkpoints and
        # `latest` were never touched.
        if comm.is_main():
            shutil.rmtree(temporary, ignore_errors=True)
        comm.barrier(name=f"cleaning up the failed checkpoint {name}")
        raise
    except BaseException:
        if comm.is_main():
            shutil.rmtree(temporary, ignore_errors=True)
        raise
    return Path(final)


def _warn_unless_every_rank_sees(checkpoint: Path) -> None:
    """After a run's first save: every rank looks for it; rank 0 warns about the hosts that cannot
    see it (each node on its own disk), now rather than at a resume or restart. Collective."""
    seen = comm.all_gather_object((checkpoint.is_dir(), socket.gethostname()))
    blind = sorted({host for visible, host in seen if not visible})
    if blind and comm.is_main():
        ranks = ", ".join(str(rank) for rank, (visible, _) in enumerate(seen) if not visible)
        warnings.warn(
            f"{checkpoint} is not visible to rank(s) {ranks} (host {', '.join(blind)}): a restart or a resume "
            "there cannot read it; keep checkpoints on a filesystem every node shares (NFS, Lustre, ...)",
            catalog.CheckpointWarning, stacklevel=3,
        )


def _prepare(directory: Path, name: str, hidden: str | None = None) -> Path:
    """Rank 0: the hidden directory ``hidden`` (default: a new temporary name for ``name``), made after
    clearing what killed saves left."""
    check_writable_directory(directory)
    for leftover in directory.iterdir():
        # What killed saves left: hidden temporary directories and files, replaced checkpoints.
        if not is_own_leftover(leftover.name):  # only what paratrain named so; a user's file stays
            continue
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
    temporary = directory / (hidden or temporary_name(name))
    temporary.mkdir()
    return temporary


def _sharded_states(ckpt: Checkpointer) -> dict[str, Any]:
    """This rank's DTensor shards of every model and every optimizer that has state (room for them checked on
    the checkpoints' disk)."""
    states: dict[str, Any] = {}
    live = ckpt.live_state  # torch's answer, without its per-call overhead once it matched (the first save)
    for entry in ckpt.entries:
        if entry.kind == "model":
            states[entry.name] = live.model(entry.obj, sharded=True) if live else model_state(entry.obj, sharded=True)
        elif entry.kind == "optimizer" and not optimizer_is_fresh(entry.obj):
            model = ckpt.model_of(entry)
            states[entry.name] = (live.optimizer(model, entry.obj, sharded=True) if live
                                  else optimizer_state(model, entry.obj, sharded=True))
    check_free_space(ckpt.directory, tensor_bytes(states))
    return states


def _whole_states(ckpt: Checkpointer) -> dict[str, Any]:
    """Every rank: whole-tensor model and optimizer states, for an access whose reads are
    collective (DeepSpeed gathers ZeRO partitions); rank 0 then writes them."""
    states: dict[str, Any] = {}
    for entry in ckpt.entries:
        if entry.kind == "model":
            states[entry.name] = ckpt.access.model_state(entry.obj)
        elif entry.kind == "optimizer":
            states[entry.name] = ckpt.access.optimizer_state(ckpt.model_of(entry), entry.obj)
    return states


def _save_in_background(ckpt: Checkpointer, name: str, manifest: Manifest, step: int | None,
                        check: Callable[[], None] | None) -> Path:
    """Every rank blocks only for what it does alone: its thread of the previous save joined (that save's
    outcome, the same on every rank, raised here), ``check`` run, its generator states taken, and on rank 0
    a host copy of the state (but the optimizers' state in host memory, which rank 0's thread copies before
    their next step, and then checks that every part can be saved). A thread on every rank then agrees with
    the others on the writing group, and rank 0's writes the checkpoint only when every rank succeeded (:func:`_agree_then_write`). The first
    save of a run is written in the foreground (it also checks that every rank sees the storage).
    Collective, with no collective of its own in the training thread (but a strategy's per-rank state and
    collective state reads, when there are any, gathered first as in a foreground save).

    What ``check`` or the copy raises on any rank is not raised here: nothing is committed for this save,
    and every rank raises it, naming the rank and this checkpoint, at the next save, :meth:`finish_writing`
    or :meth:`close` — one save later than a foreground save would.
    """
    rng_state = rng.capture()  # before anything else runs: the state the loop has now
    ckpt._writing_name = None
    ckpt.wait_for_previous(f"saving {name}")  # every rank: one write at a time; a failed one raises here
    per_rank = {e.name: comm.gather_object(e.obj.state_dict()) for e in ckpt.entries if e.kind == "per_rank"}
    ckpt.hold_directory()  # held since the first save: nothing to do
    gathered = {}
    if getattr(ckpt.access, "collective", False):
        gathered = on_all_ranks(f"collecting the state of checkpoint {name}", lambda: _whole_states(ckpt))
    group = ckpt.writing_group()

    def snapshot() -> Any:  # every rank: the check; rank 0: a host copy, into buffers the previous write freed
        if check is not None:
            check()
        return _host_snapshot(ckpt, {**gathered, **per_rank}, name) if comm.is_main() else None

    taken, outcome, _ = run_here(f"saving checkpoint {name}", snapshot)
    ckpt.start_writing(name, _agree_then_write(ckpt, name, manifest, taken, outcome, rng_state, step, group))
    ckpt._writing_name = name  # every rank: finish_writing() waits for it
    return ckpt.directory / name


def _agree_then_write(ckpt: Checkpointer, name: str, manifest: Manifest, taken: Any, outcome: Outcome,
                      rng_state: Any, step: int | None, group: Any) -> Callable[[], str]:
    """What the thread of every rank runs for a background save, on ``group`` (the writing group, used by these
    threads only, one save after the other: the same collectives in the same order on every rank):

    1. a monitored barrier: a rank that does not reach this save's agreement within ``PARATRAIN_TIMEOUT``
       is named (:class:`~paratrain.errors.CollectiveTimeoutError`);
    2. one all-gather of every rank's outcome (its check and, on rank 0, the copy) and generator states: a
       failure anywhere raises the same :class:`CheckpointError` on every rank's thread, naming the rank and
       this checkpoint, and nothing is written;
    3. rank 0 makes the hidden directory, writes, seals, renames, points ``latest`` and prunes — the same steps
       as a foreground save — while the others wait for its outcome (at most ``PARATRAIN_TIMEOUT`` from this
       save: then :class:`~paratrain.errors.CollectiveTimeoutError` naming rank 0), which every rank's thread
       then raises or returns alike.

    An error every rank's thread raised alike is marked ``agreed``: the training thread raises it as it is.
    """

    def write_here() -> str:  # rank 0
        objects, pending, _ = taken
        ckpt.host_buffers.ready()  # GPU copies still in flight
        temporary = _prepare(ckpt.directory, name)
        pause_if_requested(step, temporary, "prepared")
        try:
            manifest.objects = _write_collected(ckpt, temporary, objects, pending, rng_states, step, checked=True)
            return str(_commit(ckpt, temporary, manifest))
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise

    rng_states: list[Any] = []
    writing = False  # the ranks agreed: rank 0 writes alone, the others wait for it

    def write() -> str:
        nonlocal writing
        here = outcome
        if taken is not None:  # rank 0: the copies left to this thread, then the checks that the state can be saved
            try:
                _, here, _ = run_here(f"saving checkpoint {name}", lambda: _finish_snapshot(ckpt, taken))
            finally:
                ckpt.copies_before_step.done()  # before any wait for another rank: training steps on
        rng_states[:] = _agree_in_thread(name, here, rng_state, group)
        writing = True
        return main_then_share(f"writing checkpoint {name}", write_here, group)

    def late() -> tuple[str, list[int]]:  # when the ranks had agreed, the others wait for rank 0 alone
        return ("rank 0 (writing it)", [0]) if writing and not comm.is_main() else ("a rank", [])

    return lambda: _as_agreed(name, write, late)


def _agree_in_thread(name: str, outcome: Outcome, share: Any, group: Any) -> list[Any]:
    """A writing thread's agreement on checkpoint ``name``, on ``group``: a monitored barrier (a rank that does not
    reach it within ``PARATRAIN_TIMEOUT`` is named), then one all-gather of every rank's ``outcome`` (its check
    and copies) and ``share`` (returned in rank order). Collective on ``group``.

    Raises:
        CheckpointError: some rank's outcome is a failure; on every rank alike, naming the rank.
    """
    comm.barrier(name=f"agreeing on checkpoint {name}", group=group)
    return agree(outcome, share, group)


def _as_agreed(name: str, write: Callable[[], str], late: Callable[[], tuple[str, list[int]]]) -> str:
    """Run a writing thread's ``write`` of checkpoint ``name``: a :class:`CheckpointError`, which every rank's
    thread raises alike (the ranks agreed on it), says the checkpoint was not saved and is marked ``agreed``
    (the training thread raises it as it is); a late rank named by the agreement's barrier is raised as it is; a
    timeout of the writing group or a peer gone (another ``RuntimeError``), not agreed, becomes a
    :class:`CollectiveTimeoutError` naming the ranks ``late()`` names then (its words and the rank numbers; "a
    rank" and none when it cannot tell)."""
    try:
        return write()
    except CheckpointError as exc:
        error = CheckpointError(f"checkpoint {name} was not saved: {exc}")
        error.restart_can_help = getattr(exc, "restart_can_help", True)
        error.agreed = True
        raise error from exc
    except CollectiveTimeoutError:  # the monitored barrier's: it names the late rank already
        raise
    except RuntimeError as exc:
        who, ranks = late()
        raise CollectiveTimeoutError(
            f"checkpoint {name}: {who} did not take part in the ranks' agreement on it within "
            f"{comm.DEFAULT_TIMEOUT_S:g}s (it crashed or hangs; a write that takes longer needs a larger "
            f"PARATRAIN_TIMEOUT): {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
            late_ranks=ranks,
        ) from exc


def _save_shards_in_background(ckpt: Checkpointer, name: str, manifest: Manifest, step: int | None,
                               check: Callable[[], None] | None) -> Path:
    """Every rank blocks only for what it does alone: its thread of the previous save joined (that save's outcome,
    the same on every rank, raised here), ``check`` run, its generator states taken, its model's shards copied to
    host memory (into the copy kept from the previous save; its optimizers' shards in host memory are copied by
    its writing thread, before their next step, as a one-file save's) and, on rank 0, a host copy of the one-file
    parts. A thread on every rank then agrees with the others on the writing group, and only when every rank
    succeeded writes (:func:`_shards_write`). Collective, with no collective of its own in the training thread (but a strategy's
    per-rank state, gathered first as in a foreground save).

    What ``check`` or the copies raise on any rank is not raised here: nothing is written for this save, and
    every rank raises it, naming the rank and this checkpoint, at the next save, :meth:`finish_writing` or
    :meth:`close` — one save later than a foreground save would (as a one-file background save).
    """
    rng_state = rng.capture()  # before anything else runs: the state the loop has now
    ckpt._writing_name = None
    ckpt.wait_for_previous(f"saving {name}")  # every rank: one write at a time; a failed one raises here
    per_rank = {e.name: comm.gather_object(e.obj.state_dict()) for e in ckpt.entries if e.kind == "per_rank"}
    ckpt.hold_directory()  # held since the first save: nothing to do
    group = ckpt.writing_group()
    # every rank knows the hidden directory's name: the suffix was agreed with the writing group
    temporary = ckpt.directory / temporary_name(name, ckpt.hidden_suffix)

    def snapshot() -> Any:  # every rank: the check and a host copy of its shards; rank 0: of the one-file parts
        if check is not None:
            check()
        states = _sharded_states(ckpt)
        later = [key for key in states if ckpt.by_name[key].kind == "optimizer" and can_wait(ckpt.by_name[key].obj)]
        shards = ckpt.host_copy.stage(states, later)  # but the optimizers' state: the writing thread copies it
        one_file = _host_snapshot(ckpt, per_rank) if comm.is_main() else None
        if later:  # the last thing: the writing thread then says done()
            ckpt.copies_before_step.leave(name, [ckpt.by_name[key].obj for key in later])
        return shards, one_file

    taken, outcome, _ = run_here(f"saving checkpoint {name}", snapshot)
    shards, one_file = taken if taken is not None else (None, None)
    ckpt.start_writing(name, _shards_write(ckpt, name, manifest, temporary, shards, one_file, outcome, rng_state,
                                           step, group))
    ckpt._writing_name = name  # every rank: finish_writing() waits for it (collectively)
    return ckpt.directory / name


def _shards_write(ckpt: Checkpointer, name: str, manifest: Manifest, temporary: Path, shards: Any, taken: Any,
                  outcome: Outcome, rng_state: Any, step: int | None, group: Any) -> Callable[[], str]:
    """What the writing thread of every rank runs for a background sharded save, on ``group`` (the writing group,
    used by these threads only, one save after the other): the copies left to it made, then the ranks agree on
    every rank's outcome (its check and copies) as in :func:`_agree_then_write`; rank 0 makes the hidden
    directory; every rank writes its shards there with DCP and rank 0 the one-file parts, and the ranks agree
    again; rank 0 commits — the same steps as a foreground save. A failure anywhere fails every rank's thread
    alike; rank 0 removes the hidden directory. A rank whose wait inside DCP's collectives ends names the ranks
    that had not written their own shards by then (:mod:`.write_marks`)."""
    marks = WriteMarks(name)
    phase = "agreeing"

    def prepare() -> None:  # rank 0
        _prepare(ckpt.directory, name, temporary.name)
        pause_if_requested(step, temporary, "prepared")

    def written_here() -> None:  # this rank's own shards are on disk; DCP's last collective waits for the others'
        pause_if_requested(step, temporary, "shards")
        marks.reached("shards")

    def written(rng_states: list[Any]) -> None:
        from torch.distributed.checkpoint.api import CheckpointException

        try:  # DCP fails every rank when one rank failed
            write_shards(temporary, shards, group, ckpt.host_copy, written_here)
        except CheckpointException:
            raise  # DCP's own report of what failed where
        except Exception as exc:  # a wait in DCP's collectives that timed out: for whom?
            slow = marks.missing("shards")
            if not slow:
                raise
            raise CheckpointError(f"{_ranks_still_writing(slow)} did not write their shards of checkpoint {name} "
                                  f"within {comm.DEFAULT_TIMEOUT_S:g}s (a slow or full disk, or a process that "
                                  f"hangs; a write that takes longer needs a larger PARATRAIN_TIMEOUT): "
                                  f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
        if comm.is_main():
            objects, pending, _ = taken
            manifest.objects = _write_collected(ckpt, temporary, objects, pending, rng_states, step, checked=True)

    def write() -> str:
        nonlocal phase
        here = outcome
        try:
            if shards is not None:  # the optimizers' state, before their next step
                _, here, _ = run_here(f"saving checkpoint {name}", lambda: ckpt.host_copy.copy_the_rest(shards))
        finally:
            ckpt.copies_before_step.done()  # before any wait for another rank: training steps on
        rng_states = _agree_in_thread(name, here, rng_state, group)
        phase = "writing"
        try:
            main_then_share(f"starting checkpoint {name}", prepare, group)
            on_all_ranks(f"writing checkpoint {name}", lambda: written(rng_states), group)
            return main_then_share(f"completing checkpoint {name}", lambda: str(_commit(ckpt, temporary, manifest)),
                                   group)
        except BaseException:
            if comm.is_main():
                shutil.rmtree(temporary, ignore_errors=True)
            raise

    def late() -> tuple[str, list[int]]:
        slow = marks.missing("shards") if phase == "writing" else []
        return (_ranks_still_writing(slow), slow) if slow else ("a rank", [])

    return lambda: _as_agreed(name, write, late)


def _ranks_still_writing(ranks: list[int]) -> str:
    return f"rank(s) {', '.join(map(str, ranks))} (still writing their shards)"


def _host_snapshot(ckpt: Checkpointer, gathered: dict[str, Any], name: str | None = None) -> Any:
    """Rank 0, in the training thread: a host copy of everything the checkpoint holds but the generator
    states, in buffers reused from the previous save (written by now). A state that cannot be saved commits
    nothing at this save (a one-file background save raises it at the next save or wait).

    ``name`` (a one-file background save): the copy of the state of optimizers in host memory is left to the
    save's writing thread, before their next step (:class:`~paratrain.checkpoint.snapshot.CopiesBeforeStep`),
    and the checks that every part can be saved run there too (:func:`_finish_snapshot`, before the ranks
    agree); without, both run here."""
    objects, pending = _collect(ckpt, gathered, ckpt.live_state)
    copied: list[tuple[str, str, Any]] = []
    later: list[tuple[int, dict[str, Any], Any]] = []  # (its place in copied; the copy, to complete; the live state)
    optimizers = []
    for obj_name, kind, state in pending:
        optimizer = ckpt.by_name[obj_name].obj if kind == "optimizer" else None
        if (name is not None and isinstance(state, dict) and isinstance(state.get("state"), dict)
                and can_wait(optimizer)):
            # its hyperparameters now (a scheduler may change them before the next step), its tensors later
            head = {key: None if key == "state" else ckpt.host_buffers.copy(value, (obj_name, key))
                    for key, value in state.items()}
            later.append((len(copied), head, state["state"]))
            optimizers.append(optimizer)
            copied.append((obj_name, kind, head))
        else:
            copied.append((obj_name, kind, _host_copy(ckpt, obj_name, kind, state)))
    taken = (objects, copied, later)
    if name is None:
        _finish_snapshot(ckpt, taken)
    elif optimizers:
        ckpt.copies_before_step.leave(name, optimizers)  # the last thing: the writing thread then says done()
    return taken


def _prepare_host_copies(ckpt: Checkpointer) -> None:
    """Rank 0, at a run's first save (written in the foreground, where every rank waits anyway): the model and
    optimizer states copied to host memory once and dropped, so that the first background save finds what each
    later one finds — the check that reading the state in place gives torch's answer done
    (:class:`~paratrain.checkpoint.snapshot.LiveState`: ~13 ms of Python for a model and an Adam optimizer) and
    the host buffers allocated and touched (page-locked ones on a GPU machine). Without it the first background
    save blocked 5-8 times as long as the next ones. State read through torch at every save (another access)
    keeps nothing to prepare. Not collective."""
    if ckpt.live_state is None:
        return
    for entry in ckpt.entries:
        if entry.kind == "model":
            _host_copy(ckpt, entry.name, "model", ckpt.live_state.model(entry.obj))
        elif entry.kind == "optimizer":
            _host_copy(ckpt, entry.name, "optimizer", ckpt.live_state.optimizer(ckpt.model_of(entry), entry.obj))
    ckpt.host_buffers.ready()  # GPU copies into the new buffers, before the next save overwrites them


def _finish_snapshot(ckpt: Checkpointer, taken: Any) -> None:
    """Rank 0: the copies :func:`_host_snapshot` left made, then every one-file part checked (plain data; model
    weights safetensors can hold).

    Raises:
        CheckpointError: a part that cannot be saved, named.
    """
    _, pending, later = taken
    for place, head, state in later:
        obj_name, kind, _ = pending[place]
        pending[place] = (obj_name, kind, _host_copy(ckpt, obj_name, kind, {**head, "state": state}))
    later.clear()
    for place, (obj_name, kind, state) in enumerate(pending):
        if kind == "model":  # what the writer writes: checked once
            pending[place] = (obj_name, kind, safetensors_ready(obj_name, state))
        else:
            check_plain(state["skeleton"] if is_packed(state) else state, obj_name)


def _host_copy(ckpt: Checkpointer, obj_name: str, kind: str, state: Any) -> Any:
    """Rank 0: a host copy of one part, into the buffers of the previous save: a model's tensor by tensor (the
    safetensors file names each), anything else straight into the packed form its ``.pt`` file holds
    (:meth:`~paratrain.checkpoint.snapshot.HostBuffers.packed`)."""
    if kind == "model":
        return ckpt.host_buffers.copy(state, (obj_name,))
    return ckpt.host_buffers.packed(state, (obj_name,))


def _write_files(ckpt: Checkpointer, temporary: Path, rng_states: list[Any], step: int | None,
                 gathered: dict[str, Any]) -> dict[str, Any]:
    """Rank 0: everything that is one file (``gathered``: states already collected by all
    ranks); returns the manifest's object table."""
    objects, pending = _collect(ckpt, gathered)
    return _write_collected(ckpt, temporary, objects, pending, rng_states, step)


def _collect(ckpt: Checkpointer, gathered: dict[str, Any],
             live: LiveState | None = None) -> tuple[dict[str, Any], list[tuple[str, str, Any]]]:
    """Rank 0: the manifest entries of the sharded parts, and ``(name, kind, state)`` of the one-file parts.
    ``live``: read whole-tensor model and optimizer state in place (a background save copies it next)."""
    objects: dict[str, Any] = {}
    pending: list[tuple[str, str, Any]] = []
    for entry in ckpt.entries:
        if entry.kind == "model" and ckpt.sharded:
            objects[entry.name] = {"kind": "model", "sharded": True}
        elif entry.kind == "model":
            state = (gathered[entry.name] if entry.name in gathered
                     else live.model(entry.obj) if live is not None else ckpt.access.model_state(entry.obj))
            pending.append((entry.name, "model", state))
        elif entry.kind == "optimizer" and ckpt.sharded and not optimizer_is_fresh(entry.obj):
            objects[entry.name] = {"kind": "optimizer", "sharded": True, "model": entry.model}
        elif entry.kind == "optimizer":
            model = ckpt.model_of(entry)
            state = (gathered[entry.name] if entry.name in gathered
                     else live.optimizer(model, entry.obj) if live is not None
                     else ckpt.access.optimizer_state(model, entry.obj))
            pending.append((entry.name, "optimizer", state))
        elif entry.kind == "per_rank":
            pending.append((entry.name, "per_rank", {"ranks": gathered[entry.name]}))
        else:
            pending.append((entry.name, "state", entry.obj.state_dict()))
    return objects, pending


def _write_collected(ckpt: Checkpointer, temporary: Path, objects: dict[str, Any], pending: list[tuple[str, str, Any]],
                     rng_states: list[Any], step: int | None, checked: bool = False) -> dict[str, Any]:
    """Rank 0: the one-file parts and the generator states written into ``temporary``; returns the manifest's
    object table. ``checked``: the parts were checked already (:func:`_finish_snapshot`)."""
    check_free_space(temporary, tensor_bytes([state for _, _, state in pending]) + tensor_bytes(rng_states))
    for name, kind, state in pending:
        objects[name] = (write_model(temporary, name, state, checked, ckpt.model_descriptions if checked else None)
                         if kind == "model"
                         else write_state(temporary, name, kind, state, checked))
        if kind == "optimizer":
            objects[name]["model"] = ckpt.by_name[name].model
    write_state(temporary, "rng", "rng", {"ranks": rng_states})
    pause_if_requested(step, temporary)
    return objects


def _commit(ckpt: Checkpointer, temporary: Path, manifest: Manifest) -> Path:
    """Rank 0: seal, make visible, point ``latest`` at it, apply retention. The directory's checkpoints are read
    once, here (this process is their one writer: nothing else changes them until it returns)."""
    directory = ckpt.directory
    saved = catalog.complete(directory)
    manifest.sequence = max((saved_one.sequence for _, saved_one in saved), default=0) + 1
    seal(temporary, manifest)
    pause_if_requested(manifest.step, temporary, "sealed")
    final = directory / manifest.name
    aside = None
    if final.exists():  # same step saved again (e.g. after resuming from an older one)
        aside = directory / set_aside_name(manifest.name)
        os.replace(final, aside)
    try:
        os.replace(temporary, final)
    except OSError:
        if aside is not None:
            os.replace(aside, final)  # put the old one back: a failed save loses nothing
        raise
    fsync_path(directory)
    if aside is not None:
        remove_tree(aside, COMPLETE)
    catalog.write_latest(directory, manifest.name)
    _apply_retention(ckpt, final, [(path, kept) for path, kept in saved if path != final] + [(final, manifest)])
    return final


def _apply_retention(ckpt: Checkpointer, newest: Path, saved: list[catalog.Saved]) -> None:
    """Remove what ``keep_last`` lets go of among ``saved`` (the directory's checkpoints, oldest first), but the
    newest (the one ``latest`` names now) and the best."""
    keep = {newest, catalog.best(saved, ckpt.best_metric, ckpt.mode)}
    for path in catalog.expendable(saved, ckpt.keep_last, keep):
        try:
            remove_tree(path, COMPLETE)
        except OSError as exc:  # the new checkpoint is safe; an old one lingering is no reason to fail
            warnings.warn(f"could not remove old checkpoint {path}: {exc}", catalog.CheckpointWarning, stacklevel=2)
