"""Generated stand-in for the BERT multi-GPU comparison's Chinese review corpus: token ids in, one of 6 moods out.

Each review is 24 token ids from a 200-word vocabulary; words 10k..10k+9 are "mood
words" of class k, and a review carries a few words of its own class among noise, so
a bag-of-words model learns it in one or two epochs. Shared by the examples converted from that comparison
so each of them shows only its conversion.
"""

import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

MOODS = ["其他", "喜好", "悲伤", "厌恶", "愤怒", "高兴"]  # the corpus's six labels
VOCAB, LENGTH = 200, 24


def make_reviews(n: int, seed: int) -> TensorDataset:
    """``n`` reviews, the same for a given ``seed`` on every process."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, len(MOODS), (n,), generator=g)
    ids = torch.randint(len(MOODS) * 10, VOCAB, (n, LENGTH), generator=g)
    mood_words = labels[:, None] * 10 + torch.randint(0, 10, (n, 4), generator=g)
    ids[:, :4] = mood_words
    return TensorDataset(ids, labels)


class BagOfWords(nn.Module):
    """Mean of word embeddings → linear layer: logits over the six moods."""

    def __init__(self, dim: int = 32):
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB, dim)
        self.out = nn.Linear(dim, len(MOODS))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(ids))
