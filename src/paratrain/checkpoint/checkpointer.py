"""``Checkpointer``: save everything stateful, resume from the newest good checkpoint.

    ckpt = pt.Checkpointer(rt, "runs/exp/checkpoints", model=model, optimizer=opt,
                           scheduler=sched, loader=train, keep_last=3, best_metric="accuracy")
    state = ckpt.resume()                    # None on a fresh start
    for epoch in rt.epochs(state, total=3):
        for batch in train:                  # a resumed epoch yields only its remaining batches
            ...
            step += 1
            if step % 100 == 0:
                ckpt.save(step=step, epoch=epoch)
        ckpt.save(step=step, epoch=epoch, metrics={"accuracy": acc})

Single/dp/ddp/deepspeed: rank 0 writes one file set (deepspeed's whole tensors are
gathered by all ranks first). fsdp (``rt.strategy.sharded_state``):
every rank writes its shards with torch.distributed.checkpoint (``background=True``: from its
writing thread). Either way the
save is atomic, checksummed and all-or-nothing across ranks; see
:mod:`paratrain.checkpoint.saving` and :mod:`paratrain.checkpoint.restoring`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from paratrain import comm
from paratrain.arguments import check_type, reject_objects
from paratrain.checkpoint import catalog, restoring, saving
from paratrain.checkpoint.all_or_none import main_then_share, on_all_ranks
from paratrain.checkpoint.async_shards import HostCopyOfShards, writing_group
from paratrain.checkpoint.auto_interval import AutoInterval
from paratrain.checkpoint.background import BackgroundWrite
from paratrain.checkpoint.manifest import Manifest, verify
from paratrain.checkpoint.model_state import TorchStateAccess
from paratrain.checkpoint.restoring import CheckpointState
from paratrain.checkpoint.snapshot import CopiesBeforeStep, HostBuffers, LiveState
from paratrain.checkpoint.stateful import Stateful, by_name, collect
from paratrain.checkpoint.writer import ModelDescriptions
from paratrain.checkpoint.writer_lock import WriterLock
from paratrain.errors import CheckpointError, ConfigError
from paratrain.goodput import ledger

_BY_NAME = "pass the objects to save by name: pt.Checkpointer(rt, directory, model=model, optimizer=opt, loader=train)"


def _check_arguments(runtime: Any, directory: Any, keep_last: Any, best_metric: Any, mode: Any, background: Any,
                     every: Any, mtbf: Any) -> None:
    """Check ``pt.Checkpointer()``'s options before anything is read or written.

    Raises:
    ConfigError: a model/optimizer/loader where an option belongs, or an option of the wrong type.
    """
    call = "pt.Checkpointer()"
    if runtime is not None and not hasattr(runtime, "strategy"):
        raise ConfigError(f"{call}: the first argument is the pt.Runtime (or None), got a {type(runtime).__name__}; {_BY_NAME}")
    reject_objects(call, _BY_NAME, directory=directory, keep_last=keep_last, best_metric=best_metric, mode=mode,
                   background=background, every=every, mtbf=mtbf)
    if not isinstance(directory, (str, Path)):
        raise ConfigError(f"{call}: directory must be a path (str or Path), got {type(directory).__name__}")
    check_type(call, "best_metric", best_metric, "str", allow_none=True)
    check_type(call, "background", background, "bool")
    if every is not None and every != "auto" and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise ConfigError(f"{call}: every={every!r}: a number of steps >= 1, 'auto' (the Young/Daly interval) or None")
    if mtbf is not None and (isinstance(mtbf, bool) or not isinstance(mtbf, (int, float)) or not mtbf > 0):
        raise ConfigError(f"{call}: mtbf={mtbf!r}: the mean time between failures in seconds, a number > 0")
    if mtbf is not None and every != "auto":  # taken silently, it would seem to set something
        raise ConfigError(f"{call}: mtbf={mtbf!r} sets the interval of every='auto' only, got every={every!r}; "
                          "pass every='auto' or drop mtbf")


class Checkpointer:
    """Saves and restores named stateful objects in ``directory``.

    Args:
        runtime: the job's :class:`~paratrain.Runtime` (its strategy decides one-file
            vs sharded; its precision's scaler state is saved too), or ``None`` for a
            plain single process.
        directory: where checkpoints go, e.g. ``runs/exp/checkpoints`` (created on save).
        keep_last: keep this many newest checkpoints (``None``: all); the best one by
            ``best_metric`` and the one ``latest`` points to are always kept too.
        best_metric: a key of ``save(metrics=...)`` that ranks checkpoints.
        mode: ``"max"`` (higher is better) or ``"min"``.
        background: after the first save, block only while rank 0 copies the state to host memory (the
            optimizers' state in host memory: its thread copies it, before their next ``step()``);
            a thread of every rank then agrees with the others (every rank's ``check`` and copy succeeded)
            and rank 0's writes, checksums, commits and prunes while training goes on (sharded checkpoints:
            every rank copies its shards and, once the threads agreed, a thread of every rank writes them
            with DCP's ``save``; rank 0's commits once every rank's are written). :meth:`save` then returns before the
            checkpoint is complete; the next save, :meth:`resume`, :meth:`finish_writing` and
            :meth:`close` wait for it, and raise what failed in it.
        every: what :meth:`due` answers: a save every N steps, or ``"auto"`` — the Young/Daly interval
            √(2 · save cost · MTBF) from the measured save cost (:mod:`paratrain.goodput.interval`).
        mtbf: the mean time between failures (seconds) for ``every="auto"``; default: estimated from
            this directory's earlier attempts, else one hour.
        **stateful: the objects, by name: models (``nn.Module``, wrapped or not),
            optimizers, and anything with ``state_dict()``/``load_state_dict()``
            (LR scheduler, the loader from ``rt.loader``, your own). ``None`` is skipped.

    Generator states (Python, NumPy, torch CPU/CUDA) of every rank are saved, and
    each rank restores its own. Other objects are saved from rank 0: they must be
    the same on all ranks (a training loader is).

    Raises:
        ConfigError: objects passed by position (they go by name), ``keep_last`` < 1, a
            bad ``mode``, a directory path that is a file, or an object that cannot be
            checkpointed.
    """

    def __init__(
        self,
        runtime: Any,
        directory: str | Path,
        keep_last: int | None = 3,
        best_metric: str | None = None,
        mode: str = "max",
        background: bool = False,
        every: int | str | None = None,
        mtbf: float | None = None,
        **stateful: Any,
    ):
        _check_arguments(runtime, directory, keep_last, best_metric, mode, background, every, mtbf)
        if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1):
            raise ConfigError(
                f"keep_last={keep_last!r}: keep at least 1 checkpoint (the newest), or None to keep all; "
                "without one there is nothing to resume from"
            )
        if mode not in ("max", "min"):
            raise ConfigError(f"mode={mode!r}: use 'max' (higher {best_metric or 'metric'} is better) or 'min'")
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ConfigError(f"checkpoint directory {self.directory} is a file; pass a directory path")
        self.runtime = runtime
        self.keep_last = keep_last
        self.best_metric = best_metric
        self.mode = mode
        strategy = getattr(runtime, "strategy", None)
        self.sharded = bool(getattr(strategy, "sharded_state", False))
        #: how whole-tensor model/optimizer state is read and written (the strategy's, or torch's)
        self.access = (strategy.state_access() if strategy is not None else None) or TorchStateAccess()
        self.entries: list[Stateful] = collect(stateful, getattr(runtime, "precision", None), strategy, self.access)
        if not self.entries:
            raise ConfigError("Checkpointer got nothing to save; pass objects by name, e.g. model=model, optimizer=opt")
        self.by_name = by_name(self.entries)
        #: one writer per checkpoint directory: rank 0 holds it from the first resume/save on
        #: until close() (or this object is freed, or the process ends)
        self._lock = WriterLock(self.directory, "checkpoint directory")
        self._holding = False  # the same on every rank: whether the hold was taken (collectively)
        self.storage_checked = False  # the same on every rank: whether every rank saw a saved checkpoint
        self.background = background
        self._writing: BackgroundWrite | None = None  # every rank: its thread of the background save in progress
        self._writing_name: str | None = None  # every rank: the checkpoint a thread writes
        self._group: Any = None  # every rank: the gloo group of background sharded writes, once made
        self.hidden_suffix: str | None = None  # every rank alike, with the group: its saves' hidden directories' suffix
        self.host_copy = HostCopyOfShards()  # every rank: the host copy of its shards, kept between background saves
        self._waits_said = 0  # rank 0: saves that waited for the previous write and said so
        self.every = every
        self.interval = AutoInterval(mtbf) if every == "auto" else None
        self._saved_step: int | None = None
        #: background saves: torch's whole-tensor state read in place, copied into buffers kept between saves
        self.live_state = LiveState() if type(self.access) is TorchStateAccess else None
        self.host_buffers = HostBuffers()
        self.model_descriptions = ModelDescriptions()  # of the host buffers' model tensors, for the writer
        self.copies_before_step = CopiesBeforeStep()  # optimizer state copied by the writing thread (sharded: every rank)
        weakref.finalize(self, self._lock.release)

    # ---- writing ---------------------------------------------------------------------------
    def save(
        self,
        step: int | None = None,
        epoch: int | None = None,
        metrics: dict[str, float] | None = None,
        extra: dict[str, Any] | None = None,
        check: Callable[[], None] | None = None,
    ) -> Path:
        """Write a checkpoint named ``step-NNNNNN`` (or ``epoch-NNNN``) and return its directory.

        Collective: all ranks must call it together with the same arguments. It
        returns once the checkpoint is complete on disk and ``latest`` points at it
        (``background=True``: after the first save, once rank 0 holds a host copy of the
        state — sharded: every rank of its shards — with no collective in the calling thread; the
        ranks' threads agree and complete it, and the next save waits for that).

        Args:
            step, epoch: counters (at least one); returned by ``resume()``.
            metrics: numbers kept in the manifest; ``best_metric`` picks the best.
            extra: any JSON-serialisable dict, returned by ``resume()``.
            check: called on every rank before anything is read or written; what it raises fails this
                save on every rank, with nothing written (inside the save's one agreement between the ranks;
                a background save after the first raises it at the next save or wait, see Raises).

        Raises:
            ConfigError: no step/epoch, non-numeric metrics, non-JSON ``extra``, or
                gradients of accumulation micro-steps still wait for an optimizer step.
            CheckpointError: any rank failed (read-only directory, disk full, a state
                that is not plain data, ``check``); every rank raises it, the half-written
                checkpoint is removed and earlier ones are untouched. A background save after
                the first raises what failed in it one save later, at the next save,
                :meth:`finish_writing` or :meth:`close`, naming the rank and the checkpoint; what
                failed in the previous one is raised here.
        """
        strategy = getattr(self.runtime, "strategy", None)
        if strategy is not None:  # pending gradients are not state a checkpoint can hold
            strategy.accumulation.check_no_pending("ckpt.save()")
        started = time.perf_counter()
        try:
            with ledger.phase("save") as record:
                path = saving.save(self, step, epoch, metrics, extra, check)
                record.update(name=path.name, background=self._writing_name is not None)
            if step is not None:
                self._saved_step = step
                if ledger.active() is not None:
                    ledger.active().set_step(step)
            if self.interval is not None:  # collective: rank 0's new estimate
                self.interval.after_save(time.perf_counter() - started)
        finally:
            if self._writing is not None:  # a background save's write, handed to the thread last (BackgroundWrite)
                self._writing.start()
        return path

    def due(self, step: int) -> bool:
        """Whether a save is due after ``step`` by ``every``: every N steps, or the ``"auto"`` interval
        (the same answer on every rank: the interval in steps is agreed at each save). Not collective."""
        if self.every is None:
            return False
        last = self._saved_step if self._saved_step is not None else 0
        if self.interval is not None:
            return step - last >= self.interval.steps
        return step % self.every == 0 and step != self._saved_step

    def start_writing(self, name: str, write: Any) -> None:
        """Every rank: the checkpoint ``name`` for this rank's writing thread (rank 0's writes; the others' agree
        with it), handed to it as :meth:`save` returns. (Called by a background save.)"""
        self._writing = BackgroundWrite(name, write, start=False)

    def writing_group(self) -> Any:
        """The gloo group on which the threads of background saves agree, made at the run's first save (collective
        then: every rank makes it together; see :mod:`paratrain.checkpoint.async_shards`). Only those threads
        use it, one save after the other, so its collectives run in the same order on every rank."""
        if self._group is None and comm.is_initialized():  # without a process group there is none to make
            self._group = writing_group()
            self.hidden_suffix = comm.broadcast_object(uuid.uuid4().hex[:8])
            comm.before_leaving(weakref.WeakMethod(self._finish_before_leaving))
        return self._group

    def _finish_before_leaving(self) -> None:
        """Before the process group goes (``rt.close()``): this rank's writing thread, which agrees with the
        other ranks' on the writing group, completes; a failure is said, not raised. Not collective."""
        self._complete_or_say("closing the process group")
        self._group = None

    def _complete_or_say(self, before: str, raise_agreed: bool = False) -> None:
        """This rank's write in flight, if any, completes; a failure is said on stderr, not raised (not
        collective: the next resume falls back to the previous checkpoint) — but with ``raise_agreed``, one that
        every rank's thread raised alike is raised."""
        self._writing_name = None
        if self._writing is not None:
            try:
                self._join(before, True)
            except Exception as exc:
                if raise_agreed and getattr(exc, "agreed", False):
                    raise
                print(f"paratrain: the background write of a checkpoint failed: {exc}", file=sys.stderr, flush=True)

    def finish_writing(self, before: str = "going on", say: bool = True) -> None:
        """Wait until the checkpoint being written in the background (if any) is complete; say so on
        stderr when it was still being written and ``say``. Collective.

        Raises:
            CheckpointError: on every rank, when the background write failed (its half-written
                directory is removed; earlier checkpoints and ``latest`` are untouched).
        """
        name = self._writing_name
        if name is None:
            return
        self._writing_name = None
        # Every rank that holds a writing thread joins it (rank 0; sharded: every rank), then they agree.
        try:
            on_all_ranks(f"writing checkpoint {name} in the background", lambda: self._join(before, say))
        except CheckpointError as exc:
            if getattr(exc.__cause__, "agreed", False):  # the threads agreed already: the same error, as it was
                raise exc.__cause__ from None
            raise

    def wait_for_previous(self, before: str) -> None:
        """Every rank, at a background save: this rank's thread of the previous one is done (rank 0's: the write
        complete). Not collective: its outcome is the same on every rank (the threads agreed), and raised so.

        Raises:
            CheckpointError: the previous save failed on some rank (named, with the checkpoint) or its write
                failed; nothing of it was committed.
        """
        self._join(f"{before} (said once: later waits count as save blocking in the goodput ledger)",
                   say=self._waits_said < 1)

    @property
    def agreement_pending(self) -> bool:
        """Whether the last save returned before the ranks agreed on it (a background save after the first):
        what its ``check`` found on another rank is known at the next save or wait. Not collective."""
        return self._writing is not None

    def _join(self, before: str, say: bool) -> None:
        writing, self._writing = self._writing, None
        if writing is None:
            return
        say = say and comm.is_main()
        if writing.running and say:
            self._waits_said += 1
        try:
            writing.wait(before, say)
        finally:
            if self.interval is not None and writing.finished is not None:
                self.interval.written(writing.finished - writing.started, *writing.clocks)
            if ledger.active() is not None:
                ledger.active().event("written", name=writing.name, start=writing.started, end=writing.finished,
                                      failed=writing.error is not None)

    def close(self) -> None:
        """Let another run write into this directory (rank 0 releases the writer lock), after the
        checkpoint being written in the background, if any, is complete. Not collective.

        Raises:
            CheckpointError: the last background save failed on some rank (named, with the checkpoint), the
                same on every rank; nothing of it was committed. Other failures of the write are said on
                stderr, not raised (the next resume falls back to the previous checkpoint).
        """
        try:
            self._complete_or_say("closing the checkpointer", raise_agreed=True)
        finally:
            ledger.close_ledger_of(self.directory)
            self._lock.release()
            self._holding = False

    def hold_directory(self, reading: bool = False) -> None:
        """Rank 0 takes the directory's writer lock once; every rank raises if another run holds it.
        Collective until it is held (every rank tracks ``_holding`` alike). ``reading`` (resume): a
        directory that does not exist yet, or that this process cannot write, is read without it."""
        if self._holding:
            return
        self._holding = main_then_share(f"cannot write to {self.directory}", lambda: self._acquire(reading))

    def _acquire(self, reading: bool) -> bool:
        if reading and not (self.directory.is_dir() and os.access(self.directory, os.W_OK)):
            return False
        self._lock.acquire()
        ledger.open_ledger(self.directory)  # this attempt's clock, beside the checkpoints it accounts for
        if self._lock.took_over_text():
            print(f"paratrain: {self._lock.took_over_text()}", file=sys.stderr, flush=True)
        return True

    # ---- reading ---------------------------------------------------------------------------
    def resume(self) -> CheckpointState | None:
        """Load the newest complete, verified checkpoint; ``None`` when there is none.

        Newer damaged ones (truncated, corrupted) are moved to ``DIRECTORY/damaged/`` with a
        :class:`~paratrain.checkpoint.CheckpointWarning` naming the file and where it went
        (never deleted); unfinished saves are skipped. Collective.

        Raises:
            CheckpointError: the checkpoint does not fit the objects (another model,
                missing object) or holds pickled objects; or checkpoints exist and none
                is intact (named, nothing deleted: restore them, or start over on purpose).
        """
        self.hold_directory(reading=True)
        self.finish_writing("resuming")
        if comm.is_main():
            ledger.open_ledger(self.directory)  # also when the directory does not exist yet
        found = main_then_share(f"cannot search {self.directory} for checkpoints", self._newest_verified)
        state = None
        if found is not None:
            path, manifest = found
            state = restoring.restore(self, Path(path), Manifest.from_dict(manifest))
            self._saved_step = state.step
            if ledger.active() is not None:
                ledger.active().set_step(state.step)
        if self.interval is not None:
            self.interval.start(self.directory)  # collective: rank 0's estimate, printed once
        return state

    def load(self, path: str | Path) -> CheckpointState:
        """Load one checkpoint: a checkpoint directory, a checkpoints directory (its newest
        good one), a run directory, or a lone weights file (``.safetensors``/``.pt``/``.bin``,
        keys with or without ``module.``/``_orig_mod.``) into the one model. Collective.

        Raises:
            CheckpointError: the path does not exist or is not a checkpoint, a file
                is damaged (no fallback for an explicit path), it does not fit, or it
                holds pickled objects.
        """
        target, manifest = main_then_share(f"cannot load {path}", lambda: self._locate(Path(path)))
        if manifest is None:
            return restoring.restore_weights_file(self, Path(target))
        return restoring.restore(self, Path(target), Manifest.from_dict(manifest))

    def latest(self) -> Path | None:
        """The checkpoint ``latest`` points to (complete, not re-verified), or None. Not collective."""
        return catalog.read_latest(self.directory)

    def best_path(self) -> Path | None:
        """The complete checkpoint with the best ``best_metric``, or None. Not collective."""
        return catalog.best(catalog.complete(self.directory), self.best_metric, self.mode)

    def checkpoints(self) -> list[Path]:
        """Complete checkpoints, oldest first. Not collective."""
        return [path for path, _ in catalog.complete(self.directory)]

    # ---- helpers for saving/restoring ----------------------------------------------------------
    def model_of(self, optimizer: Stateful) -> torch.nn.Module:
        """The model whose parameters ``optimizer`` trains."""
        return self.by_name[optimizer.model].obj

    def run_config(self) -> dict[str, Any]:
        """The run's configuration, stored in every manifest."""
        from paratrain._version import __version__

        runtime = self.runtime
        config: dict[str, Any] = {
            "world_size": comm.world_size(),
            "paratrain": __version__,
            "torch": torch.__version__,
            "python": sys.version.split()[0],
        }
        if runtime is not None:
            config.update(
                strategy=runtime.strategy.name,
                precision=runtime.precision.name,
                seed=runtime.seed,
                backend=runtime.backend,
                device=runtime.device.type,
                options={k: v for k, v in runtime.strategy.given_options.items() if isinstance(v, (bool, int, float, str))},
            )
        return config

    def _newest_verified(self) -> tuple[str, dict[str, Any]] | None:
        found = catalog.resume_point(self.directory) if self._holding else catalog.newest_verified(self.directory)
        return None if found is None else (str(found[0]), _as_dict(found[1]))

    def _locate(self, path: Path) -> tuple[str, dict[str, Any] | None]:
        resolved = catalog.resolve(path)
        if resolved.is_file():
            return str(resolved), None
        return str(resolved), _as_dict(verify(resolved))

    def __repr__(self) -> str:
        names = ", ".join(f"{e.name}:{e.kind}" for e in self.entries)
        return f"Checkpointer({str(self.directory)!r}, keep_last={self.keep_last}, sharded={self.sharded}, objects=[{names}])"


def _as_dict(manifest: Manifest) -> dict[str, Any]:
    return dataclasses.asdict(manifest)  # plain data: broadcast from rank 0 to every rank
