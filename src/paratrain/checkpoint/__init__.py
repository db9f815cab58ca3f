"""Checkpoints: complete, atomic, verified, sharded when the model is, safe to load.

    ckpt = pt.Checkpointer(rt, "runs/exp/checkpoints", model=model, optimizer=opt, loader=train)
    state = ckpt.resume()          # newest good checkpoint (None: fresh start)
    ...
    ckpt.save(step=step, epoch=epoch, metrics={"accuracy": acc})

``paratrain ckpt inspect PATH`` describes one; ``paratrain ckpt export PATH -o
model.safetensors`` turns any of them (sharded or not) into one plain weights file.
"""

from paratrain.checkpoint.catalog import CheckpointWarning
from paratrain.checkpoint.checkpointer import Checkpointer
from paratrain.checkpoint.describe import describe
from paratrain.checkpoint.export import export, read_model_state
from paratrain.checkpoint.restoring import CheckpointState

__all__ = ["Checkpointer", "CheckpointState", "CheckpointWarning", "describe", "export", "read_model_state"]
