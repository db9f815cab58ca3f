"""``ModelTask``: your own model and datasets, seen by the fit loop as a task.

``pt.fit(model, train_data, eval_data)`` wraps them here. The defaults fit the two
common shapes of batch:

* a dict, for models that take keyword inputs and return ``.loss`` and ``.logits``
  (transformers models with ``labels`` in the batch);
* a pair ``(inputs, labels)``, for models that return logits: cross-entropy loss.

Anything else: pass ``forward(model, batch) -> (loss, scores)``. Evaluation
defaults to accuracy and sklearn's report on the argmax of ``scores``; pass
``evaluator=`` (a factory of :class:`~paratrain.tasks.Evaluator`) for other metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from paratrain.errors import ConfigError
from paratrain.tasks.api import Evaluator, Recipe, Task
from paratrain.tasks.classification import ClassificationEvaluator


def default_forward(model: torch.nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``model(**batch)`` → (``.loss``, ``.logits``), or ``model(inputs)`` → (cross-entropy, logits)."""
    if isinstance(batch, dict):
        try:
            output = model(**batch)
        except TypeError as exc:
            if "unexpected keyword argument" not in str(exc):
                raise
            raise ConfigError(
                f"the batch is a dict (keys {sorted(batch)}) and pt.fit calls model(**batch), but the model does not take "
                f"those names ({exc}); have the dataset return (inputs, labels) pairs, or pass "
                "forward=lambda model, batch: (loss, scores)"
            ) from None
        loss = getattr(output, "loss", None) if not isinstance(output, dict) else output.get("loss")
        logits = getattr(output, "logits", None) if not isinstance(output, dict) else output.get("logits")
        if loss is None:
            raise ConfigError("the model returned no loss for a dict batch; put 'labels' in the batch or pass forward=")
        return loss, logits
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        inputs, labels = batch
        logits = model(inputs)
        if not isinstance(logits, torch.Tensor):
            logits = getattr(logits, "logits", logits)  # an output object with .logits (transformers)
        if not isinstance(logits, torch.Tensor):
            raise ConfigError(
                f"the model returned a {type(logits).__name__}, not a tensor of logits, and pt.fit's default loss is "
                "cross_entropy(model(inputs), labels); pass forward=lambda model, batch: (loss, scores) that picks "
                "the logits out (e.g. model(batch[0])[0])"
            )
        return torch.nn.functional.cross_entropy(logits, labels), logits
    raise ConfigError(f"cannot train on a batch of type {type(batch).__name__}; pass forward=(model, batch) -> (loss, scores)")


class ModelTask(Task):
    """A task made of a user's model, datasets and (optionally) functions."""

    name = "model"
    summary = "your own model and datasets"

    def __init__(
        self,
        model: torch.nn.Module,
        train_data: Any,
        eval_data: Any,
        forward: Callable[[torch.nn.Module, Any], tuple[torch.Tensor, torch.Tensor]] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        evaluator: Callable[[], Evaluator] | None = None,
        label_names: list[str] | None = None,
        metric: str = "accuracy",
        lengths: Any = None,
    ):
        super().__init__()
        if train_data is None or eval_data is None:
            raise ConfigError("pt.fit(model, ...) needs train_data and eval_data (map-style datasets)")
        self._model = model
        self._data = (train_data, eval_data)
        self._forward = forward or default_forward
        self._collate = collate_fn
        self._evaluator = evaluator
        self.label_names = list(label_names or [])
        self._lengths = lengths
        self.recipe = Recipe(metric=metric)

    def datasets(self):
        return self._data

    def sample_lengths(self, dataset):
        return None if self._lengths is None else list(self._lengths)

    def collate(self, samples):
        if self._collate is not None:
            return self._collate(samples)
        return torch.utils.data.default_collate(samples)

    def build_model(self) -> torch.nn.Module:
        return self._model

    def model_identity(self) -> str:
        """The model's class and a hash of its parameter names, shapes and dtypes: a run
        directory of another model is refused up front instead of failing to load."""
        from paratrain.diagnostics.desync import structure_digest

        # FSDP2's fully_shard swaps the module's class for FSDP<Name> in place: name the user's class.
        kind = next((k for k in type(self._model).__mro__ if not k.__module__.startswith("torch.distributed.")),
                    type(self._model))
        return f"{kind.__module__}.{kind.__qualname__} (parameters {structure_digest(self._model)})"

    def forward(self, model, batch):
        return self._forward(model, batch)

    def evaluator(self) -> Evaluator:
        if self._evaluator is not None:
            return self._evaluator()
        return ClassificationEvaluator(self.label_names or None)
