"""Top-level worker functions for the fit loop's pt.spawn tests (spawned children import them)."""

from __future__ import annotations

import torch

import paratrain as pt
from paratrain.tasks import TaskOptions


class BatchNormKinds(pt.Callback):
    """At the end of fit: which BatchNorm classes the trained model holds."""

    def on_fit_end(self, trainer, result):
        module = trainer.runtime.unwrap(trainer.model)
        self.kinds = sorted({type(m).__name__ for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)})
        self.layers = sum(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in module.modules())


def seg(sync_batchnorm: bool) -> dict:
    """A short seg run on this job's ranks; its result and its BatchNorm layers."""
    kinds = BatchNormKinds()
    result = pt.fit("seg", task_options=TaskOptions(limit_train=64, limit_eval=32), epochs=2, batch_size=4,
                    sync_batchnorm=sync_batchnorm, seed=3, log_every=4, progress=False, callbacks=[kinds])
    return {**result.to_dict(), "batchnorm_layers": kinds.layers, "batchnorm_kinds": kinds.kinds}


def digits_uneven_eval(strategy: str) -> dict:
    """Dev shards of 23 and 22 samples in batches of 22: rank 0 runs 2 eval batches, rank 1 runs 1."""
    result = pt.fit("digits", task_options=TaskOptions(limit_train=128, limit_eval=45), max_steps=4, batch_size=16,
                    eval_batch_size=22, strategy=strategy, progress=False)
    return result.to_dict()
