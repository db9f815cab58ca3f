"""Weights load whether keys carry module. / _orig_mod. or not, into wrapped or unwrapped models."""

from __future__ import annotations

import torch
from safetensors.torch import save_file

from paratrain.checkpoint import Checkpointer, read_model_state
from paratrain.checkpoint.keys import strip_wrapper_prefixes
from tests.checkpoint.helpers import same_weights, save_steps, trained


def test_foreign_files_with_wrapper_prefixes_load_into_plain_and_compiled_models(tmp_path):
    source, _ = trained(seed=1)
    weights = source.state_dict()
    # The classic DDP tutorial's style: torch.save(ddp_model.state_dict()) on rank 0 -> every key has "module.".
    torch.save({f"module.{k}": v for k, v in weights.items()}, tmp_path / "ddp.pt")
    # torch.compile(model).state_dict() -> "_orig_mod." keys, in a safetensors file.
    save_file({f"_orig_mod.{k}": v.contiguous() for k, v in weights.items()}, str(tmp_path / "compiled.safetensors"))
    # A training script's dict with the weights nested under "model_state_dict".
    torch.save({"epoch": 3, "model_state_dict": {f"module._orig_mod.{k}": v for k, v in weights.items()}}, tmp_path / "nested.pt")
    for name in ("ddp.pt", "compiled.safetensors", "nested.pt"):
        for wrap in (lambda m: m, torch.compile):
            model, _ = trained(seed=2)
            target = wrap(model)
            Checkpointer(None, tmp_path / "ckpts", model=target).load(tmp_path / name)
            assert same_weights(model, weights), name


def test_paratrain_checkpoints_of_wrapped_models_have_plain_keys_and_load_into_any_wrapping(tmp_path):
    weights = save_steps(tmp_path / "plain", steps=(1,))
    model, optimizer = trained(seed=5)
    compiled = torch.compile(model)
    Checkpointer(None, tmp_path / "plain", model=compiled, optimizer=optimizer).resume()
    assert same_weights(model, weights[1])
    # Saved through DataParallel(torch.compile(model)): still the user's names, and loads into a plain model.
    Checkpointer(None, tmp_path / "wrapped", model=torch.nn.DataParallel(compiled), optimizer=optimizer).save(step=1)
    state, source = read_model_state(tmp_path / "wrapped")
    assert source.name == "step-000001" and sorted(state) == sorted(weights[1])
    plain, plain_optimizer = trained(seed=6)
    Checkpointer(None, tmp_path / "wrapped", model=plain, optimizer=plain_optimizer).resume()
    assert same_weights(plain, weights[1])
    assert plain_optimizer.state_dict()["state"].keys() == optimizer.state_dict()["state"].keys()


def test_only_a_prefix_on_every_key_is_stripped():
    assert strip_wrapper_prefixes({"module.a": 1, "module.b": 2}) == {"a": 1, "b": 2}
    assert strip_wrapper_prefixes({"module.a": 1, "head.b": 2}) == {"module.a": 1, "head.b": 2}
    assert strip_wrapper_prefixes({"module._orig_mod.a": 1}) == {"a": 1}
