"""``bench.json``: every figure of every row, the settings, the machine and the command line."""

from __future__ import annotations

import json
import math

from paratrain.bench.results import BenchResult


def _finite(value):
    """JSON has no inf/NaN: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def render_json(result: BenchResult) -> str:
    return json.dumps(_finite(result.to_dict()), indent=1, ensure_ascii=False)
