"""One training script per method, each written the way its library's own documentation writes it.

Every script is started as ``<launcher> script.py SPEC_FILE`` and trains
``Workload.from_argv()`` for ``spec.steps`` optimizer steps.
"""
