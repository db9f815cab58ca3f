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
    speed = [row.figures.samples_per_s if row.measured else 0.0 for row in rows]
    memory = [row.figures.peak_memory_bytes / 2**20 if row.measured else 0.0 for row in rows]
    colors = ["#d62728" if row.parity_differs else "#1f77b4" if row.precision == "32-true" else "#ff7f0e" for row in rows]
    s, m = result.settings, result.machine

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 0.45 * len(rows) + 2.2), sharey=True)
    for axis, values, title, unit in ((left, speed, "steady-state samples/s (higher is better)", "{:,.0f}"),
                                      (right, memory, "peak memory, MiB (lower is better)", "{:,.0f}")):
        bars = axis.barh(names, values, color=colors)
        axis.set_title(title, fontsize=10)
        axis.grid(axis="x", alpha=0.3)
        top = max(values, default=0) or 1.0
        axis.set_xlim(0, top * 1.25)
        for bar, row, value in zip(bars, rows, values):
            label = unit.format(value) if row.measured else row.kind
            axis.text(value + top * 0.01, bar.get_y() + bar.get_height() / 2, label, va="center", fontsize=8,
                      color="black" if row.measured else "#888888")
    where = f"{m['gpu_count']}× {m['gpu_model']}" if m["gpu_count"] else f"{m['cpu_cores']}-core CPU, no GPU"
    figure.suptitle(f"paratrain bench · {s['task']} · {s['nproc']} processes · {s['steps']} steps × batch "
                    f"{s['global_batch']} · {where}\nblue: full precision, orange: mixed precision, "
                    "red: loss differs from single", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
