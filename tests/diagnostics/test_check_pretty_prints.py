"""Printers other than print are prints: the standard library's pretty printer and tqdm's write, on every rank unless a
rank test guards them."""

from __future__ import annotations

from paratrain.diagnostics.check import check_source

SCRIPT = """\
import torch.distributed as dist
{imports}

dist.init_process_group("nccl")
config = {{"lr": 1}}
{call}
"""


def _prints(imports: str, call: str) -> list[int]:
    source = SCRIPT.format(imports=imports, call=call)
    return [finding.line for finding in check_source(source) if finding.rule == "print-on-every-rank"]


def test_pprint_on_every_rank_is_a_print_on_every_rank():
    assert _prints("from pprint import pprint", "pprint(config)") == [6]
    assert _prints("import pprint", "pprint.pprint(config)") == [6]
    assert _prints("import pprint as pretty", "pretty.pp(config)") == [6]


def test_pprint_under_a_rank_test_to_a_stream_or_of_another_module_is_quiet():
    assert _prints("from pprint import pprint", "if dist.get_rank() == 0:\n    pprint(config)") == []
    assert _prints("import pprint", "pprint.pprint(config, stream=open('config.txt', 'w'))") == []
    assert _prints("from rich.pretty import pprint", "pprint(config)") == []


def test_tqdm_write_prints_on_every_rank_even_where_the_bar_is_disabled():
    source = """
import torch.distributed as dist
from tqdm import tqdm

dist.init_process_group("nccl")
pbar = tqdm(range(100), disable=dist.get_rank() != 0)
for step in pbar:
    pbar.write(f"loss {step}")
tqdm.write("done")
log = open("log.txt", "w")
log.write("a file, not the console")
"""
    assert [(f.line, f.rule) for f in check_source(source) if f.rule == "print-on-every-rank"] == [
        (8, "print-on-every-rank")]
    assert "also lines 9" in next(f.problem for f in check_source(source) if f.rule == "print-on-every-rank")
