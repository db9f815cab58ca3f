"""The command of a script's own project that starts it under a multi-process launcher, for ``paratrain check``.

    launch = multi_process_launch(Path("fine-tune/fine-tune.py"))
    launch.where   # "README.md:483", the line the command starts on

Invariant: a script that its own project starts with ``torchrun``, ``python -m torch.distributed.launch`` (or
``.run``) or the ``deepspeed`` launcher, asking for more than one process, runs in several processes, whatever
its code shows: an HF Trainer or DeepSpeed fine-tuning script has no rank marker of its own, and its prints
still run once per rank.

Read from the project's shell scripts (``*.sh``, ``*.bash``, ``Makefile``), READMEs and docs (``*.md``,
``*.rst``) and YAML job files, line by line, a backslash continuation joined to its line. A command counts when
the launcher is its command word (``--deepspeed ds_config.json`` is a flag of the script, not the launcher),
the first word after the launcher's options is this script, and its process count is not literally one.
The script is named by a word ending in its path from the project's root, by a path from the command's file
or the root that leads to it, or by its bare file name when the command's file sits in the script's directory
or no other ``.py`` file of the project has that name. One process: ``torchrun``/``launch`` with neither
``--nproc_per_node`` nor ``--nnodes``, or both literally 1; ``deepspeed --num_gpus 1`` (on one node) or
``--include localhost:0``, or ``CUDA_VISIBLE_DEVICES=0 deepspeed``. A variable (``--nproc_per_node=$GPUS``),
``auto``, a number above 1, or ``deepspeed`` with no count at all (every GPU of the machine) is several.
A command commented out (``# torchrun …``) does not count; anything not understood is no launch.

The project is the directory that marks its root (``.git``, ``pyproject.toml``, ``setup.py``, ``setup.cfg``)
at or above the script's; without one, only the script's own directory and those below it are read. Bounded so
that a check stays well under a second: hidden directories, ``node_modules``, ``site-packages`` and
virtual environments are skipped, at most ``MAX_FILES`` command files of at most ``MAX_BYTES`` each are read
(the script's own directory first, then the shallowest), and the reading stops at the first launch found.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from paratrain.diagnostics.project_imports import ROOT_MARKERS, project_root, read_small_file

__all__ = ["COMMAND_QUOTES", "Command", "Launch", "deprecated_launch", "launch_above", "listings_kept",
           "multi_process_launch", "project_commands"]

MAX_FILES = 400
MAX_BYTES = 256_000
_MAX_ENTRIES = 20_000  # directory entries listed while looking for command files
_SKIPPED_DIRECTORIES = {"node_modules", "site-packages", "__pycache__", "venv", "env", "virtualenv", "virtualenvs"}
_WORDS = (b"torchrun", b"torch.distributed.", b"deepspeed", b"accelerate")  # a file without one holds no launch
_TORCH_MODULES = ("torch.distributed.launch", "torch.distributed.run")
# Options of the launchers that take no value (the word after them is not theirs).
_FLAGS = {"--standalone", "--no-python", "--no_python", "--use-env", "--use_env", "--run-path", "--run_path",
          "--no_local_rank", "--no-local-rank", "--force_multi", "--force-multi", "--bind_cores_to_rank",
          "--enable_each_rank_log", "--save_pid", "--module", "-m",
          # accelerate launch's
          "--multi_gpu", "--multi-gpu", "--cpu", "--use_deepspeed", "--use-deepspeed", "--use_fsdp", "--use-fsdp",
          "--use_megatron_lm", "--tpu", "--debug", "--quiet", "-q"}
COMMAND_QUOTES = "\"'`,[]()"  # stripped from a command's words
# Whether a command counts, from its launcher, the launcher's options and the words before it (``VAR=… torchrun``).
_Counts = Callable[[str, dict[str, str], list[str]], bool]


@dataclass(frozen=True)
class Launch:
    """A launcher command of the project that starts the script in several processes."""

    file: str  # the command's file, from the project's root
    line: int  # the line its command starts on
    launcher: str  # "torchrun", "torch.distributed.launch", "torch.distributed.run" or "deepspeed"

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def multi_process_launch(script: Path) -> Launch | None:
    """The first command of the script's project that starts it in several processes (see the module's
    docstring); None when none is found within the bounds. Never raises: what cannot be read is skipped."""
    return _first_launch_or_none(script, _several)


def deprecated_launch(script: Path) -> Launch | None:
    """The first command of the script's project that starts it with ``python -m torch.distributed.launch``, with
    any process count (PixArt's README starts it so with ``--nproc_per_node=1``); None as for
    :func:`multi_process_launch`."""
    return _first_launch_or_none(script, lambda launcher, options, before: launcher == "torch.distributed.launch")


def launch_above(script: Path, processes: int) -> Launch | None:
    """The first command of the script's project that starts it in more than ``processes`` processes, counted from
    its literal options (``--nproc_per_node=8 --nnodes=4``: 32; deepspeed's ``--num_gpus`` × ``--num_nodes``,
    accelerate's ``--num_processes``); a count written with a variable, or left to the machine, is not known and
    does not count. None as for :func:`multi_process_launch`."""
    return _first_launch_or_none(script, lambda launcher, options, before: (_count(launcher, options) or 0) > processes)


@dataclass(frozen=True)
class Command:
    """One command of a project's command files (a backslash continuation joined)."""

    text: str
    file: str  # its file, from the project's root
    line: int  # the line it starts on
    directory: Path  # its file's directory
    names: _Names  # how a word of it may name the script

    def names_script(self, word: str) -> bool:
        return self.names.named(word, self.directory)


def project_commands(script: Path) -> Iterator[Command]:
    """The commands of the script's project that mention the script's name (its file name without ``.py``: a
    ``-m`` module path names it so too), read within the bounds of the module's docstring. Never raises: what
    cannot be read is skipped."""
    try:
        script = script.resolve()
        if _KEPT is not None and ("commands", script) in _KEPT:
            yield from _KEPT["commands", script]
            return
        root = _command_root(script)
        files, same_name = _command_files(root, script)
    except (OSError, ValueError, RuntimeError):
        return
    names = _Names(script, root, unique=same_name == 1)
    commands = []
    for path in files:
        data = read_small_file(path, MAX_BYTES)
        if data is None or script.stem.encode() not in data:
            continue
        file = path.relative_to(root).as_posix()
        for number, text in _commands(data.decode("utf-8", "replace")):
            if script.stem in text:  # a command that names the script has its name
                commands.append(Command(text, file, number, path.parent, names))
    if _KEPT is not None:
        _KEPT["commands", script] = commands
    yield from commands


def _first_launch_or_none(script: Path, counts: _Counts) -> Launch | None:
    try:
        return _first_launch(script.resolve(), counts)
    except (OSError, ValueError, RuntimeError):
        return None


def _first_launch(script: Path, counts: _Counts) -> Launch | None:
    root = project_root(script)
    if root not in script.parents or not any((root / marker).exists() for marker in ROOT_MARKERS):
        root = script.parent
    files, same_name = _command_files(root, script)
    names = _Names(script, root, unique=same_name == 1)  # 0: the listing stopped before it
    for path in files:
        data = read_small_file(path, MAX_BYTES)
        if data is None:
            continue
        # the script's stem: `train.py`, or `--module ochat.training_deepspeed.train`
        if not any(word in data for word in _WORDS) or script.stem.encode() not in data:
            continue
        text = data.decode("utf-8", "replace")
        expand = _expander(text)
        from_root = path.parent.parent == root and _CHANGES_DIRECTORY.search(text) is None
        for number, command in _commands(text):
            launcher = _launched(expand(command), path.parent, names, counts, from_root)
            if launcher is not None:
                return Launch(path.relative_to(root).as_posix(), number, launcher)
    return None


def _command_root(script: Path) -> Path:
    """The folder whose files are the script's project: its marked root at or above it, else its own folder."""
    root = project_root(script)
    if root not in script.parents or not any((root / marker).exists() for marker in ROOT_MARKERS):
        return script.parent
    return root


# A shell variable set to a plain word on a line of its own (`method='unimatch'`, `export NGPUS=8`)
_ASSIGNMENT = re.compile(r"^[ \t]*(?:export[ \t]+)?([A-Za-z_]\w*)=(['\"]?)([\w./:-]*)\2[ \t]*(?:#.*)?$", re.MULTILINE)


def _expander(text: str) -> Callable[[str], str]:
    """What a command of ``text`` reads with the file's plain variables put in (``$method.py`` after
    ``method='unimatch'`` is ``unimatch.py``): each variable's first value; the others stay as written."""
    values: dict[str, str] = {}
    for match in _ASSIGNMENT.finditer(text):
        values.setdefault(match.group(1), match.group(3))
    if not values:
        return lambda command: command
    pattern = re.compile(r"\$\{?(" + "|".join(map(re.escape, values)) + r")\}?(?!\w)")
    return lambda command: pattern.sub(lambda match: values[match.group(1)], command)


def project_files(script: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The files of the script's project (its marked root, else its directory) whose names end in ``suffixes``,
    the script's directory's first, then by depth (at most ``MAX_FILES``); none when the project cannot be read."""
    try:
        script = script.resolve()
        return _command_files(_command_root(script), script, suffixes, ())[0]
    except (OSError, ValueError, RuntimeError):
        return []


# What one check reads of a project more than once, kept while it runs (`listings_kept`): (root, script, suffixes,
# names) → what `_command_files` found, ("commands", script) → the script's `project_commands`. A check reads the
# same project for its launch commands, its plain runs and its launchers. None: nothing is kept.
_KEPT: dict[tuple, object] | None = None


@contextmanager
def listings_kept() -> Iterator[None]:
    """Within the block, a project's files are listed, and its commands read, once (its files are taken not to
    change meanwhile)."""
    global _KEPT
    _KEPT = {}
    try:
        yield
    finally:
        _KEPT = None


def _command_files(root: Path, script: Path, suffixes: tuple[str, ...] = (".sh", ".bash", ".md", ".rst", ".yaml", ".yml"),
                   names_too: tuple[str, ...] = ("Makefile",)) -> tuple[list[Path], int]:
    if _KEPT is None:
        return _listed_command_files(root, script, suffixes, names_too)
    key = (root, script, suffixes, names_too)
    if key not in _KEPT:
        _KEPT[key] = _listed_command_files(root, script, suffixes, names_too)
    files, same_name = _KEPT[key]
    return list(files), same_name


def _listed_command_files(root: Path, script: Path, suffixes: tuple[str, ...],
                          names_too: tuple[str, ...]) -> tuple[list[Path], int]:
    """The project's command files (or those ending in ``suffixes``, or named one of ``names_too``), the script's
    directory's first, then by depth (at most ``MAX_FILES``), and how many ``.py`` files of the project bear the
    script's name."""
    found: list[tuple[int, str, Path]] = []
    same_name = 0
    listed = 0
    for directory, subdirectories, names in os.walk(root):
        listed += len(subdirectories) + len(names)
        if listed > _MAX_ENTRIES:
            same_name = 0  # not every file was seen: the script's name is not known to be its own
            break
        subdirectories[:] = sorted(d for d in subdirectories if not _skipped(Path(directory, d)))
        here = Path(directory)
        rank = 0 if here == script.parent else len(here.relative_to(root).parts) + 1
        for name in names:
            if name == script.name:
                same_name += 1
            if name.endswith(suffixes) or name in names_too:
                found.append((rank, name, here / name))
    found.sort(key=lambda item: (item[0], item[1]))
    return [path for _, _, path in found[:MAX_FILES]], same_name


def _skipped(directory: Path) -> bool:
    name = directory.name
    if name.startswith(".") or name in _SKIPPED_DIRECTORIES:
        return True
    try:
        return (directory / "pyvenv.cfg").exists()
    except OSError:
        return True


def _commands(text: str):
    """(first line's number, the command) for every line of ``text``, a backslash continuation joined."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        start, parts = index + 1, [lines[index]]
        while parts[-1].rstrip().endswith("\\") and index + 1 < len(lines):
            parts[-1] = parts[-1].rstrip()[:-1]
            index += 1
            parts.append(lines[index])
        index += 1
        command = " ".join(parts).strip()
        if command and not command.startswith("#"):
            yield start, command


@dataclass(frozen=True)
class _Names:
    """How a command may name the script."""

    script: Path
    root: Path
    unique: bool  # no other .py file of the project has its name

    def named(self, word: str, directory: Path) -> bool:
        """``word``, written in a command file of ``directory``, is the script: a path that leads to it from
        there or from the root (one that leads to another file of the project is not), a path ending in its
        path from the root (``$ROOT/train/sft.py``), or its bare name where that is not ambiguous."""
        word = word.removeprefix("./")
        if "/" in word:
            existing = self.files(word, directory)
            if existing:
                return self.script in existing
            return word.endswith("/" + self.script.relative_to(self.root).as_posix())
        return word == self.script.name and (directory == self.script.parent or self.unique
                                             or self._nearest_below_the_script(directory))

    def at_root(self, word: str, directory: Path) -> bool:
        """``word`` is the bare name of the script, which sits at the root, and ``directory`` holds no file of
        that name."""
        word = word.removeprefix("./")
        return (word == self.script.name and self.script.parent == self.root
                and not (directory / word).exists())

    def files(self, word: str, directory: Path) -> list[Path]:
        """The project's files that ``word``, written in a command file of ``directory``, leads to: from there, then
        from the root."""
        return [path.resolve() for path in (directory / word, self.root / word) if path.is_file()]

    def _nearest_below_the_script(self, directory: Path) -> bool:
        """A command file in a folder under the script's own (LLaMA-Adapter's ``gorilla/finetune/scripts/finetune/
        x.sh`` running ``main_finetune.py`` from ``gorilla/finetune``) names the script by its bare name when no
        file of that name sits nearer to it, in its folder or one between. Not for a script at the project's root,
        under which every folder lies: there the bare name may be any of the project's files of that name."""
        if self.script.parent == self.root or self.script.parent not in directory.parents:
            return False
        folder = directory
        while folder != self.script.parent:
            if (folder / self.script.name).exists():
                return False
            folder = folder.parent
        return True


# A line of a command file that changes the directory its later commands run in
_CHANGES_DIRECTORY = re.compile(r"^[ \t]*(?:cd|pushd)\b", re.MULTILINE)


def _launched(command: str, directory: Path, names: _Names, counts: _Counts, from_root: bool = False) -> str | None:
    """The launcher of ``command`` when it starts the script as ``counts`` asks (in several processes); else None.
    ``from_root``: the command's file lies in a folder just below the project's root and never changes directory
    (ULIP's ``scripts/pretrain_pointbert.sh``, run as ``bash scripts/pretrain_pointbert.sh`` from the root): a
    bare file name in it is the root's file of that name."""
    words = [word.strip(COMMAND_QUOTES) for word in command.split()]
    for at, word in enumerate(words):
        launcher = _launcher_at(words, at)
        if launcher is None:
            continue
        options, target = _options(words[at + (2 if launcher in (*_TORCH_MODULES, "accelerate launch") else 1):])
        if target is None or not (names.named(target, directory) or from_root and names.at_root(target, directory)):
            continue
        if counts(launcher, options, words[:at]):
            return launcher
    return None


def _launcher_at(words: list[str], at: int) -> str | None:
    """``torchrun`` / ``deepspeed`` as a command word (not the value of an option), or ``-m torch.distributed.…``."""
    word = words[at]
    if word.rpartition("/")[2] in ("torchrun", "deepspeed"):
        return None if at and words[at - 1].startswith("-") else word.rpartition("/")[2]
    if word.rpartition("/")[2] == "accelerate" and at + 1 < len(words) and words[at + 1] == "launch":
        return None if at and words[at - 1].startswith("-") else "accelerate launch"
    if word == "-m" and at + 1 < len(words) and words[at + 1] in _TORCH_MODULES:
        return words[at + 1]
    return None


def _options(words: list[str]) -> tuple[dict[str, str], str | None]:
    """The launcher's options (``--nproc_per_node=8`` and ``--nproc_per_node 8`` alike) and the script it
    starts: the first word that is no option nor an option's value, when it is a ``.py`` file (or ``-m pkg.mod``)."""
    options: dict[str, str] = {}
    index = 0
    while index < len(words):
        word = words[index]
        if word in ("-m", "--module") and index + 1 < len(words):
            return options, words[index + 1].replace(".", "/") + ".py"
        if word.startswith("$") and not word.endswith(".py"):
            options["$"] = word  # `$DISTRIBUTED_ARGS`: options this reading cannot see
            index += 1
            continue
        if not word.startswith("-"):
            return options, word if word.endswith(".py") else None
        name, equals, value = word.partition("=")
        if not equals and name not in _FLAGS and index + 1 < len(words):
            index += 1
            value = words[index]
        options[name.replace("-", "_").lstrip("_")] = value
        index += 1
    return options, None


def _count(launcher: str, options: dict[str, str]) -> int | None:
    """The processes the command starts in all, when its options say so in numbers (elastic ``--nnodes=1:4``: the
    most); None otherwise."""
    if launcher == "deepspeed":
        names = ("num_gpus", "num_nodes")
    elif launcher == "accelerate launch":
        names = ("num_processes",)
    else:
        names = ("nproc_per_node", "nnodes")
    if "$" in options or not any(name in options for name in names):
        return None
    count = 1
    for name in names:
        value = options.get(name, "1").rpartition(":")[2]
        if not value.isdigit():
            return None
        count *= int(value)
    return count


def _several(launcher: str, options: dict[str, str], before: list[str]) -> bool:
    """The launcher, given these options, starts more than one process (a count it cannot read is several)."""
    if launcher == "deepspeed":
        include = options.get("include")
        if include is not None:
            return not re.fullmatch(r"[\w.-]+:\d+", include)
        gpus = options.get("num_gpus")
        if gpus is None and any(re.fullmatch(r"CUDA_VISIBLE_DEVICES=\d+", word) for word in before):
            gpus = "1"
        return gpus != "1" or options.get("num_nodes", "1") != "1" or "hostfile" in options and "num_nodes" not in options
    if launcher == "accelerate launch":  # without a count, its config's (every GPU, by default)
        return not (options.get("num_processes") == "1" and options.get("num_machines", "1") == "1" or "cpu" in options)
    if "$" in options and not {"nproc_per_node", "nnodes"} & options.keys():
        return True  # the count may be among the options it cannot see: a count it cannot read
    count = 1
    for name in ("nproc_per_node", "nnodes"):
        value = options.get(name, "1")
        if not value.isdigit():
            return True
        count *= int(value)
    return count > 1
