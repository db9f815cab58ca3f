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


def seg_runs(sync_batchnorm: list[bool]) -> list[dict]:
    """:func:`seg` for each setting in turn, in one job (each fit makes and closes its own group)."""
    return [seg(value) for value in sync_batchnorm]


def digits_uneven_eval(strategy: str) -> dict:
    """Dev shards of 23 and 22 samples in batches of 22: rank 0 runs 2 eval batches, rank 1 runs 1."""
    result = pt.fit("digits", task_options=TaskOptions(limit_train=128, limit_eval=45), max_steps=4, batch_size=16,
                    eval_batch_size=22, strategy=strategy, progress=False)
    return result.to_dict()


def fit_multi_runs() -> dict:
    """:func:`seg_runs` without and with SyncBatchNorm, then :func:`digits_uneven_eval` on fsdp, one after the
    other in one job (each fit makes and closes its own group): one start of the processes for the three."""
    plain, synced = seg_runs([False, True])
    return {"seg": (plain, synced), "uneven": digits_uneven_eval("fsdp")}


class NanAfter(torch.nn.Module):
    """A linear classifier whose training forward returns NaN logits on its ``first``-th to
    ``last``-th call (on ``only_rank`` only, when given) — a loss that turns NaN mid-run."""

    def __init__(self, first: int, last: int | None = None, only_rank: int | None = None):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.first, self.last, self.only_rank = first, last, only_rank
        self.calls = 0

    def forward(self, x):
        logits = self.linear(x)
        if self.training:
            self.calls += 1
            poisoned = self.first <= self.calls <= (self.last or self.calls)
            if poisoned and self.only_rank in (None, pt.comm.rank()):
                logits = logits * float("nan")
        return logits


def separable(n: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return torch.utils.data.TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())


def fit_nan_after(out_dir: str, first: int, last: int | None, only_rank: int | None, policy: str) -> dict:
    """pt.fit on 64 samples (2 ranks × batch 8: 4 steps an epoch), a checkpoint every 2 steps."""
    torch.manual_seed(0)
    model = NanAfter(first, last, only_rank)
    result = pt.fit(model, separable(64, 1), separable(16, 2), epochs=3, batch_size=8, lr=0.05, save_every=2,
                    out_dir=out_dir, on_nonfinite=policy, progress=False, tensorboard=False,
                    **({"max_nonfinite_skips": 3} if policy == "skip" else {}))
    return result.to_dict()


def fit_nan_skips(finishing: str, past_bound: str) -> None:
    """Two runs of the skip policy in one job: :func:`fit_nan_after` with steps 5 and 6 non-finite in
    ``finishing`` (its result written to ``finishing``/result.json), then with every step from 5 on
    non-finite in ``past_bound``, which raises once the bound of 3 skips is passed."""
    import json
    from pathlib import Path

    result = fit_nan_after(finishing, 5, 6, None, "skip")
    if pt.rank() == 0:
        (Path(finishing) / "result.json").write_text(json.dumps(result))
    fit_nan_after(past_bound, 5, None, None, "skip")


class TupleModel(torch.nn.Module):
    """Returns (logits, features), as many research models do."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.linear(x), x


class UnusedHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.unused = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.linear(x)


class DictSet(torch.utils.data.Dataset):
    """Dict samples ``{"x": ..., key: ...}``."""

    def __init__(self, base, label_key: str = "labels"):
        self.base, self.label_key = base, label_key

    def __len__(self):
        return len(self.base)

    def __getitem__(self, index):
        x, y = self.base[index]
        return {"x": x, self.label_key: y}


def fit_own(out_dir: str | None, case: str, options: dict) -> dict:
    """pt.fit on 2 ranks with an own model and data shaped by ``case``; its result, or the error's line."""
    torch.manual_seed(0)
    options = dict(options)
    train, dev = separable(64, 1), separable(options.pop("dev", 16), 2)
    model = torch.nn.Linear(4, 2)
    if case == "tuple":
        model = TupleModel()
    elif case == "dict-positional":
        train, dev = DictSet(train), DictSet(dev)
    elif case == "dict-no-labels":  # an own forward that reads "target"; the default evaluator looks for "labels"
        train, dev = DictSet(train, "target"), DictSet(dev, "target")

        def forward(model, batch):
            logits = model(batch["x"])
            return torch.nn.functional.cross_entropy(logits, batch["target"]), logits

        options["forward"] = forward
    elif case == "mlp":  # another model than "plain"'s, from the same data
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    elif case == "unused":  # a head that takes no part in the loss: DDP needs find_unused_parameters
        model = UnusedHead()
    elif case == "empty-dev":
        dev = torch.utils.data.Subset(dev, [])
    try:
        result = pt.fit(model, train, dev, out_dir=out_dir, progress=False, tensorboard=False, **options)
    except pt.ParatrainError as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "steps_trained": None}
    return result.to_dict()


def fit_own_runs(runs: list[tuple[str | None, str, dict]]) -> list[dict]:
    """:func:`fit_own` for each ``(out_dir, case, options)`` in turn, in one job: the runs one
    would start one after another, without a job start (torch's import) for each."""
    return [fit_own(out_dir, case, options) for out_dir, case, options in runs]


class SigtermInFinalEval(pt.Callback):
    """SIGTERM to rank 1 only, during the evaluation after the last step (as the launcher's
    SIGTERM reaches a worker that is already finishing)."""

    def on_eval_end(self, trainer, evaluation):
        import signal

        if trainer.state.step == trainer.total_steps and pt.comm.rank() == 1:
            signal.raise_signal(signal.SIGTERM)


def fit_sigterm_after_the_last_step(out_dir: str) -> dict:
    """pt.fit for 8 steps (2 epochs of 4), a checkpoint every 3; SIGTERM during the final evaluation."""
    torch.manual_seed(0)
    result = pt.fit(torch.nn.Linear(4, 2), separable(64, 1), separable(16, 2), epochs=2, batch_size=8, save_every=3,
                    out_dir=out_dir, progress=False, tensorboard=False, callbacks=[SigtermInFinalEval()])
    return result.to_dict()
