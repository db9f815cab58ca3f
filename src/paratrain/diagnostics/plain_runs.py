"""The plain ``python script.py`` command of a script's project, when that is how the project only runs it.

    only_plain_runs(Path("code/run_fewrel.py")).where   # "README.md:109" (ERNIE: ``python3 code/run_fewrel.py``)

Invariant: a script is read as run only plainly when every command of its project that names it (the commands of
:func:`~paratrain.diagnostics.project_launches.project_commands`) is ``python script.py`` with only environment
assignments, ``nohup``/``time`` or the interpreter's own options around it. A launcher, ``srun``, ``accelerate
launch``, ``mpirun`` or prose before the script's name makes it something else; so does no command at all.
"""

from __future__ import annotations

import re
from pathlib import Path

from paratrain.diagnostics.project_launches import COMMAND_QUOTES, Command, Launch, project_commands

__all__ = ["only_plain_runs"]


def only_plain_runs(script: Path) -> Launch | None:
    """The first command of the script's project that runs it as a plain program (``python3 code/run.py …``,
    ``CUDA_VISIBLE_DEVICES=0 python -u train.py``), when every command of the project that names the script is one
    (no launcher, ``srun``, ``accelerate launch``, ``mpirun`` or prose around it); None otherwise, or when none names
    it within the bounds. Never raises: what cannot be read is skipped."""
    first = None
    try:
        for command in project_commands(script):
            plain = _plain_run(command)
            if plain is False:
                return None
            if plain and first is None:
                first = Launch(command.file, command.line, "python")
    except (OSError, ValueError, RuntimeError):  # a word no file can be named by (too long, a NUL) among them
        return None
    return first


# Words that may come before a plain `python script.py` in a command: the shell's own, a notebook's `!`
_BEFORE_PYTHON = {"nohup", "time", "exec", "$", "!", "-", "*", ">", "sudo"}
# The interpreter's options that take a value (`-W ignore`, `-X dev`)
_PYTHON_VALUED = {"-W", "-X", "-c"}


def _plain_run(command: Command) -> bool | None:
    """True when ``command`` runs the script as ``python script.py``, False when it names the script any other
    way (under a launcher, after prose), None when it does not name it."""
    words = [word.strip(COMMAND_QUOTES) for word in command.text.split()]
    for at, word in enumerate(words):
        target = words[at + 1].replace(".", "/") + ".py" if word in ("-m", "--module") and at + 1 < len(words) else word
        if not target.endswith(".py") or not command.names_script(target):
            continue
        start = at - 1 if word in ("-m", "--module") else at
        before = start - 1
        while before >= 0 and words[before].startswith("-") and words[before] not in ("-m", "--module"):
            before -= 1  # the interpreter's flags
        if before > 0 and words[before - 1] in _PYTHON_VALUED:
            before -= 2
        if before < 0 or not re.fullmatch(r"python[\d.]*", words[before].rpartition("/")[2]):
            return False
        return all(w in _BEFORE_PYTHON or re.fullmatch(r"[A-Za-z_]\w*=\S*", w) for w in words[:before])
    return None
