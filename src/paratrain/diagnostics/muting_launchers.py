"""A project's own launcher that starts the script's ranks with their standard output sent to /dev/null.

    CUDA_VISIBLE_DEVICES="0,1" python TTS/bin/distribute.py --script train_tacotron.py     (the README's command)
    stdout = None if i == 0 else open(os.devnull, "w")                                     (distribute.py, per rank)
    subprocess.Popen(["python3"] + command, stdout=stdout)

Invariant: the prints of a script whose ranks its project starts through such a launcher show once, from the
first rank, whatever the script's own code says. The launcher is a ``.py`` file of the project that a command of
the project runs with ``python``, naming the script among its arguments (by path or bare name, as a launcher
command names it), and that starts processes (``subprocess.Popen``/``run``/``call``) with a ``stdout=`` and
``os.devnull`` in its text; or such a file beside the script that runs any script of its own folder given by a
``--script`` option (TTS's ``distribute.py``: "runs any provided train script", its README naming one). Anything
else (a launcher that keeps every rank's output, a script named nowhere) is no such launcher.
"""

from __future__ import annotations

import re
from pathlib import Path

from paratrain.diagnostics.project_imports import read_small_file
from paratrain.diagnostics.project_launches import Launch, project_commands

__all__ = ["muting_launcher"]

_PYTHON = re.compile(r"python[\d.]*")
_STARTS = re.compile(rb"subprocess\.(?:Popen|run|call)\(|\bPopen\(")
_MUTES = re.compile(rb"stdout\s*=")
_MAX_BYTES = 256_000
_FOLDER_SCRIPT = re.compile(rb"add_argument\(\s*['\"]--script['\"]")


def muting_launcher(script: Path) -> Launch | None:
    """The first command of the script's project that runs it through a launcher of the project that sends the
    other ranks' stdout to /dev/null (see the module's docstring); None when there is none. Never raises: what
    cannot be read (a word no file can be named by: too long, a NUL) is no launcher."""
    try:
        return _muting_launcher(script.resolve())
    except (OSError, ValueError, RuntimeError):
        return None


def _muting_launcher(script: Path) -> Launch | None:
    for command in project_commands(script):
        if script.name not in command.text or "python" not in command.text:
            continue  # the launcher is handed the script's file
        words = [word.strip("\"'`") for word in command.text.split()]
        for at, word in enumerate(words[:-1]):
            if not _PYTHON.fullmatch(word.rpartition("/")[2]):
                continue
            launcher = next((w for w in words[at + 1:] if not w.startswith("-")), "")
            rest = words[words.index(launcher, at + 1) + 1:] if launcher else []
            if launcher.endswith(".py") and any(command.names_script(w) for w in rest) and _mutes(
                    next(iter(command.names.files(launcher, command.directory)), None), script):
                return Launch(command.file, command.line, launcher)
    return _folder_launcher(script)


def _folder_launcher(script: Path) -> Launch | None:
    """A muting launcher beside the script that takes the script of its folder to run from ``--script``."""
    try:
        siblings = sorted(script.parent.glob("*.py"))[:200]
    except OSError:
        return None
    for path in siblings:
        data = read_small_file(path, _MAX_BYTES) if path != script else None
        if data is not None and _FOLDER_SCRIPT.search(data) and b"__file__" in data and _mutes(path, script):
            return Launch(path.name, 1, path.name)
    return None


def _mutes(launcher: Path | None, script: Path) -> bool:
    """``launcher`` (not the script itself) starts processes and sends a stdout to /dev/null."""
    data = read_small_file(launcher, _MAX_BYTES) if launcher is not None and launcher != script else None
    return data is not None and b"devnull" in data and bool(_STARTS.search(data)) and bool(_MUTES.search(data))
