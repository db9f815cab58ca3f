"""MLflow: one MLflow run per paratrain run, continued by id on resume; metrics, params, the final weights.

Where it logs is MLflow's own choice, as for any MLflow user: ``MLFLOW_TRACKING_URI`` (a server
``http://host:5000``, a file store ``file:///path``, a database), else MLflow's default; the experiment
is ``MLFLOW_EXPERIMENT_NAME``, else ``paratrain``. A server is asked for ``/health`` before the run
starts, so an unreachable one is one line at start-up; MLflow's request retries are bounded (unless
set) so a server lost mid-run costs seconds, not minutes of backoff.
"""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path
from typing import Any

from paratrain.trackers.api import RunInfo, Tracker, register

DEFAULT_EXPERIMENT = "paratrain"
PARAM_LIMIT = 6000  # MLflow's longest param value


@register
class MlflowTracker(Tracker):
    name = "mlflow"
    package = "mlflow"
    extra = "mlflow"
    has_artifacts = True

    def open(self, run: RunInfo) -> str | None:
        # MLflow retries a failed request 7 times with exponential backoff (minutes); a tracker must not stall training.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        import mlflow
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = mlflow.get_tracking_uri()
        if uri.startswith(("http://", "https://")):
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5):  # raises when unreachable
                pass
        self._client = client = MlflowClient(uri)
        self.where = uri
        params = {key: str(value)[:PARAM_LIMIT] for key, value in run.config.items()}
        if run.run_id is not None:
            existing = client.get_run(run.run_id)  # raises when the store no longer has it
            self._run_id = run.run_id
            client.update_run(self._run_id, status="RUNNING")
            # MLflow refuses to change a param: new ones are logged, changed ones become tags.
            old = existing.data.params
            params, changed = ({k: v for k, v in params.items() if k not in old},
                               {f"changed_on_resume.{k}": v for k, v in params.items() if k in old and old[k] != v})
            for key, value in changed.items():
                client.set_tag(self._run_id, key, value)
        else:
            experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", DEFAULT_EXPERIMENT)
            experiment = client.get_experiment_by_name(experiment_name)
            experiment_id = experiment.experiment_id if experiment else client.create_experiment(experiment_name)
            self._run_id = client.create_run(experiment_id, run_name=run.name,
                                             tags={"paratrain.run_dir": str(run.directory)}).info.run_id
        if params:
            client.log_batch(self._run_id, params=[Param(k, v) for k, v in params.items()])
        return self._run_id

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._client.log_batch(self._run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])

    def summary(self, values: dict[str, Any], step: int) -> None:
        super().summary(values, step)
        for key, value in values.items():
            if isinstance(value, str) and value:
                self._client.set_tag(self._run_id, f"summary.{key}", value[:PARAM_LIMIT])

    def artifact(self, path: Path) -> None:
        self._client.log_artifact(self._run_id, str(path))

    def close(self, failed: bool = False) -> None:
        self._client.set_terminated(self._run_id, status="FAILED" if failed else "FINISHED")
