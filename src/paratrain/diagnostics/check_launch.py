"""The rules of ``paratrain check`` about how processes start: a ``--local_rank`` flag that torchrun never
passes, and the deprecated ``torch.distributed.launch`` (how they find each other: ``check_rendezvous``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from paratrain.diagnostics.check_finding import Finding
from paratrain.diagnostics.project_imports import read_small_file
from paratrain.diagnostics.project_launches import Launch, deprecated_launch
from paratrain.diagnostics.script_facts import ScriptFacts, is_true, keyword, last_name
from paratrain.diagnostics.tree_walk import walk


def local_rank_argument(facts: ScriptFacts) -> Iterator[Finding]:
    for call, line, also in [(call, call.lineno, []) for call in facts.calls_named("add_argument")] + _project_flags(facts):
        flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        flag = next((f for f in flags if f in ("--local_rank", "--local-rank")), None)
        if flag is None:
            continue
        default = keyword(call, "default")
        required = is_true(keyword(call, "required"))
        dest = _dest(call, flags)
        # the script's own process starter setting each worker's value before it starts it (LSGM's
        # `args.local_rank = rank` beside `Process(...).start()`) hides the flag from every read, here or imported
        read = not _launcher_sets(facts, dest) and (
            _parsed_local_rank_read(facts, dest) or dest in facts.imported.attributes_read)
        if not required and (not read or _reads_local_rank_env(facts) or facts.imported.reads_local_rank_env):
            # Kept only so that torch.distributed.launch's `--local_rank=N` does not stop argparse
            # (DINO: "Please ignore and do not set this argument"): the flag is never read, or the
            # script takes LOCAL_RANK from the environment, which torchrun sets (or a function of its
            # project that it calls does: XLM's `init_distributed_mode(params)` reads the flag in slurm.py).
            continue
        why = (
            f"`{flag}` is required: torchrun and paratrain run pass LOCAL_RANK in the environment, not as an "
            "argument, so argparse stops every process before it starts"
            if required else
            f"`{flag}` has no default: torchrun and paratrain run pass LOCAL_RANK in the environment, "
            "not as an argument, so it is None in every process"
            if default is None else
            f"`{flag}` defaults to {ast.unparse(default)}: torchrun and paratrain run pass LOCAL_RANK in the "
            "environment, not as an argument, so every process gets the default and uses the same device"
        )
        if also:
            why += f" (also lines {', '.join(map(str, also))})"
        yield Finding(
            line, "local-rank-argument", why,
            "read int(os.environ['LOCAL_RANK']) (or pt.Runtime().local_rank); or keep the flag and start "
            "the script with `paratrain run --legacy-local-rank`",
        )


def _project_flags(facts: ScriptFacts) -> list[tuple[ast.Call, int, list[int]]]:
    """``--local_rank`` defined by a parser-building function (or options class) of the project that the script
    calls (``args = parser.get_args()``, ``parse_args()`` of utils/options.py, ``Options().parse()``), with the
    line to report: where the script parses the options it built (``opt = options.parse()``), else its first
    read of the option (where the device or the guard comes from it), else the call; and the other lines where
    the flag enters the script, which the finding names too: the call, and argparse's parse of the parser it
    returned (``args = get_parser().parse_args()``) — a fix goes at either end. Left out
    when a project function the script calls stores the option (LoRA's ``parse_gpu`` setting
    ``args.local_rank`` from the launcher's variables): which value the reads see is not known; unless that
    function tests the option in an ``if`` or ``assert`` before it stores it (it decides on the parsed value)."""
    found = []
    imported = facts.imported
    for callee, flag in imported.local_rank_flags.items():
        calls = [call for call in facts.calls if imported.callee(call) == callee]
        flags = [a.value for a in flag.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        dest = _dest(flag, flags)
        reads = facts.loaded_attrs.get(dest, [])
        # A function that tests the option before it stores it (XLM's slurm.py: `elif params.local_rank != -1:`,
        # else `params.local_rank = 0`) decides on the parsed value: the flag still matters.
        if calls and (dest not in imported.attributes_stored or dest in imported.attributes_read_then_stored):
            parsed = _parsed_at(facts, calls[0])
            line = parsed or min([read.lineno for read in reads] or [calls[0].lineno])
            entries = {calls[0].lineno, *_argparse_parses(facts, calls[0])}
            found.append((flag, line, sorted(entries - {line})))
    return found


# argparse's own parsing: a project function that returns the parser leaves the script's first read the line to report
_ARGPARSE_PARSES = ("parse_args", "parse_known_args")


def _parsed_at(facts: ScriptFacts, built: ast.Call) -> int | None:
    """Where the script parses the options object a project call built: its own ``parse()`` on the name it
    bound (``options = Options()``, then ``opt = options.parse()``); None when it parses nothing so."""
    parses = _parses(facts, built, lambda method: method.startswith("parse") and method not in _ARGPARSE_PARSES)
    return parses[0] if parses else None


def _argparse_parses(facts: ScriptFacts, built: ast.Call) -> list[int]:
    """The line where argparse parses the parser a project call returned: chained (``get_parser().parse_args()``)
    or on the name it is bound to (``parser = get_parser()``, then ``args = parser.parse_args()``)."""
    attribute = facts.parents.get(built)
    chained = facts.parents.get(attribute) if isinstance(attribute, ast.Attribute) else None
    if isinstance(chained, ast.Call) and chained.func is attribute and attribute.attr in _ARGPARSE_PARSES:
        return [chained.lineno]
    return _parses(facts, built, lambda method: method in _ARGPARSE_PARSES)[:1]


def _parses(facts: ScriptFacts, built: ast.Call, parses: Callable[[str], bool]) -> list[int]:
    """The lines, from ``built``'s on, of the calls of a method ``parses`` accepts on the name ``built`` is bound to."""
    name = facts.bound_name(built)
    return [call.lineno for call in facts.calls if name is not None and isinstance(call.func, ast.Attribute)
            and ast.unparse(call.func.value) == name and parses(call.func.attr) and call.lineno >= built.lineno]


def _dest(call: ast.Call, flags: list[str]) -> str:
    """Where argparse puts the option: ``dest=``, else its first long flag (``add_argument("--rank",
    "--local_rank")`` is read as ``args.rank``)."""
    dest = keyword(call, "dest")
    if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
        return dest.value
    return next((f for f in flags if f.startswith("--")), flags[0]).lstrip("-").replace("-", "_")


def _parsed_local_rank_read(facts: ScriptFacts, dest: str = "local_rank") -> bool:
    """Some read of ``x.<dest>`` may see the parsed value: not one that follows, in the same function,
    ``args.local_rank = local_rank`` (a worker started by ``mp.spawn`` storing its index over the flag's)."""
    stores = _stores(facts, dest)
    return any(
        not any(facts.scope(store) is facts.scope(read) and store.lineno < read.lineno for store in stores)
        and not _mirrored_into_environ(facts, read)
        for read in facts.loaded_attrs.get(dest, [])
    )


def _stores(facts: ScriptFacts, dest: str) -> list[ast.Attribute]:
    return [node for node in walk(facts.tree)
            if isinstance(node, ast.Attribute) and node.attr == dest and isinstance(node.ctx, ast.Store)]


def _launcher_sets(facts: ScriptFacts, dest: str) -> bool:
    """The parent that starts the ranks stores ``x.<dest>`` for each worker before it starts it."""
    return any(facts.in_launcher(store) for store in _stores(facts, dest))


def _mirrored_into_environ(facts: ScriptFacts, read: ast.AST) -> bool:
    """``read`` only hands the flag on to the environment (``os.environ['LOCAL_RANK'] = str(args.local_rank)``,
    ``os.environ.setdefault(…)``; mmdetection's tools under ``if 'LOCAL_RANK' not in os.environ:``): what reads
    the environment afterwards sees the launcher's value where there is one, so that read is not the flag's use."""
    node = facts.parents.get(read)
    while node is not None and not isinstance(node, ast.stmt):
        if isinstance(node, ast.Call) and last_name(node) == "setdefault" and "environ" in ast.unparse(node.func):
            return True
        node = facts.parents.get(node)
    return (isinstance(node, ast.Assign)
            and all(isinstance(t, ast.Subscript) and "environ" in ast.unparse(t.value) for t in node.targets))


def _reads_local_rank_env(facts: ScriptFacts) -> bool:
    """``os.environ["LOCAL_RANK"]``, ``os.getenv("LOCAL_RANK")``, ``os.environ.get("LOCAL_RANK", …)``. A write
    (``os.environ["LOCAL_RANK"] = str(args.local_rank)``, gmflow handing the flag on) reads nothing from the launcher."""
    return any(
        isinstance(node, ast.Constant) and node.value == "LOCAL_RANK"
        and (isinstance(facts.parents.get(node), ast.Subscript) and not isinstance(facts.parents[node].ctx, ast.Store)
             or isinstance(facts.parents.get(node), ast.Call))
        and re.search(r"environ|getenv", ast.unparse(facts.parents[node]))
        for node in walk(facts.tree)
    ) and facts.mentions(r"environ|getenv")


def deprecated_launcher(facts: ScriptFacts) -> Iterator[Finding]:
    docstrings = facts.docstring_lines()  # "Before: python -m torch.distributed.launch …" is history
    mentions = [
        (number, line) for number, line in enumerate(facts.lines, start=1)
        if number not in docstrings and "torch.distributed.launch" in line and "torch.distributed.launcher" not in line
        and not _torchrun_first(line)
    ]
    # A command that starts the script with it (a usage block) over prose, which may tell the old way apart;
    # none when every command starts another script (the prose beside them is about that one too).
    commands = [(number, line) for number, line in mentions if re.search(r"-m\s+torch\.distributed\.launch\b", line)]
    if commands:
        mentions = commands = [(number, line) for number, line in commands if not _starts_another_script(facts, line)
                               and not _environment_only(facts, number)]
    # Reported at the `--local_rank` flag the old launcher needs, where the script has one: the line to change
    # with the command, wherever the command is written (its own usage comment, named in "also lines", or its
    # project's README or shell script).
    flags = [call for call in facts.calls_named("add_argument")
             if any(isinstance(a, ast.Constant) and a.value in ("--local_rank", "--local-rank") for a in call.args)]
    flags.sort(key=lambda call: not any(isinstance(a, ast.Constant) and a.value == "--local_rank" for a in call.args))
    for number, _ in (commands or mentions)[:1]:
        if flags and flags[0].lineno != number:
            yield Finding(flags[0].lineno, "deprecated-launcher",
                          f"line {number} starts it with torch.distributed.launch: {_DEPRECATED} (also lines {number})",
                          _TO_TORCHRUN)
        else:
            yield Finding(number, "deprecated-launcher", _DEPRECATED, _TO_TORCHRUN)
        return
    # No line of its own names it: its project's README or shell script may start it so; a script without the
    # flag is left alone (its launch line elsewhere is all there is to change).
    launch = deprecated_launch(facts.script) if flags and facts.script is not None else None
    if launch is not None:
        yield Finding(flags[0].lineno, "deprecated-launcher",
                      f"its project starts it with torch.distributed.launch ({launch.where}): " + _DEPRECATED,
                      _TO_TORCHRUN)
        return
    launched = _launched_importer(facts.script) if flags and facts.script is not None else None
    if launched is not None:
        importer, launch = launched
        yield Finding(flags[0].lineno, "deprecated-launcher",
                      f"its project starts {importer}, which imports this module, with torch.distributed.launch "
                      f"({launch.where}): " + _DEPRECATED, _TO_TORCHRUN)


_MAX_IMPORTERS = 40  # files of the module's folder read for an import of it


def _launched_importer(module: Path) -> tuple[str, Launch] | None:
    """A script of the module's own folder that imports it by name (P5's ``pretrain.py``: ``from param import
    parse_args``, its ``--local_rank`` defined in ``param.py``) and that its project starts with
    torch.distributed.launch: (the script's file name, that launch)."""
    pattern = re.compile(rf"^\s*(?:from\s+{re.escape(module.stem)}\s+import\b|import\s+{re.escape(module.stem)}\b)",
                         re.MULTILINE)
    try:
        siblings = sorted(path for path in module.parent.glob("*.py") if path != module)[:_MAX_IMPORTERS]
    except OSError:
        return None
    for path in siblings:
        data = read_small_file(path)
        if data is None or not pattern.search(data.decode("utf-8", "replace")):
            continue
        launch = deprecated_launch(path)
        if launch is not None:
            return path.name, launch
    return None


def _environment_only(facts: ScriptFacts, number: int) -> bool:
    """The command starting at line ``number`` passes ``--use_env`` (its continuation lines, ``\\``-ended, read
    with it) and the script parses no ``--local_rank``: the launcher hands each process LOCAL_RANK in the
    environment as torchrun does (longformer's usage comment), so nothing in the script is the old launcher's."""
    if any(isinstance(a, ast.Constant) and a.value in ("--local_rank", "--local-rank")
           for call in facts.calls_named("add_argument") for a in call.args):
        return False
    command, at = "", number
    while at <= len(facts.lines):
        line = facts.lines[at - 1]
        command += " " + line
        if not line.rstrip().endswith("\\"):
            break
        at += 1
    return re.search(r"--use[_-]env\b", command) is not None


_DEPRECATED = "torch.distributed.launch is deprecated: it passes --local_rank and is superseded by torchrun"
_TO_TORCHRUN = "paratrain run --nproc-per-node N script.py (torchrun's agent; --legacy-local-rank for old scripts)"


def _torchrun_first(line: str) -> bool:
    """``torchrun ... OR python -m torch.distributed.launch ...``: the old launcher offered after torchrun."""
    return "torchrun" in line and line.index("torchrun") < line.index("torch.distributed.launch")


def _starts_another_script(facts: ScriptFacts, line: str) -> bool:
    """A comment of a module that does not run as a program tells how another script starts (DETR's ``misc.py``
    copied into a project: "python -m torch.distributed.launch ... main.py"): that script's launch line, not
    this file's. A command in code (a launcher building the command of the script it starts) stays."""
    if not line.lstrip().startswith("#") or facts.script is None or facts.runs_as_program():
        return False
    started = re.findall(r"(?<![\w/.-])([\w/.-]+\.py)\b", line.split("torch.distributed.launch", 1)[1])
    return bool(started) and all(Path(s).name != facts.script.name for s in started)
