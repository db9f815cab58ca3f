"""``bench.png``: samples/s and peak memory per method, side by side, readable at a glance."""

from __future__ import annotations

from pathlib import Path

from paratrain.bench.results import BenchResult
from paratrain.errors import require


def render_png(result: BenchResult, path: Path) -> None:
    """Raises MissingDependencyError when matplotlib is not installed."""
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
