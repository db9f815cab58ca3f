"""What the commands start in every worker process (``python -m paratrain.cli.workers.NAME``).

They sit with the commands because they are entry points: each reads its command's
arguments and drives the layers below it, as ``cli/*_cmd.py`` does in the launcher.
"""
