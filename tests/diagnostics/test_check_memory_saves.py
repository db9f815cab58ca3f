"""``torch.save`` into an ``io.BytesIO`` writes no checkpoint unless the buffer goes on to storage."""

from __future__ import annotations

from paratrain.diagnostics.check import check_source

_HEAD = """\
import torch.distributed as dist
dist.init_process_group("nccl")
"""


def rules(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in check_source(source)]


def test_a_torch_save_into_memory_is_no_checkpoint_unless_the_buffer_is_written_somewhere():
    # mdetr's all_gather serialises into an io.BytesIO; minGPT's upload_to_s3 sends the same buffer to S3
    gather = _HEAD + """\
import io
import torch

def all_gather(data):
    buffer = io.BytesIO()
    torch.save(data, buffer)
    return buffer.getbuffer()

all_gather({"loss": 1.0})
"""
    assert rules(gather) == []
    uploaded = gather.replace("    return buffer.getbuffer()", "    client.upload_fileobj(buffer, 'bucket', 'ckpt.pt')")
    assert rules(uploaded) == [(8, "save-on-every-rank")]
