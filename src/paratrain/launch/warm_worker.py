"""In a child the warm pool forked: become the worker torch's agent started, then run its script.

The child takes what the waiting process sent (:mod:`paratrain.launch.worker_site.warm_client`) and
makes the interpreter state a cold start of that process would have had:

* its stdin, stdout and stderr (the descriptors themselves, ``dup2``'d onto 0, 1, 2: the agent's log
  files, the console) and Python stream objects with the same encoding and buffering (``-u``);
* its environment (the real one, ``os.environ`` and the C library's), working directory, ``sys.argv``,
  ``sys.orig_argv``, ``sys.path`` with the first entry Python puts there (the script's folder, or the
  working directory for ``-m``), its CPU affinity, and the signal dispositions a new interpreter has
  (plus those the waiting process inherited ignored);
* the rest of the worker site's start-up (:mod:`paratrain.launch.worker_site`): the stacks written at a
  stop to this rank's file, paratrain's warning lines and the plain-script fixes (installed in the pool
  before torch was imported, as a cold worker installs them before its script imports torch);
* generators seeded at import from the operating system's entropy are seeded again (numpy's global
  one), as each cold process seeds its own; torch's thread count follows ``OMP_NUM_THREADS`` if the
  worker's differs from the pool's;
* the goodput ledger counts this worker's start-up from the waiting process's start, not the fork;
* what a worker's parent proves (the launcher holds the run directory's lock for it) the pool's parent proves
  (:func:`paratrain.env.torchelastic.parent_launcher`).

Then the script runs as ``__main__`` (``python script.py``: its code in a fresh ``__main__`` module,
``__file__`` absolute; ``-m``: :func:`runpy._run_module_as_main`, what ``python -m`` runs). An uncaught
exception is printed by ``sys.excepthook`` without the pool's own frames and exits 1, as Python does;
``SystemExit`` and ``KeyboardInterrupt`` reach the interpreter as in a cold worker.
"""

from __future__ import annotations

import builtins
import io
import os
import signal
import sys
import types
from typing import Any

_OWN_FILES = {os.path.abspath(__file__)}


def become(request: Any) -> int:
    """Make this process the worker ``request`` describes and run its script; returns the exit code
    for an uncaught exception (1), or 0. Never called outside a freshly forked child."""
    message = request.message
    _take_streams(request.streams, message.get("streams") or {})
    _take_environment(message["env"], request.pool_environ)
    os.chdir(message["cwd"])
    _take_signals(message.get("ignored_signals") or [])
    cpus = set(message.get("cpus") or [])
    if cpus and cpus != os.sched_getaffinity(0):
        os.sched_setaffinity(0, cpus)
    _reseed()
    from paratrain.env import torchelastic
    from paratrain.goodput import ledger

    torchelastic.warm_pool_pid = request.pool_pid  # its parent, the launcher's child (a run lock's holder is above it)
    ledger.worker_started = ledger.process_start_time(request.waiting_pid)
    _own_frames_from(sys.modules.get("__main__"))
    from paratrain.launch import worker_site

    worker_site.register_stacks_at_stop(os.environ)
    kind, name = _target(message["orig_argv"])
    sys.argv = list(message["argv"])
    sys.orig_argv = list(message["orig_argv"])
    sys.path[:] = list(message["path"])
    import importlib

    importlib.invalidate_caches()  # files written since the pool started are found, as by a new interpreter
    if not sys.flags.safe_path:
        sys.path.insert(0, os.getcwd() if kind == "module" else os.path.dirname(os.path.realpath(name)))
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    try:
        if kind == "module":
            import runpy

            runpy._run_module_as_main(name, alter_argv=True)  # what python -m runs
        else:
            _run_script(main, name)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 (as the interpreter: print it, exit 1)
        trimmed = _without_own_frames(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(trimmed), trimmed)  # the hook prints exc.__traceback__
        return 1
    return 0


def _target(orig_argv: list[str]) -> tuple[str, str]:
    from paratrain.launch.worker_site.warm_client import target

    found = target(orig_argv)
    assert found is not None  # the pool refused the others
    return found


def _run_script(main: types.ModuleType, name: str) -> None:
    """``python script.py``: the script's code run in ``__main__``; a folder or zip file with a
    ``__main__.py`` through runpy, as Python runs those."""
    import zipfile

    path = os.path.abspath(name)
    if not os.path.isfile(path) or path.endswith(".pyc") or zipfile.is_zipfile(path):
        import runpy

        runpy.run_path(name, run_name="__main__")
        return
    from importlib.machinery import SourceFileLoader

    with open(path, "rb") as source:
        code = compile(source.read(), path, "exec", dont_inherit=True)
    main.__dict__.update(__file__=path, __cached__=None, __loader__=SourceFileLoader("__main__", path),
                         __spec__=None, __package__=None)
    exec(code, main.__dict__)


def _take_streams(fds: list[int], settings: dict[str, Any]) -> None:
    for fd in (1, 2):  # anything the pool left in its buffers is the pool's, not the worker's
        try:
            (sys.stdout if fd == 1 else sys.stderr).flush()
        except (OSError, ValueError, AttributeError):
            pass
    for target_fd, fd in enumerate(fds):
        if fd != target_fd:
            os.dup2(fd, target_fd)
            os.close(fd)
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        setting = settings.get(name)
        stream = _text_stream(fd, "r" if fd == 0 else "w", setting) if setting else None
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _text_stream(fd: int, mode: str, setting: dict[str, Any]) -> io.TextIOWrapper:
    buffered = setting.get("buffered", True)
    raw = io.FileIO(fd, mode, closefd=False)
    binary = (io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)) if buffered or mode == "r" else raw
    return io.TextIOWrapper(binary, encoding=setting.get("encoding"), errors=setting.get("errors"),
                            line_buffering=bool(setting.get("line_buffering")),
                            write_through=bool(setting.get("write_through")))


def _take_environment(env: dict[str, str], pool_environ: dict[str, str]) -> None:
    os.environ.clear()  # unsetenv too: torch's C++ reads the real environment
    os.environ.update(env)
    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0 and threads != pool_environ.get("OMP_NUM_THREADS"):
        import torch

        torch.set_num_threads(int(threads))


def _take_signals(ignored: list[int]) -> None:
    for number in signal.valid_signals():
        if number in (signal.SIGKILL, signal.SIGSTOP):
            continue
        if number == signal.SIGINT:
            handler = signal.default_int_handler
        elif number in (signal.SIGPIPE, signal.SIGXFSZ) or number in ignored:
            handler = signal.SIG_IGN  # Python ignores these two at start; the agent's ignored ones stay so
        else:
            handler = signal.SIG_DFL
        try:
            signal.signal(number, handler)
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _reseed() -> None:
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # from the OS's entropy, as at numpy's import in a cold worker


def _own_frames_from(module: types.ModuleType | None) -> None:
    """The pool's ``__main__`` (this package's warm_pool, run with -m) is one of the frames to hide."""
    path = getattr(module, "__file__", None)
    if path:
        _OWN_FILES.add(os.path.abspath(path))


def _without_own_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) in _OWN_FILES:
        tb = tb.tb_next
    return tb
