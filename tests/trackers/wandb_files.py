"""Read W&B's offline run files back (``OUT/wandb/offline-run-*/run-ID.wandb``) as W&B's own sync would.

The file is ``:W&B`` + a 2-byte magic + a version byte, then LevelDB's log format: 32 KiB blocks of
records, each with a 7-byte header (CRC32C, little-endian length, type: 1 full, 2 first, 3 middle,
4 last) and a serialized ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK = 32 * 1024
FILE_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[wandb_internal_pb2.Record]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    found, pending, offset = [], b"", FILE_HEADER
    while offset + 7 <= len(data):
        room = BLOCK - offset % BLOCK
        if room < 7:  # a block's tail too short for a header is padding
            offset += room
            continue
        length, kind = struct.unpack_from("<HB", data, offset + 4)
        if length == 0 and kind == 0:
            break
        payload = data[offset + 7: offset + 7 + length]
        offset += 7 + length
        if kind == FULL:
            pending = payload
        elif kind == FIRST:
            pending = payload
            continue
        elif kind == MIDDLE:
            pending += payload
            continue
        else:
            pending += payload
        record = wandb_internal_pb2.Record()
        record.ParseFromString(pending)
        found.append(record)
        pending = b""
    return found


def runs(wandb_dir: Path) -> dict[str, list[dict]]:
    """Every offline run file under ``wandb_dir``: run id → the history rows of all its files (``_step`` and
    the metrics), in file order."""
    by_id: dict[str, list[dict]] = {}
    for path in sorted(Path(wandb_dir).glob("offline-run-*/run-*.wandb")):
        run_id = path.stem[len("run-"):]
        rows = by_id.setdefault(run_id, [])
        for record in records(path):
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
    return by_id


def config(wandb_dir: Path) -> dict:
    """The config the runs under ``wandb_dir`` were given (the last value of each key)."""
    values: dict = {}
    for path in sorted(Path(wandb_dir).glob("offline-run-*/run-*.wandb")):
        for record in records(path):
            kind = record.WhichOneof("record_type")
            items = record.config.update if kind == "config" else record.run.config.update if kind == "run" else []
            for item in items:
                values[item.key] = json.loads(item.value_json)
    return values
