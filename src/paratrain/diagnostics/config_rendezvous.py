"""A rendezvous fixed in a configuration file the project ships.

HiFi-GAN and the vocoders and TTS models built on it start ``mp.spawn`` workers that call
``init_process_group(init_method=h.dist_config['dist_url'], ...)``, and the shipped ``config_v1.json`` says
``"dist_url": "tcp://localhost:54321"``; WaveGrad writes ``os.environ['MASTER_PORT'] = dist_config.MASTER_PORT`` with
``"MASTER_PORT": "600010"`` in its JSON. The code reads a key; the port is still a literal every run of the project
uses. :func:`fixed_in_config` looks for the key the code reads, with a literal value, in the project's JSON and
YAML files. A key no shipped file gives a literal, or one that a Python file of the project sets (PointNeXt's launcher
writes ``cfg.dist_url = f"tcp://localhost:{port}"`` after a free-port search), is not reported.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from paratrain.diagnostics.check_finding import Finding

from paratrain.diagnostics.project_imports import read_small_file
from paratrain.diagnostics.project_launches import MAX_BYTES, project_files
from paratrain.diagnostics.script_facts import ScriptFacts, keyword, last_name
from paratrain.diagnostics.tree_walk import walk

_CONFIG_SUFFIXES = (".json", ".yaml", ".yml")
_URL = re.compile(r"tcp://[^:/{}%\s'\"]+:\d+")
_PORT = re.compile(r"\d{2,6}")


def config_key(value: ast.expr) -> str | None:
    """The key a configuration read ends in: ``h.dist_config['dist_url']`` → ``dist_url``,
    ``dist_config.MASTER_PORT`` → ``MASTER_PORT``, ``str(cfg["port"])`` → ``port``; None for anything else."""
    if isinstance(value, ast.Call) and len(value.args) == 1 and isinstance(value.func, ast.Name) and value.func.id in ("str", "int"):
        value = value.args[0]
    if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) and isinstance(value.slice.value, str):
        return value.slice.value
    if isinstance(value, ast.Attribute) and isinstance(value.value, (ast.Name, ast.Attribute, ast.Subscript)):
        return value.attr
    return None


def set_in_project(script: Path, key: str) -> bool:
    """A Python file of the script's project assigns ``key``: ``x.key = …`` or ``x["key"] = …`` (not
    ``os.environ["key"] = …``)."""
    written = re.compile(r"""(?:\.\s*""" + re.escape(key) + r"""|(?<!environ)\[\s*["']""" + re.escape(key)
                         + r"""["']\s*\])\s*=(?!=)""")  # os.environ["MASTER_PORT"] = … is the write being read
    for path in project_files(script, (".py",)):
        data = read_small_file(path, MAX_BYTES)
        if data is not None and key.encode() in data and written.search(data.decode("utf-8", "replace")):
            return True
    return False


def fixed_in_config(script: Path, key: str, port: bool) -> tuple[str, str] | None:
    """``(file, value)``: the first JSON or YAML file of the script's project that gives ``key`` a literal value —
    a whole ``tcp://host:port`` URL, or with ``port`` a port number — as ``"key": value`` or ``key: value``, when no
    Python file of the project sets ``key`` itself (:func:`set_in_project`)."""
    pattern = re.compile(r"""(?m)(?:^|[{,\s])["']?""" + re.escape(key) + r"""["']?\s*:\s*["']?([^"',}\s]+)""")
    wanted = _PORT if port else _URL
    for path in project_files(script, _CONFIG_SUFFIXES):
        data = read_small_file(path, MAX_BYTES)
        if data is None or key.encode() not in data:
            continue
        for match in pattern.finditer(data.decode("utf-8", "replace")):
            if wanted.fullmatch(match.group(1)):
                if set_in_project(script, key):
                    return None
                try:
                    shown = str(path.relative_to(script.resolve().parent))
                except ValueError:
                    shown = path.name
                return shown, match.group(1)
    return None


def fixed_in_configs(facts: ScriptFacts) -> Iterator[Finding]:
    """``init_method=`` or ``os.environ["MASTER_PORT"] =`` read from a configuration key that a JSON or YAML file of
    the project sets to a literal URL or port (:mod:`.config_rendezvous`); only for a script read from a file."""
    if facts.script is None:
        return
    reads: list[tuple[ast.AST, str, bool]] = []  # (where, the key, a port rather than a URL)
    for call in facts.calls:
        if last_name(call) == "init_process_group":
            method = keyword(call, "init_method")
            key = config_key(method) if method is not None else None
            if key is not None:
                reads.append((method, key, False))
    for node in walk(facts.tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (isinstance(target, ast.Subscript) and ast.unparse(target.value).endswith("environ")
                        and isinstance(target.slice, ast.Constant) and target.slice.value == "MASTER_PORT"):
                    key = config_key(node.value)
                    if key is not None:
                        reads.append((node, key, True))
    # a key the file sets itself (point-transformer's `args.dist_url = f"tcp://localhost:{port}"` after a free-port
    # search) is not the configuration's value
    rewritten = {key for node in walk(facts.tree) if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                 for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                 if not (isinstance(target, ast.Subscript) and ast.unparse(target.value).endswith("environ"))
                 and (key := config_key(target)) is not None}
    for node, key, port in reads:
        found = None if key in rewritten else fixed_in_config(facts.script, key, port)
        if found is not None:
            path, value = found
            taken = "os.environ['MASTER_PORT']" if port else "init_method"
            yield Finding(
                node.lineno, "hardcoded-rendezvous",
                f"{taken} is the configuration's {key!r}, which {path} sets to the literal {value!r}: every run of "
                "the project meets on that port (a second run on the machine, or a port left busy, stops the "
                "rendezvous) and another machine's address needs an edit",
                "init_process_group(backend) with the default env:// and start with paratrain run "
                "(--master-addr/--master-port on several machines), or pt.Runtime(); drop the address from the config",
            )
