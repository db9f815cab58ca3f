"""Data: distributed, resumable training loaders and exact evaluation sharding.

    train = rt.loader(train_ds, batch_size=32, shuffle=True)   # set_epoch automatic, resumable
    dev = rt.loader(dev_ds, batch_size=64, exact=True)         # every sample once across ranks
    preds, labels = rt.gather(preds, labels)                   # dataset order, no duplicates
"""

from paratrain.data.exact import ExactShardSampler, shard_bounds
from paratrain.data.gather import gather
from paratrain.data.global_loader import ElasticResumeWarning, GlobalOrderLoader
from paratrain.data.loader import DistributedLoader, RankPlace, make_loader
from paratrain.data.resumable import ResumableSampler, ResumableWrapper
from paratrain.data.sampler import ResumableDistributedSampler

__all__ = [
    "make_loader",
    "RankPlace",
    "DistributedLoader",
    "GlobalOrderLoader",
    "ElasticResumeWarning",
    "gather",
    "ResumableSampler",
    "ResumableDistributedSampler",
    "ResumableWrapper",
    "ExactShardSampler",
    "shard_bounds",
]
