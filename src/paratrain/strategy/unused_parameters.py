"""Turn DDP's "Expected to have finished reduction" error into advice that names parameters.

Without ``find_unused_parameters=True``, DDP waits for a gradient from every
parameter; a parameter that did not take part in the loss leaves the reduction
unfinished, and the *next* forward fails with a long message that gives only
parameter indices ("Parameter indices which did not receive grad for rank 0: 2 3")
unless TORCH_DISTRIBUTED_DEBUG is set. We map the indices back to names.
"""

from __future__ import annotations

import re

import torch

_INDICES = re.compile(r"Parameter indices which did not receive grad for rank (\d+): ([\d ]+)")
_NAMES = re.compile(r"Parameters which did not receive grad for rank (\d+): ([^\n]+)")

MARKER = "Expected to have finished reduction in the prior iteration"


def reducer_parameter_names(module: torch.nn.Module) -> list[str]:
    """Names of the parameters in the order DDP's reducer indexes them.

    Mirrors ``DistributedDataParallel._build_params_for_reducer``: modules in
    ``named_modules`` order, their own trainable parameters, ignored names skipped,
    shared parameters counted once.
    """
    ignored = set(getattr(module, "_ddp_params_and_buffers_to_ignore", ()))
    seen: set[int] = set()
    names = []
    for module_name, child in module.named_modules():
        for param_name, param in child.named_parameters(recurse=False):
            fqn = f"{module_name}.{param_name}" if module_name else param_name
            if not param.requires_grad or fqn in ignored or id(param) in seen:
                continue
            seen.add(id(param))
            names.append(fqn)
    return names


def unused_parameters_message(module: torch.nn.Module, error: RuntimeError) -> str | None:
    """One-line advice for DDP's unfinished-reduction error, or None for another error."""
    text = str(error)
    if MARKER not in text:
        return None
    found = _NAMES.search(text)
    if found:
        rank, unused = found.group(1), [n.strip() for n in found.group(2).split(",") if n.strip()]
    else:
        found = _INDICES.search(text)
        order = reducer_parameter_names(module)
        rank = found.group(1) if found else "?"
        indices = [int(i) for i in found.group(2).split()] if found else []
        unused = [order[i] if i < len(order) else f"#{i}" for i in indices]
    listed = ", ".join(unused[:10]) + (f" (+{len(unused) - 10} more)" if len(unused) > 10 else "")
    return (
        f"DDP: parameter(s) got no gradient on rank {rank} in the previous step: {listed or 'unknown'}; "
        "pass find_unused_parameters=True (to pt.fit, or to pt.Runtime(strategy='ddp', ...)) or make every parameter "
        "contribute to the loss (or set requires_grad=False on the ones you do not train)"
    )
