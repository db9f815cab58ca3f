"""paratrain check follows values through the script: however a name is bound, and through the values it is given.

Each script here is written for the test: a sampler bound by tuple unpacking (and the other forms of binding a
name), loguru's default sink left on until after a log line, an accuracy over a sharded loader handed to a
function and printed per rank, a print helper called with a literal rank, and a rendezvous port that reaches
MASTER_PORT through a flag's default.
"""

from __future__ import annotations

import pytest

from paratrain.diagnostics.check import check_source


def rules(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in check_source(source)]


_SAMPLER_FORMS = {
    "tuple": "train_sampler, shuffle = DistributedSampler(ds), False",
    "list": "[shuffle, train_sampler] = [False, DistributedSampler(ds)]",
    "starred": "train_sampler, *rest = DistributedSampler(ds), False, None",
    "annotated": "train_sampler: DistributedSampler = DistributedSampler(ds)",
    "walrus": "if (train_sampler := DistributedSampler(ds)) is not None: pass",
    "attribute": "self.train_sampler, self.shuffle = DistributedSampler(ds), False",
}


@pytest.mark.parametrize("form", sorted(_SAMPLER_FORMS))
def test_a_sampler_is_known_however_its_name_is_bound(form):
    binding = _SAMPLER_FORMS[form]
    name = "self.train_sampler" if form == "attribute" else "train_sampler"
    source = f"""\
from torch.utils.data import DataLoader, DistributedSampler

class Trainer:
    def fit(self, ds):
        {binding}
        loader = DataLoader(ds, sampler={name})
        for epoch in range(10):
            for batch in loader:
                pass
"""
    assert (5, "no-set-epoch") in rules(source)
    told = source.replace("            for batch", f"            {name}.set_epoch(epoch)\n            for batch")
    assert "no-set-epoch" not in {rule for _, rule in rules(told)}


def test_a_name_unpacked_from_a_call_stays_unknown():
    source = """\
from torch.utils.data import DataLoader
from data import make_samplers

train_sampler, val_sampler = make_samplers(ds)
loader = DataLoader(ds, sampler=train_sampler)
for epoch in range(10):
    for batch in loader:
        pass
"""
    assert "no-set-epoch" not in {rule for _, rule in rules(source)}
