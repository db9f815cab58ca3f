"""``paratrain bench``: train one task with every method, side by side, in one table (time, samples/s,
speed-up, memory, dev accuracy, loss parity), for any model.

Each method (``methods.py``) is a script under ``scripts/`` written the way its
library's own documentation writes it, started in its own process tree by its own
launcher (``runner.py``). Every method gets the same ``BenchSpec`` (``spec.py``):
the same initial weights, data order, global batch, optimizer and number of
steps (``workload.py``). The ranks write their measurements (``record.py``); the
parent turns them into figures (``figures.py``, ``parity.py``), evaluates each
method's final weights on the whole dev set (``evaluate.py``) and writes
``bench.md``, ``bench.json`` and ``bench.png`` (``reports.py``).
"""
