"""The torch names a plain script's fixes wrap exist in the supported torch (a rename upstream would
silently drop a fix: each wrapper leaves a module without the name as it is)."""

from __future__ import annotations

import importlib

from paratrain.launch.worker_site import plain_scripts


def test_every_name_the_patches_wrap_exists_in_this_torch():
    assert set(plain_scripts.TORCH_NAMES) == set(plain_scripts._PATCHES)
    for module_name, names in plain_scripts.TORCH_NAMES.items():
        module = importlib.import_module(module_name)
        missing = [name for name in names if not callable(getattr(module, name, None))]
        assert not missing, f"{module_name} has no {missing}: update paratrain.launch.worker_site.plain_scripts"
