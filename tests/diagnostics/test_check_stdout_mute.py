"""A stdout mute that the script undoes silences the block it surrounds, not the prints of the whole file.

bts-like: ``block_print()`` sends ``sys.stdout`` to /dev/null and ``enable_print()`` puts ``sys.__stdout__``
back around one call; the prints elsewhere still run on every rank. A mute that is never undone (under a rank
test, as ParallelWaveGAN's) keeps the other ranks silent from then on: a print before a call of the function that
mutes still runs on every rank.
"""

from __future__ import annotations

from paratrain.diagnostics.check import check_source

SCRIPT = """\
import os
import sys
import torch.distributed as dist


def block_print():
    sys.stdout = open(os.devnull, "w")


def enable_print():
    {restore}


dist.init_process_group("nccl")
print("Initial variables' sum")
block_print()
set_misc()
enable_print()
"""


def _prints(restore: str) -> list[int]:
    return [f.line for f in check_source(SCRIPT.format(restore=restore)) if f.rule == "print-on-every-rank"]


def test_a_mute_put_back_leaves_the_other_prints_on_every_rank():
    assert _prints("sys.stdout = sys.__stdout__") == [15]


def test_a_mute_put_back_from_a_saved_stream_too():
    source = SCRIPT.format(restore="sys.stdout = ORIGINAL").replace("import sys\n", "import sys\nORIGINAL = sys.stdout\n")
    assert [f.line for f in check_source(source) if f.rule == "print-on-every-rank"] == [16]


def test_a_mute_never_undone_or_a_stream_that_is_not_stdout_keeps_prints_silent():
    assert _prints("pass") == [15]  # printed before block_print() mutes the other ranks
    assert _prints("sys.stdout = open('log.txt', 'w')") == [15]
    never_undone = SCRIPT.format(restore="pass").replace(
        'block_print()\n', 'if dist.get_rank() != 0:\n    sys.stdout = open(os.devnull, "w")\n')
    assert [f.line for f in check_source(never_undone) if f.rule == "print-on-every-rank"] == []
