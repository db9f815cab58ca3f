"""The run's timeline as a PNG: one row per attempt, coloured by what its time went to.

Each attempt is a bar from its launch to its last record: start-up, then training (redone steps in
their own colour), with its saves and evaluations marked where they happened, and a cross where it
failed; the gap before the next attempt is the restart/recovery wait. matplotlib (the ``bench`` and
``test`` extras) draws it.
"""

from __future__ import annotations

from pathlib import Path

from paratrain.errors import require
from paratrain.goodput.accounting import Account

COLOURS = {"startup": "#9e9e9e", "train": "#2e7d32", "redone": "#ef6c00", "save": "#1565c0", "eval": "#8e24aa",
           "recovery": "#d32f2f", "rest": "#cfd8dc"}


def draw(run: Account, path: Path, title: str = "") -> Path:
    """Write the timeline of ``run`` to ``path`` (PNG); return it.

    Raises:
        MissingDependencyError: matplotlib is not installed (``pip install 'paratrain[bench]'``).
    """
    require("matplotlib", "bench", "the goodput timeline")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    t0 = run.start
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.45 * len(run.attempts)))
    for row, attempt in enumerate(run.attempts):
        y = len(run.attempts) - 1 - row
        recovery = attempt.seconds.get("recovery", 0.0) if row else 0.0
        launch = attempt.origin
        if recovery:  # the wait before this attempt's launch
            ax.barh(y, recovery, left=launch - recovery - t0, color=COLOURS["recovery"], height=0.5)
        startup_end = launch + attempt.seconds.get("startup", 0.0)
        ax.barh(y, startup_end - launch, left=launch - t0, color=COLOURS["startup"], height=0.5)
        ax.barh(y, attempt.end - startup_end, left=startup_end - t0, color=COLOURS["train"], height=0.5)
        if attempt.ended and attempt.seconds.get("rest"):  # the end after the last step (a close estimate: most of it)
            rest = attempt.seconds["rest"]
            ax.barh(y, rest, left=attempt.end - rest - t0, color=COLOURS["rest"], height=0.5)
        if attempt.redone is not None:
            ax.barh(y, attempt.redone["end"] - startup_end, left=startup_end - t0, color=COLOURS["redone"], height=0.5)
        elif attempt.seconds.get("redone"):  # failed again while still redoing
            ax.barh(y, attempt.seconds["redone"], left=startup_end - t0, color=COLOURS["redone"], height=0.5)
        for kind in ("saves", "evals"):
            colour = COLOURS["save" if kind == "saves" else "eval"]
            for record in getattr(attempt, kind):
                width = max(record["end"] - record["start"], run.wall / 2000)
                ax.barh(y, width, left=record["start"] - t0, color=colour, height=0.8)
        if not attempt.ended:
            ax.plot([attempt.end - t0], [y], marker="x", color="black", markersize=9, mew=2)
    ax.set_yticks(range(len(run.attempts)), [f"attempt {a.number}" for a in reversed(run.attempts)])
    ax.set_xlabel("seconds since the first launch")
    ax.set_xlim(0, run.wall * 1.01)
    ax.set_title(title or f"goodput {run.goodput:.1%} over {run.wall:.0f} s, {len(run.attempts)} attempt(s)")
    labels = {"startup": "start-up", "train": "training", "redone": "redone", "save": "save (blocking)",
              "eval": "evaluation", "recovery": "restart wait", "rest": "the rest"}
    handles = [Patch(color=COLOURS[k], label=v) for k, v in labels.items()]
    handles.append(plt.Line2D([], [], marker="x", color="black", linestyle="", label="failure"))
    fig.legend(handles=handles, loc="lower center", ncol=8, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.5 / fig.get_figheight(), 1, 1))
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
