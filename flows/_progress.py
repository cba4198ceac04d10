"""Stage bookkeeping shared by the flows: run a task, note whether it came from cache, keep a run summary.

The summary (``$FORGE_HOME/runs/latest.json``) is what ``forge status`` prints: per stage its state, duration,
MLflow run and registered version. It is rewritten atomically after every stage, so a killed run leaves an
honest record of what had finished.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from forge.atomic import atomic_write_text
from forge.workspace import Workspace

log = logging.getLogger("forge")


class RunSummary:
    def __init__(self, flow_run_id: str, profile: str, mlflow_run_id: str | None):
        self.path = Workspace.from_env().home / "runs" / "latest.json"
        self.data: dict[str, Any] = {
            "flow_run_id": flow_run_id,
            "profile": profile,
            "pid": os.getpid(),
            "mlflow_run_id": mlflow_run_id,
            "started": time.time(),
            "state": "running",
            "stages": {},
        }
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps(self.data, indent=2, default=str))
        archive = self.path.parent / f"{self.data['flow_run_id']}.json"
        atomic_write_text(archive, json.dumps(self.data, indent=2, default=str))

    def stage(self, name: str, **fields: Any) -> None:
        self.data["stages"].setdefault(name, {}).update(fields)
        self.save()

    def finish(self, state: str) -> None:
        self.data.update(state=state, finished=time.time())
        self.save()


_CURRENT: RunSummary | None = None


def set_summary(summary: RunSummary | None) -> None:
    global _CURRENT
    _CURRENT = summary


def _outputs_exist(result: Any) -> bool:
    if isinstance(result, dict):
        return all(Path(result[k]).exists() for k in ("model_dir", "mix_dir") if k in result)
    if isinstance(result, str) and result.startswith("/"):
        return Path(result).exists()
    return True


def run_stage(name: str, task: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``task`` as stage ``name``: record state and time; recompute a cache hit whose files are gone."""
    started = time.time()
    if _CURRENT:
        _CURRENT.stage(name, state="running", started=started)
    log.info("stage %s: started", name)
    state = task(*args, return_state=True, **kwargs)
    result = state.result()
    cached = state.name == "Cached"
    if cached and not _outputs_exist(result):
        log.warning("stage %s: cached result points at missing files; recomputing", name)
        state = task.with_options(refresh_cache=True)(*args, return_state=True, **kwargs)
        result, cached = state.result(), False
    seconds = time.time() - started
    log.info("stage %s: %s in %.1f s", name, "cached" if cached else "done", seconds)
    if _CURRENT:
        fields = {"state": "cached" if cached else "completed", "seconds": round(seconds, 2)}
        if isinstance(result, dict):
            fields.update({k: result[k] for k in ("run_id", "version") if k in result})
        _CURRENT.stage(name, **fields)
    return result
