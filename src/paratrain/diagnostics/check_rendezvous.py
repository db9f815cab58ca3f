"""The rule of ``paratrain check`` about how processes find each other: a rendezvous address or port fixed in
the code (a literal URL, ``MASTER_PORT`` set to a literal, an option's fixed default).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from paratrain.diagnostics.check_finding import Finding
from paratrain.diagnostics.config_rendezvous import fixed_in_configs
from paratrain.diagnostics.project_rendezvous import fixed_source, passed_parameters, rendezvous_writes
from paratrain.diagnostics.script_facts import ScriptFacts, keyword, last_name
from paratrain.diagnostics.tree_walk import walk


_LITERAL_URL = re.compile(r"tcp://[^:/{}%\s]+:\d+$")
# `tcp://{node0}:1234`, `tcp://%s:1234`: the address from the run, the port a number written in
_TEMPLATED_PORT = re.compile(r"tcp://(?:\{[^{}]*\}|%s):\d+\b")
_LOOPBACK = ("localhost", "127.0.0.1", "::1")


def _environ_literals(facts: ScriptFacts) -> Iterator[tuple[ast.AST, str, str]]:
    """``os.environ["MASTER_PORT"] = "12355"`` (and ``os.environ.update({...})``): the variable set to a literal."""
    for node in walk(facts.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.JoinedStr)):
            for target in node.targets:
                if (isinstance(target, ast.Subscript) and ast.unparse(target.value).endswith("environ")
                        and isinstance(target.slice, ast.Constant) and isinstance(node.value, ast.Constant)):
                    yield node, str(target.slice.value), str(node.value.value)
        elif isinstance(node, ast.Call) and last_name(node) == "update" and "environ" in ast.unparse(node.func):
            for arg in node.args:
                if isinstance(arg, ast.Dict):
                    for key, value in zip(arg.keys, arg.values):
                        if isinstance(key, ast.Constant) and isinstance(value, ast.Constant):
                            yield node, str(key.value), str(value.value)


def _default_only(facts: ScriptFacts, node: ast.AST, variable: str) -> bool:
    """The value is set under an ``if`` that asks whether the variable is set (``if "MASTER_PORT" not in
    os.environ:``, ``if not os.getenv("MASTER_ADDR"):``, the ``else:`` of ``elif "MASTER_PORT" in
    os.environ: pass``): a default for an unset variable, like ``os.environ.setdefault``."""
    parent = facts.parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.If) and any(
                isinstance(n, ast.Constant) and n.value == variable for n in walk(parent.test)):
            return True
        parent = facts.parents.get(parent)
    return False


def one_machine_only(facts: ScriptFacts) -> bool:
    """The script meets its processes on this machine's loopback address whatever it is given: it sets
    ``MASTER_ADDR`` to ``localhost``/``127.0.0.1`` (not only as a default), or builds its ``tcp://`` URL on one
    (Stratified-Transformer's ``f"tcp://127.0.0.1:{port}"``). Its ranks all run on one machine, so a test of
    the local rank picks one process of the job."""
    for node, variable, value in _environ_literals(facts):
        if variable == "MASTER_ADDR" and value in _LOOPBACK and not _default_only(facts, node, variable):
            return True
    # the URL the code sets (an assignment, init_process_group's init_method), not an option's default, which a
    # run on several machines overrides (bts' `--dist_url` defaults to tcp://127.0.0.1:1234)
    set_in_code = [node.value for node in walk(facts.tree) if isinstance(node, ast.Assign)]
    set_in_code += [kw.value for call in facts.calls_named("init_process_group") for kw in call.keywords
                    if kw.arg == "init_method"]
    for value in set_in_code:
        if isinstance(value, ast.JoinedStr) and value.values and isinstance(value.values[0], ast.Constant):
            text = str(value.values[0].value)
        elif isinstance(value, ast.Constant) and isinstance(value.value, str):
            text = value.value
        else:
            continue
        if any(text.startswith(f"tcp://{host}:") for host in _LOOPBACK):
            return True
    return False


def hardcoded_rendezvous(facts: ScriptFacts) -> Iterator[Finding]:
    """A rendezvous fixed in the code: in the file's own writes and URLs, in a function of the file through a
    default, or in a function of its project that the script calls."""
    findings = list(_fixed_rendezvous(facts))
    lines = {finding.line for finding in findings}
    findings += [finding for finding in [*_fixed_in_functions(facts), *_fixed_in_project(facts), *fixed_in_configs(facts)]
                 if finding.line not in lines]
    yield from findings


def _fixed_in_functions(facts: ScriptFacts) -> Iterator[Finding]:
    """A function of the file, called in it, that writes a rendezvous variable from a parameter's literal default
    its calls leave as it is, or from arithmetic on a literal port (project_rendezvous.py's reading)."""
    for function in (node for node in walk(facts.tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))):
        calls = [call for call in facts.loaded_names.get(function.name, [])]
        if not calls or not all(isinstance(facts.parents.get(use), ast.Call) and facts.parents[use].func is use
                                for use in calls):
            continue  # never called here, or handed on: what it is given is not known
        passed = passed_parameters(function, [facts.parents[use] for use in calls])
        for write, variable in rendezvous_writes(function):
            source = fixed_source(function, write.value, {}, passed)
            if source is not None:
                yield _fixed_value(write.lineno, variable, source)
                break


def _fixed_in_project(facts: ScriptFacts) -> Iterator[Finding]:
    """The script's first call of each project function that writes a rendezvous variable from a fixed value."""
    reported = set()
    for call in facts.calls:
        callee = facts.imported.callee(call)
        if callee in facts.imported.fixed_rendezvous and callee not in reported:
            reported.add(callee)
            variable, source = facts.imported.fixed_rendezvous[callee]
            yield _fixed_value(call.lineno, variable, f"`{callee}` writes it from {source}")


def _fixed_value(line: int, variable: str, source: str) -> Finding:
    return Finding(
        line, "hardcoded-rendezvous",
        f"os.environ[{variable!r}] takes {source}: a port left busy by another job (or a second run on the machine) "
        "stops the rendezvous, and another machine's address needs an edit",
        "leave MASTER_ADDR/MASTER_PORT to the launcher: paratrain run picks a free port on one machine and takes "
        "--master-addr/--master-port on several",
    )


def _templated_port_urls(facts: ScriptFacts) -> Iterator[Finding]:
    """A ``tcp://`` URL whose address comes from the run and whose port is written in
    (DepthContrast's ``'--dist-url tcp://{node0}:1234'.format(...)``, ``f"tcp://{host}:23456"``): a fixed port."""
    for node in walk(facts.tree):
        if isinstance(node, ast.JoinedStr):
            text = ast.unparse(node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and not isinstance(
                facts.parents.get(node), ast.JoinedStr):
            text = node.value
        else:
            continue
        match = _TEMPLATED_PORT.search(text)
        if match:
            yield Finding(
                node.lineno, "hardcoded-rendezvous",
                f"the rendezvous URL's port is fixed in the code ({match.group(0)!r}): a port left busy by another "
                "job (or a second run on the machine) stops the rendezvous",
                "init_process_group(backend) with the default env:// and start with paratrain run, which picks a "
                "free port on one machine and takes --master-port on several",
            )


def _fixed_rendezvous(facts: ScriptFacts) -> Iterator[Finding]:
    # A whole literal URL only: "tcp://%s:%s" % (os.environ["MASTER_ADDR"], …) or
    # f"tcp://127.0.0.1:{port}" take their address and port from the run.
    for node in walk(facts.tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and _LITERAL_URL.match(node.value)
                and not isinstance(facts.parents.get(node), ast.JoinedStr)):
            yield Finding(
                node.lineno, "hardcoded-rendezvous",
                f"hard-coded rendezvous address {node.value!r}: the job breaks when the machine, its address "
                "or the port changes, and a port left busy by another job stops it",
                "init_process_group(backend) with the default env:// and start with paratrain run "
                "(--master-addr/--master-port on several machines), or pt.Runtime()",
            )
    for node, variable, value in _environ_literals(facts):
        if _default_only(facts, node, variable):
            continue
        # A loopback address is a one-machine design, not a fixed rendezvous (as `f"tcp://127.0.0.1:{port}"` is not):
        # only a fixed port, or another machine's address fixed in the code, breaks a run.
        if variable == "MASTER_PORT" or (variable == "MASTER_ADDR" and value not in _LOOPBACK):
            what = ("a port left busy by another job (or a second run on the machine) stops the rendezvous"
                    if variable == "MASTER_PORT" else
                    "the job breaks when that machine or its address changes, and the launcher's own value is overwritten")
            yield Finding(
                node.lineno, "hardcoded-rendezvous",
                f"os.environ[{variable!r}] is set to {value!r} in the code: {what}",
                "leave MASTER_ADDR/MASTER_PORT to the launcher: paratrain run picks a free port on one machine and "
                "takes --master-addr/--master-port on several (or os.environ.setdefault for a default)",
            )
    yield from _templated_port_urls(facts)
    yield from _composed_url_defaults(facts)
    yield from _environ_option_defaults(facts)
    yield from _launch_command_ports(facts)
    for call in facts.calls_named("init_process_group"):
        store = keyword(call, "store")
        if isinstance(store, ast.Call) and last_name(store) == "HashStore":
            continue  # a group of this one process on an in-process store: no address, no port, no peers
        for name in ("world_size", "rank"):
            value = keyword(call, name)
            if isinstance(value, ast.Constant):
                yield Finding(
                    call.lineno, "hardcoded-rendezvous",
                    f"init_process_group(..., {name}={value.value!r}) is fixed in the code: another number of "
                    "processes or machines needs an edit, and a wrong value hangs the rendezvous",
                    "leave rank and world_size out: the launcher's environment (RANK, WORLD_SIZE) gives them",
                )


_PORT_OPTIONS = ("--master_port", "--master-port", "--main_process_port", "--rdzv_endpoint", "--rdzv-endpoint")


def _literal_text(node: ast.AST) -> str | None:
    """A literal's text: ``"29500"``, ``29500``, ``str(29500)``; else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)) and not isinstance(node.value, bool):
        return str(node.value)
    return None


def _launch_command_ports(facts: ScriptFacts) -> Iterator[Finding]:
    """A launcher command the file builds with a literal port: ``[..., "--master_port", str(29961), ...]``
    (ContrastiveSeg starts ``torch.distributed.launch`` so through ``subprocess``) or ``"--master_port=29500"`` in
    one of its words."""
    for node in walk(facts.tree):
        if not isinstance(node, (ast.List, ast.Tuple)):
            continue
        words = node.elts
        for index, word in enumerate(words):
            text = _literal_text(word)
            if text is None:
                continue
            option, equals, value = text.partition("=")
            if not equals and text in _PORT_OPTIONS and index + 1 < len(words):
                option, value = text, _literal_text(words[index + 1]) or ""
            if option in _PORT_OPTIONS and re.fullmatch(r"(?:[^:\s]+:)?\d{2,6}", value or ""):
                yield Finding(
                    word.lineno, "hardcoded-rendezvous",
                    f"the launch command passes {option} {value} fixed in the code: a port left busy by another job "
                    "(or a second run on the machine) stops the rendezvous",
                    "leave the port to the launcher: paratrain run picks a free port on one machine and takes "
                    "--master-port on several",
                )
                break


def _argument_defaults(facts: ScriptFacts) -> dict[str, ast.Call]:
    """``parser.add_argument("--ip", default="10.0.0.1")`` (or absl's ``flags.DEFINE_integer("port", 23456,
    …)``) → {"ip": that call}: the options whose default is a literal, by the name the parsed arguments carry."""
    defaults = {}
    for call in facts.calls_named("add_argument"):
        options = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        default = keyword(call, "default")
        if options and isinstance(default, ast.Constant) and isinstance(default.value, (str, int)):
            dest = keyword(call, "dest")
            long = next((o for o in options if o.startswith("--")), options[0])
            name = dest.value if isinstance(dest, ast.Constant) else long.lstrip("-").replace("-", "_")
            defaults[name] = call
    for call in facts.calls:
        if _ABSL_DEFINE.fullmatch(last_name(call)) and facts.full_name(call).startswith(("absl.flags.", "flags.")):
            name, default = _absl_default(call)
            if name is not None:
                defaults[name] = call
    return defaults


_ABSL_DEFINE = re.compile(r"DEFINE_(?:string|integer)")


def _absl_default(call: ast.Call) -> tuple[str | None, ast.Constant | None]:
    """``flags.DEFINE_integer("master_port", 12355, "…")``: the flag's name and its literal default."""
    name = call.args[0] if call.args else keyword(call, "name")
    default = call.args[1] if len(call.args) > 1 else keyword(call, "default")
    if (isinstance(name, ast.Constant) and isinstance(name.value, str) and isinstance(default, ast.Constant)
            and isinstance(default.value, (str, int)) and not isinstance(default.value, bool)):
        return name.value, default
    return None, None


def _default_of(option: ast.Call) -> str | int:
    """The literal default of an option ``_argument_defaults`` found."""
    default = keyword(option, "default")
    return default.value if default is not None else _absl_default(option)[1].value


def environ_parameters(facts: ScriptFacts) -> dict[str, str]:
    """Parameters of the file's functions that become the rendezvous variables, each with its variable:
    ``def setup(rank, master_port): os.environ["MASTER_PORT"] = str(master_port)`` → {"master_port":
    "MASTER_PORT"}; not where the write only fills an unset variable."""
    found = {}
    for node in walk(facts.tree):
        variable = _rendezvous_variable(node)
        if variable is None or _default_only(facts, node, variable):
            continue
        function = facts.scope(node)
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        params = {arg.arg for arg in function.args.posonlyargs + function.args.args + function.args.kwonlyargs}
        for part in walk(node.value):
            if isinstance(part, ast.Name) and part.id in params:
                found[part.id] = variable
    return found


def _rendezvous_variable(node: ast.AST) -> str | None:
    """``os.environ["MASTER_PORT"] = …``: the variable it sets."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript)
            and ast.unparse(node.targets[0].value).endswith("environ")):
        return None
    variable = node.targets[0].slice
    return variable.value if isinstance(variable, ast.Constant) and variable.value in ("MASTER_PORT", "MASTER_ADDR") else None


def _composed_url_defaults(facts: ScriptFacts) -> Iterator[Finding]:
    """``init_method = "tcp://" + args.ip + ":" + args.port`` (or an f-string) whose parts are options with a
    literal default (``--ip 10.24.0.5``, ``--port 23456``): the address or the port is fixed unless the
    command line says otherwise, as a literal ``--dist-url`` default is. A loopback address is not."""
    defaults = _argument_defaults(facts)
    if not defaults:
        return
    reported = set()
    for node in walk(facts.tree):
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and not isinstance(
                facts.parents.get(node), ast.BinOp):
            head = node
            while isinstance(head, ast.BinOp):
                head = head.left
        else:
            continue
        if not (isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value.startswith("tcp://")):
            continue
        for part in walk(node):
            if not isinstance(part, (ast.Name, ast.Attribute)):
                continue
            option = defaults.get(part.attr if isinstance(part, ast.Attribute) else part.id)
            if option is None or option.lineno in reported:
                continue
            value = keyword(option, "default").value
            if isinstance(value, str) and value in _LOOPBACK:
                continue
            reported.add(option.lineno)
            built = f" (also lines {node.lineno})" if node.lineno != option.lineno else ""  # where the address is made
            yield Finding(
                option.lineno, "hardcoded-rendezvous",
                f"the rendezvous address {ast.unparse(node)} takes this option's fixed default {value!r}: the job "
                f"breaks when the machine or its address changes, and a port left busy by another job stops it{built}",
                "init_process_group(backend) with the default env:// and start with paratrain run "
                "(--master-addr/--master-port on several machines), or pt.Runtime()",
            )


def _environ_option_defaults(facts: ScriptFacts) -> Iterator[Finding]:
    """``os.environ["MASTER_PORT"] = args.master_port`` (or ``str(args.port)``) where the option has a literal
    default (``--master_port 12321``, absl's ``DEFINE_integer("master_port", 12355, …)``): the port is fixed
    unless the command line says otherwise.

    Invariant: an option's value is followed by its name, as the rest of this reading follows values: into
    the write itself, into a parameter of that name of a function of the file or of its project that writes
    it (``setup(rank, master_port)``, ``init_dist_slurm(tcp_port, …)``), or into a function of the file
    called with the option at that parameter's place (``setup(rank, args.port)``)."""
    defaults = _argument_defaults(facts)
    if not defaults:
        return
    reaching: dict[str, str] = {}  # option name → the variable it becomes
    for node in walk(facts.tree):
        variable = _rendezvous_variable(node)
        if variable is None or _default_only(facts, node, variable):
            continue
        for part in walk(node.value):
            if _may_be_the_option(part, defaults):
                reaching.setdefault(last_name(part), variable)
                break
    for name, variable in {**facts.imported.environ_parameters, **environ_parameters(facts)}.items():
        # by its name alone only when it names an address or a port: Music-Source-Separation-Training's
        # `setup_ddp(rank, world_size, seed)` writes MASTER_PORT from a `seed` its caller computed from the clock,
        # not from the `--seed` option
        if name in defaults and _ADDRESS_WORD.search(name):
            reaching.setdefault(name, variable)
    reaching.update({option: variable for option, variable in _passed_to_writers(facts, defaults).items()
                     if option not in reaching})
    for name, variable in sorted(reaching.items(), key=lambda item: defaults[item[0]].lineno):
        option, value = defaults[name], _default_of(defaults[name])
        if value in _LOOPBACK:
            continue
        yield Finding(
            option.lineno, "hardcoded-rendezvous",
            f"os.environ[{variable!r}] takes this option's fixed default {value!r}: a port left busy by "
            "another job (or a second run on the machine) stops the rendezvous",
            "leave MASTER_ADDR/MASTER_PORT to the launcher: paratrain run picks a free port on one machine and "
            "takes --master-addr/--master-port on several",
        )


_ADDRESS_WORD = re.compile(r"port|addr|host|master|url|ip\b|ip_", re.IGNORECASE)


def _may_be_the_option(node: ast.AST, defaults: dict[str, ast.Call]) -> bool:
    """``node`` reads an option of ``defaults``: ``args.port``, or a bare name the option's own when it names an
    address or a port (a bare ``seed`` may be a local computed from anything)."""
    if isinstance(node, ast.Attribute):
        return node.attr in defaults
    return isinstance(node, ast.Name) and node.id in defaults and bool(_ADDRESS_WORD.search(node.id))


def _passed_to_writers(facts: ScriptFacts, defaults: dict[str, ast.Call]) -> dict[str, str]:
    """Options handed to a function of the file at a parameter it writes into a rendezvous variable."""
    writers = environ_parameters(facts)
    functions = {node.name: node for node in walk(facts.tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = {}
    for call in facts.calls:
        function = functions.get(call.func.id) if isinstance(call.func, ast.Name) else None
        if function is None:
            continue
        params = [arg.arg for arg in function.args.posonlyargs + function.args.args]
        given = [(param, arg) for param, arg in zip(params, call.args) if not isinstance(arg, ast.Starred)]
        given += [(kw.arg, kw.value) for kw in call.keywords if kw.arg is not None]
        for param, arg in given:
            if param in writers and _may_be_the_option(arg, defaults):
                found[last_name(arg)] = writers[param]
    return found
