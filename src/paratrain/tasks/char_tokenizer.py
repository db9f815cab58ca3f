"""A character tokenizer built from the training texts, for BERT trained from scratch.

Chinese text needs no word segmentation at the character level, and a
vocabulary of the training set's characters (about 4 400 that occur twice or
more in the review corpus) is small enough for a 128-wide model. It is saved
as JSON beside the checkpoints so ``paratrain predict`` encodes exactly as training did.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import torch

from paratrain.errors import DataError

PAD, UNK, CLS, SEP = "[PAD]", "[UNK]", "[CLS]", "[SEP]"
SPECIAL = [PAD, UNK, CLS, SEP]
VOCAB_FILE = "vocab.json"


class CharTokenizer:
    """Maps characters to ids; pads batches to their longest text (at most ``max_len`` ids)."""

    def __init__(self, tokens: list[str]):
        if tokens[: len(SPECIAL)] != SPECIAL:
            raise DataError(f"a character vocabulary must start with {SPECIAL}, got {tokens[:len(SPECIAL)]}")
        self.tokens = list(tokens)
        self.ids = {token: index for index, token in enumerate(self.tokens)}

    @classmethod
    def from_texts(cls, texts: Iterable[str], min_count: int = 2, max_size: int = 8000) -> CharTokenizer:
        """The characters seen at least ``min_count`` times, most frequent first (ties by character)."""
        counts = Counter(char for text in texts for char in text if not char.isspace())
        kept = sorted((c for c, n in counts.items() if n >= min_count), key=lambda c: (-counts[c], c))
        return cls(SPECIAL + kept[: max_size - len(SPECIAL)])

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def pad_id(self) -> int:
        return self.ids[PAD]

    def length(self, text: str, max_len: int) -> int:
        """Tokens :meth:`encode` gives ``text``: its characters (no spaces) plus [CLS] and [SEP], at most ``max_len``."""
        return min(sum(1 for char in text if not char.isspace()) + 2, max_len)

    def encode(self, texts: list[str], max_len: int) -> dict[str, torch.Tensor]:
        """``input_ids`` and ``attention_mask`` of shape (len(texts), longest ≤ max_len): [CLS] chars [SEP]."""
        unk = self.ids[UNK]
        rows = [
            [self.ids[CLS]] + [self.ids.get(char, unk) for char in text if not char.isspace()][: max_len - 2] + [self.ids[SEP]]
            for text in texts
        ]
        width = max(len(row) for row in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
        return {"input_ids": input_ids, "attention_mask": (input_ids != self.pad_id).long()}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")  # rewritten at every start: a kill mid-write keeps the old one
        tmp.write_text(json.dumps({"tokens": self.tokens}, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)
        return path

    def save_into(self, directory: Path) -> dict[str, str]:
        """Write ``vocab.json`` into ``directory``; return how to find it again."""
        self.save(directory / VOCAB_FILE)
        return {"kind": "char", "file": VOCAB_FILE}

    @classmethod
    def load(cls, path: str | Path) -> CharTokenizer:
        """The tokenizer saved at ``path``.

        Raises:
            DataError: the file is not a saved vocabulary.
        """
        try:
            tokens = json.loads(Path(path).read_text(encoding="utf-8"))["tokens"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{path} is not a character vocabulary ({exc}); train again to write it") from None
        return cls(tokens)
