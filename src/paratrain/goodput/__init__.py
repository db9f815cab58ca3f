"""Goodput: where a run's wall time went, attempt by attempt.

* :mod:`.ledger` — rank 0's clock of one attempt (start-up, training, save blocking, evaluation,
  redone steps, the rest), written to ``goodput.jsonl`` beside the checkpoints;
* :mod:`.accounting` — the records summed over attempts, with the restart/recovery gaps between them;
* :mod:`.interval` — the Young/Daly checkpoint interval from a measured save cost and a failure rate;
* :mod:`.timeline` — the attempts, failures, saves, evaluations and redone spans as a PNG.
"""
