"""The standard library's pretty printer is a print: on every rank unless a rank test guards it."""

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
