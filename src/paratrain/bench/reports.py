"""The bench's reports of one result: ``bench.md`` and the printed table (one row per method: method | time |
samples/s | speed-up | …), ``bench.json`` (every figure of every row, the settings, the machine and the
command line) and ``bench.png`` (samples/s and peak memory per method, side by side)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from paratrain.bench.parity import TOLERANCE, judged
from paratrain.bench.results import BenchResult, Row
from paratrain.bench.spread import Spread
from paratrain.errors import require


def _seconds(value: float) -> str:
    return f"{value / 60:.2f} min" if value >= 120 else f"{value:.1f} s"


def _range(spread: Spread | None, show) -> str:
    """``median (low–high)`` over the rounds; the median alone for one run."""
    if spread is None:
        return "—"
    if spread.n < 2:
        return show(spread.median)
    return f"{show(spread.median)} ({show(spread.low)}–{show(spread.high)})"


def _memory(row: Row) -> str:
    spread = row.spreads.get("peak_memory_bytes")
    return f"{spread.median / 2**20:,.0f} MiB" if spread else "—"


def _versus(row: Row) -> str:
    """The verdict, and with two rounds or more the per-round ratio to the baseline: median (range)."""
    ratio = row.vs_baseline
    if ratio is None or ratio.n < 2:
        return row.verdict or "—"
    return f"{row.verdict} · {ratio.median:.2f}× ({ratio.low:.2f}–{ratio.high:.2f})"


def _parity(row: Row) -> str:
    if row.parity is None:
        return "—"
    if not judged(row.precision):
        return f"{row.parity:.1e} (amp)"
    return f"{row.parity:.1e} {'✓' if row.same_training else '✗'}"


def table_lines(result: BenchResult) -> list[str]:
    metric = result.metric
    baseline = result.settings.get("baseline")
    header = (f"| method | runs | time (first step) | samples/s | vs {f'`{baseline}`' if baseline else 'the fastest'} | speed-up "
              f"| memory | dev {metric} | final loss | loss parity | notes |")
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for row in result.rows:
        notes = "; ".join(([f"**{row.kind}**: {row.error}"] if not row.measured else []) + row.notes)
        runs = f"{len(row.measured_runs)}/{len(row.runs)}" if row.runs else "—"
        if row.measured:
            f = row.figures
            dev = row.dev.get(metric) if row.dev else None
            wall, first = row.spreads["wall_s"], row.spreads["first_step_s"]
            cells = [
                runs,
                f"{_seconds(wall.median)} ({_seconds(first.median)})",
                _range(row.spreads["samples_per_s"], lambda v: f"{v:,.0f}"),
                _versus(row),
                f"{row.speedup:.2f}×" if row.speedup is not None else "—",
                _memory(row),
                f"{dev:.4f}" if dev is not None else "—",
                f"{f.final_loss:.4f}",
                _parity(row),
            ]
        else:
            cells = [runs] + ["—"] * 8
        lines.append("| " + " | ".join([f"`{row.method}`", *cells, notes.replace("|", "\\|")]) + " |")
    return lines


def render_markdown(result: BenchResult) -> str:
    s, m = result.settings, result.machine
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
    load = ", ".join(f"{x:g}" for x in m["load_average"])
    baseline = "the baseline"
    if s.get("baseline"):
        chosen = " (the fastest median of the methods that trained what `single` trained)"
        baseline = f"`{s['baseline']}`" + ("" if s.get("baseline_asked") else chosen)
    lines = [
        f"# paratrain bench: {s['task']}",
        "",
        f"`{' '.join(result.command)}`",
        "",
        f"{result.date} · {m['cpu_model']} ({m['cpu_cores']} cores, {m['memory_gib']} GiB)"
        + (f" · {m['gpu_count']}× {m['gpu_model']} ({m['gpu_memory_gib']} GiB), CUDA {m['cuda']}, NCCL {m['nccl']}" if m["gpu_count"] else " · no GPU")
        + f" · load average before the run {load}",
        "",
        f"{versions}",
        "",
        f"{s['steps']} optimizer steps × global batch {s['global_batch']} ({s['nproc']} processes for multi-process methods), "
        f"lr {s['lr']:g} constant, same initial weights and data order for all; samples/s after {s['warmup_steps']} warm-up steps; "
        f"memory: {'GPU max allocated per rank' if m['gpu_count'] else 'CPU peak RSS summed over ranks'}; "
        f"dev {result.metric} on all {s['dev_samples']} dev samples; loss parity: largest relative difference from "
        f"`single`'s per-step loss over the first {s['parity_steps']} steps (full precision must stay ≤ {TOLERANCE:g}); "
        "✗ also when a full-precision method later leaves `single` by more than two correct reductions of the "
        "same sums do (the note says where).",
        "",
        f"{s['repeats']} rounds, every method once per round, the order rotated each round"
        + (f" ({s['steps']} steps instead of {s['steps_asked']}, so that each measured window lasts ≥ {s['min_time_s']:g} s)"
           if s["steps"] != s["steps_asked"] else "")
        + ". Time and samples/s: the median over the runs, in brackets the slowest and the fastest; "
        f"a method is faster or slower than {baseline} "
        "only when the two ranges do not overlap (else indistinguishable; one run: not judged); beside the verdict, "
        "the method's samples/s over the baseline's in the same round, median (range).",
        "",
        *table_lines(result),
        "",
    ]
    return "\n".join(lines)


# ---- bench.json ---------------------------------------------------------------------------------
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


# ---- bench.png ----------------------------------------------------------------------------------
def render_png(result: BenchResult, path: Path) -> None:
    """Write ``bench.png`` to ``path``: samples/s and peak memory per method, side by side.

    Raises:
        MissingDependencyError: matplotlib is not installed (the ``bench`` extra).
    """
    matplotlib = require("matplotlib", "bench", "paratrain bench's chart")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.rows[::-1]  # first method on top
    names = [row.method for row in rows]
    speed = [row.spreads["samples_per_s"] if row.measured else None for row in rows]
    memory = [row.spreads["peak_memory_bytes"].scaled(1 / 2**20) if row.measured else None for row in rows]
    colors = ["#d62728" if not row.same_training else "#1f77b4" if row.precision == "32-true" else "#ff7f0e" for row in rows]
    s, m = result.settings, result.machine

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 0.45 * len(rows) + 2.2), sharey=True)
    for axis, spreads, values_of, title in (
        (left, speed, lambda row: [run.samples_per_s for run in row.measured_runs],
         "steady-state samples/s: median, range, one dot per run (higher is better)"),
        (right, memory, lambda row: [run.peak_memory_bytes / 2**20 for run in row.measured_runs],
         "peak memory, MiB: median and range (lower is better)"),
    ):
        medians = [spread.median if spread else 0.0 for spread in spreads]
        low = [spread.median - spread.low if spread else 0.0 for spread in spreads]
        high = [spread.high - spread.median if spread else 0.0 for spread in spreads]
        bars = axis.barh(names, medians, color=colors, xerr=[low, high], capsize=3, ecolor="#333333")
        for y, row in enumerate(rows):
            dots = values_of(row)
            axis.plot(dots, [y] * len(dots), "o", color="black", markersize=3, alpha=0.6)
        axis.set_title(title, fontsize=9)
        axis.grid(axis="x", alpha=0.3)
        top = max((spread.high for spread in spreads if spread), default=0.0) or 1.0
        axis.set_xlim(0, top * 1.3)
        for bar, row, spread in zip(bars, rows, spreads):
            label = (f"{spread.median:,.0f}" + (f" · {row.verdict}" if row.verdict and axis is left else "")) if spread else row.kind
            x = (spread.high if spread else 0.0) + top * 0.01
            axis.text(x, bar.get_y() + bar.get_height() / 2, label, va="center", fontsize=8,
                      color="black" if row.measured else "#888888")
    where = f"{m['gpu_count']}× {m['gpu_model']}" if m["gpu_count"] else f"{m['cpu_cores']}-core CPU, no GPU"
    figure.suptitle(f"paratrain bench · {s['task']} · {s['nproc']} processes · {s['repeats']} rounds · {s['steps']} steps × batch "
                    f"{s['global_batch']} · {where}\nblue: full precision, orange: mixed precision, "
                    "red: not the same training as single (see the notes)", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
