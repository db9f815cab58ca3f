"""What every worker of ``paratrain run`` gets from its process group, ``pt.Runtime`` or not.

A plain script (``dist.init_process_group("gloo")`` and nothing of paratrain) runs under the
launcher as under torchrun, with three things torchrun gets wrong or leaves out made right
where the group is made, by wrapping two torch functions when torch imports them (nothing
is imported at interpreter start: :func:`install` only registers an import hook):

* **its own keys for every attempt.** With a static rendezvous (one node, or ``--master-port``
  on fixed nodes) the agent's store outlives the attempts, and the workers of a restarted
  group meet in it under the same keys as the dead ones (torch's ``_create_c10d_store``
  assumes a new store every retry). The new ranks read the dead ranks' gloo addresses:
  "connectFullMesh … Connection refused", or a wait until the group's timeout. Every store
  the workers reach through ``env://`` or ``tcp://`` is put under a prefix naming the attempt
  (:func:`paratrain.env.torchelastic.store_attempt`, the same rule ``pt.Runtime`` follows).
* **its CPUs.** Once the group exists (gloo's threads started, keeping every CPU), the
  calling thread and the OpenMP pool it starts later are bound to the share the launcher
  planned for this local rank (:mod:`paratrain.env.cpu_binding`), as ``pt.Runtime`` does, so
  the launcher's binding line is true for every script.
* **one rank tag per line.** torch's ``init_process_group`` installs an excepthook that
  writes ``[rankN]:`` before every traceback line; the launcher tags every line already, so
  the hook the process had is kept.
* **a calm exit.** ``destroy_process_group`` first gives gloo's threads a moment with the GIL
  released, as ``pt.Runtime`` does when it leaves its group.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from types import ModuleType

from paratrain.env import cpu_binding
from paratrain.env.torchelastic import GLOO_DRAIN_S, LINE_PREFIX_VAR, store_attempt

#: module name → what to do to it right after torch executed it
_PATCHES: dict[str, Callable[[ModuleType], None]] = {}


def _attempt_keys(module: ModuleType) -> None:
    create = getattr(module, "_create_c10d_store", None)
    uses_agent_store = getattr(module, "_torchelastic_use_agent_store", None)
    if create is None or uses_agent_store is None:
        return  # another torch: its stores stay as they are

    def _create_c10d_store(*args, **kwargs):
        store = create(*args, **kwargs)
        if not uses_agent_store():  # a store of this attempt's own (rank 0 hosts it)
            return store
        from torch.distributed import PrefixStore

        return PrefixStore(f"paratrain/attempt{store_attempt(os.environ)}", store)

    module._create_c10d_store = _create_c10d_store


def _group_settings(module: ModuleType) -> None:
    init = getattr(module, "init_process_group", None)
    if init is None:
        return

    def init_process_group(*args, **kwargs):
        excepthook = sys.excepthook
        result = init(*args, **kwargs)
        if os.environ.get(LINE_PREFIX_VAR):
            sys.excepthook = excepthook
        share = cpu_binding.share_for(os.environ, int(os.environ.get("LOCAL_RANK", "0") or 0))
        if share and module.get_backend() == "gloo":
            cpu_binding.bind_compute_threads(share)
        return result

    init_process_group.__wrapped__ = init
    init_process_group.__doc__ = init.__doc__
    module.init_process_group = init_process_group

    destroy = getattr(module, "destroy_process_group", None)
    if destroy is None:
        return

    def destroy_process_group(*args, **kwargs):
        # As pt.Runtime leaves a group (runtime/process_group.py): a moment with the GIL released
        # lets gloo's threads drop finished collectives before the group is freed.
        if module.is_initialized():
            time.sleep(GLOO_DRAIN_S)
        return destroy(*args, **kwargs)

    destroy_process_group.__wrapped__ = destroy
    destroy_process_group.__doc__ = destroy.__doc__
    module.destroy_process_group = destroy_process_group


_PATCHES["torch.distributed.rendezvous"] = _attempt_keys
_PATCHES["torch.distributed.distributed_c10d"] = _group_settings
#: the names of torch's that the patches wrap; a torch without one keeps its own behaviour there, so
#: the supported torch is tested to have them all (a rename upstream fails that test, not a user's run)
TORCH_NAMES = {
    "torch.distributed.rendezvous": ("_create_c10d_store", "_torchelastic_use_agent_store"),
    "torch.distributed.distributed_c10d": ("init_process_group", "destroy_process_group"),
}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for the modules in ``_PATCHES`` it asks the finders after it
    and runs the patch once the module's own code has run (before anyone reads its names)."""

    def find_spec(self, name, path, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            try:
                patch(module)
            except Exception:  # never break the user's import for what we add
                pass

        loader.exec_module = exec_module
        return spec


def install() -> None:
    """Register the import hook (once); torch is not imported."""
    if not any(isinstance(finder, _PatchAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterImport())
