"""``paratrain predict RUN`` imports the code a run folder's ``task.json`` names only when told.

Real files: a received run folder whose ``task.json`` names a Python file of its own. Before, predict
imported it (the file ran) before deciding anything.
"""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from paratrain.errors import ConfigError
from paratrain.tasks import load_task
from tests.support import paratrain_cmd

EVIL = """\
from pathlib import Path
Path(__file__).with_name("it-ran").write_text("yes")
TASK = None
"""


def _received_run(tmp_path, sha256: str | None = None):
    run = tmp_path / "run"
    run.mkdir(parents=True)
    (run / "evil.py").write_text(EVIL)
    record = {"task": "evil", "options": {}, "label_names": [], "reference": f"{run / 'evil.py'}:TASK"}
    if sha256:
        record["reference_sha256"] = sha256
    (run / "task.json").write_text(json.dumps(record))
    return run


def test_a_run_folders_task_file_is_named_and_not_imported_without_trust(tmp_path, cli_env):
    run = _received_run(tmp_path)
    digest = hashlib.sha256(EVIL.encode()).hexdigest()
    refused = subprocess.run(paratrain_cmd("predict", str(run), "some text"), env=cli_env, capture_output=True,
                             text=True, timeout=60, check=False)
    assert refused.returncode != 0 and not (run / "it-ran").exists()
    assert f"names Python code to import: {run / 'evil.py'} (sha256 {digest[:16]}" in refused.stderr
    assert "--trust-task-code" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1

    with pytest.raises(ConfigError, match="not the task file the run .* trained with"):
        load_task(_received_run(tmp_path / "changed", sha256="0" * 64), trust_code=True)  # edited since
    assert not (tmp_path / "changed" / "run" / "it-ran").exists()
