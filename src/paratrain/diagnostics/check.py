"""``paratrain check``: read a training script (without running it) for the pitfalls of common DDP tutorials.

    findings = check_file("train.py")
    for finding in findings:
        print(format_finding("train.py", finding))

Each finding names the line, why it is wrong in a multi-process job and the fix
(rules in :mod:`paratrain.diagnostics.check_rules`). Given a path, ``check`` also reads the functions the
script imports from its own project (``from utils import save_checkpoint``) in their files. A line ending in
``# paratrain: ignore`` (all rules) or ``# paratrain: ignore[rule-a, rule-b]`` is skipped.

A script its own project runs only as one process (``python3 train.py`` in its README, no launcher) still gets
the findings of the rules about several processes: they are what happens once it runs on several, which is what
paratrain is for. Each such finding says so and names the command, so that it is not read as today's failure.
Prints are not reported when the project's own launcher starts the other ranks with stdout sent to /dev/null
(:mod:`paratrain.diagnostics.muting_launchers`). Both read the project's command files, so only for a script with
such findings.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from paratrain.diagnostics.check_rules import RULES, Finding
from paratrain.diagnostics.importer_lines import logs_run_by_importers, prints_run_by_importers
from paratrain.diagnostics.project_callers import forget as forget_callers
from paratrain.diagnostics.project_facts import read_project_facts
from paratrain.diagnostics.project_launches import listings_kept
from paratrain.diagnostics.script_facts import ScriptFacts
from paratrain.diagnostics.tree_walk import forget as forget_walks
from paratrain.errors import ConfigError

# The rules whose pitfall needs several processes (not DataParallel, a flag or a checkpoint's keys).
_ON_SEVERAL = {"print-on-every-rank", "log-on-every-rank", "save-on-every-rank", "no-set-epoch", "padded-eval-sampler",
               "ungathered-metric", "unseeded-split", "model-before-seed", "sampler-not-passed"}
# Rules that read the project's programs importing the file (they read the project as the file's own check does).
_IMPORTERS_RULES = (prints_run_by_importers, logs_run_by_importers)
_IGNORE = re.compile(r"#\s*paratrain:\s*ignore(?:\[([\w\s,-]+)\])?")


def check_source(source: str, filename: str = "<script>", script: Path | None = None) -> list[Finding]:
    """Every finding of every rule, in line order. With ``script`` (the file's path), the functions it
    imports from its own project are read in their files too (:mod:`paratrain.diagnostics.project_facts`);
    findings are still the script's lines only.

    Raises:
        ConfigError: the source is not valid Python (names the file and line).
    """
    forget_walks()  # the walks of the previous check's trees
    forget_callers()  # the project files the previous check read for its callers
    source = source.removeprefix("\ufeff")  # a byte-order mark, which Python itself skips
    try:
        facts = ScriptFacts.read(source)
    except SyntaxError as exc:
        raise ConfigError(f"{filename}:{exc.lineno}: not valid Python ({exc.msg}); fix the syntax first") from None
    with listings_kept():  # the project's command files, listed once for its launch questions
        if script is not None:
            facts.learn(read_project_facts(facts, script), script)
        findings = [finding for rule in (*RULES, *_IMPORTERS_RULES) for finding in rule(facts)]
        if any(f.rule == "print-on-every-rank" for f in findings) and facts.muted_launch is not None:
            findings = [f for f in findings if f.rule != "print-on-every-rank"]  # the other ranks' stdout is /dev/null
        if any(f.rule in _ON_SEVERAL for f in findings) and facts.started_alone is not None:
            findings = [_once_on_several(f, facts.started_alone.where) if f.rule in _ON_SEVERAL else f
                        for f in findings]
    return sorted((f for f in findings if not _ignored(facts.lines, f)), key=lambda f: (f.line, f.rule))


def check_file(path: str | Path) -> list[Finding]:
    """:func:`check_source` of a file, reading the modules of its project that it imports.

    Raises:
        ConfigError: the file is missing, unreadable or not Python.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"script {str(path)!r} not found; pass the training script's path")
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path} ({exc}); pass a UTF-8 Python file") from None
    return check_source(source, str(path), path)


def _once_on_several(finding: Finding, where: str) -> Finding:
    return replace(finding, problem=f"{finding.problem} (its project runs it as one process today, {where}: this "
                   "happens once it runs on several, as with paratrain run --nproc-per-node N)")


def format_finding(filename: str, finding: Finding) -> str:
    """``file:line: [rule] problem`` and an indented ``fix:`` line."""
    return f"{filename}:{finding.line}: [{finding.rule}] {finding.problem}\n    fix: {finding.fix}"


def _ignored(lines: list[str], finding: Finding) -> bool:
    line = lines[finding.line - 1] if 0 < finding.line <= len(lines) else ""
    match = _IGNORE.search(line)
    if not match:
        return False
    rules = match.group(1)
    return rules is None or finding.rule in {r.strip() for r in rules.split(",")}
