"""``RankTimes``: every rank's step time — data wait, compute, communication — at each log line, and the straggler.

Each rank times its phases with a :class:`~paratrain.diagnostics.step_phases.PhaseClock`; the log line's one
collective, which averaged the loss, now gathers ``[loss, steps, data, compute, communication, link]`` from every
rank instead (an all-gather of six numbers in place of an all-reduce of one), so the timings cost no collective of
their own. Rank 0 turns them into the per-rank curves of the trackers (TensorBoard's ``rank_*`` scalars), a
``ranks`` record in ``metrics.jsonl``, and the straggler lines (:mod:`paratrain.diagnostics.stragglers`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from paratrain import comm
from paratrain.diagnostics.step_phases import PhaseClock, take_link
from paratrain.diagnostics.stragglers import RankInterval, StragglerWatch, summary_line

if TYPE_CHECKING:
    from paratrain.loop.run_log import RunLog


class RankTimes:
    """Times this rank's steps from now on (``model``: the wrapped model, whose gradients end backward's compute).
    :meth:`gather` is collective; :meth:`report` and :meth:`close` are not."""

    def __init__(self, runtime: Any, model: torch.nn.Module) -> None:
        self._clock = PhaseClock()
        self._clock.watch(model)
        self._clock.start()
        self._hosts = [facts.host for facts in runtime.topology.ranks]
        self.watch = StragglerWatch()

    def gather(self, local_loss: torch.Tensor) -> tuple[float, list[RankInterval]]:
        """The mean of every rank's ``local_loss`` and every rank's interval since the last call. Collective."""
        steps, (data, compute, communication) = self._clock.take()
        mine = torch.tensor([float(local_loss), steps, data, compute, communication, take_link()], dtype=torch.float64)
        rows = comm.all_gather_rows(mine)
        ranks = [RankInterval(rank, self._hosts[rank] if rank < len(self._hosts) else "?", int(row[1]), *row[2:].tolist())
                 for rank, row in enumerate(rows)]
        return float(rows[:, 0].sum() / len(rows)), ranks

    def report(self, log: RunLog, step: int, ranks: list[RankInterval], samples_per_rank_step: float) -> None:
        """Every rank judges the interval; rank 0 writes the per-rank curves, the ``ranks`` record, and a straggler
        line when one appears, changes or recovers. Not collective."""
        lines = self.watch.observe(ranks, step)  # on every rank (the same timings): FitResult agrees everywhere
        if not log.is_main:
            return
        for line in lines:
            log.console(line)
            log.record("straggler", step, line=line)
        ms = {"data_ms": [round(r.per_step(r.data_s) * 1e3, 3) for r in ranks],
              "compute_ms": [round(r.per_step(r.compute_s) * 1e3, 3) for r in ranks],
              "communication_ms": [round(r.per_step(r.communication_s) * 1e3, 3) for r in ranks],
              "link_ms": [round(r.link_s * 1e3, 3) if r.link_s == r.link_s else None for r in ranks]}
        log.record("ranks", step, **ms)  # lists: metrics.jsonl only
        curves: dict[str, float] = {}
        for r in ranks:
            if r.steps and r.own_s > 0:
                curves[f"rank_samples_per_s/rank{r.rank}"] = samples_per_rank_step / r.own_s
            for name, values in ms.items():
                if values[r.rank] is not None:
                    curves[f"rank_{name}/rank{r.rank}"] = values[r.rank]
        log.trackers.log(curves, step)

    def summary(self) -> list[dict]:
        """The run's straggler episodes (the same on every rank)."""
        return self.watch.summary()

    def summary_lines(self) -> list[str]:
        return [summary_line(episode) for episode in self.watch.summary()]

    def close(self) -> None:
        self._clock.stop()
