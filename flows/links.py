"""What joins a Prefect run and its MLflow runs for the person looking at either: run names, tags, links, the
run's log lines and one artifact per stage.

Links point at the servers the run talks to when they are servers (``PREFECT_API_URL``, an http
``MLFLOW_TRACKING_URI``); with the embedded stores they point where ``forge ui`` serves the same home
(127.0.0.1:4200 and :5000), so a link from a finished run opens once ``forge ui`` is up.
"""

from __future__ import annotations

import contextvars
import logging
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from forge.workspace import MLFLOW_UI_PORT, PREFECT_UI_PORT

log = logging.getLogger("forge")


def prefect_ui() -> str:
    from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL

    if ui := PREFECT_UI_URL.value():
        return ui.rstrip("/")
    if api := PREFECT_API_URL.value():
        return api.rstrip("/").removesuffix("/api")
    return f"http://127.0.0.1:{PREFECT_UI_PORT}"


def mlflow_ui() -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else f"http://127.0.0.1:{MLFLOW_UI_PORT}"


def flow_run_url(flow_run_id: str) -> str:
    return f"{prefect_ui()}/runs/flow-run/{flow_run_id}"


def mlflow_run_url(run_id: str) -> str:
    """The run's page by the MLflow UI's direct route, which the UI turns into the run's page in its experiment
    (``#/experiments/<id>/runs/<run>``, checked in Chromium against MLflow 3.17's UI): no store call to look the
    experiment up, which cost each stage's artifact ~20 ms of SQLite time (bench/recipe_profile.py)."""
    return f"{mlflow_ui()}/#/runs/{run_id}"


def model_version_url(name: str, version: str) -> str:
    return f"{mlflow_ui()}/#/models/{name}/versions/{version}"


def recipe_run_name(profile: str, flow_run_id: str) -> str:
    """``recipe·tiny·1a2b3c4d``: the same name on the Prefect run and on its MLflow parent run."""
    return f"recipe·{Path(profile).stem}·{flow_run_id[:8]}"


def name_recipe_run() -> str:
    """The Prefect flow-run name of a recipe run (called by Prefect when the run starts)."""
    from prefect.runtime import flow_run

    return recipe_run_name(str(flow_run.parameters.get("profile", "tiny")), str(flow_run.id))


def name_phase_run() -> str:
    """``sft·1a2b3c4d``: a phase's subflow run named after the run it belongs to (the recipe's short id)."""
    from prefect.runtime import flow_run

    return f"{flow_run.flow_name}·{flow_run.root_flow_run_id[:8]}"


def tag_flow_run(flow_run_id: str, *tags: str) -> None:
    """Add ``tags`` to the Prefect run (its page and the runs list filter by them)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_id)
        client.update_flow_run(flow_run_id, tags=sorted({*run.tags, *tags}))


class _ToRun(logging.Filter):
    """Files a record under ``flow_run_id`` (and the task running, if any) rather than under the subflow it was
    logged in, so the run's page shows every line."""

    def __init__(self, flow_run_id: str) -> None:
        super().__init__()
        self.flow_run_id = flow_run_id

    def filter(self, record: logging.LogRecord) -> bool:
        from prefect.context import TaskRunContext

        record.flow_run_id = self.flow_run_id
        if (task := TaskRunContext.get()) is not None:
            record.task_run_id = task.task_run.id
        return True


@contextmanager
def logs_to_flow_run(flow_run_id: str) -> Iterator[None]:
    """Send Forge's INFO lines (stage starts and ends, training steps with loss / reward / ETA) to the Prefect
    run ``flow_run_id``'s logs while the block runs, besides wherever they already go."""
    from prefect.logging.handlers import APILogHandler

    forge_log = logging.getLogger("forge")
    handler = APILogHandler(level=logging.INFO)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(_ToRun(flow_run_id))
    level = forge_log.level
    if forge_log.getEffectiveLevel() > logging.INFO:  # a worker's process leaves it at the root's WARNING
        forge_log.setLevel(logging.INFO)
    forge_log.addHandler(handler)
    try:
        yield
    finally:
        handler.flush()  # the last lines reach the run before it ends
        forge_log.removeHandler(handler)
        forge_log.setLevel(level)


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


BACKGROUND_THREAD = "forge-prefect-calls"


class _Background:
    """Prefect API calls no stage waits on (the stages' artifacts): one daemon thread runs them in order, each in
    the context (Prefect settings, client) of the code that handed it over; :meth:`flush` waits for them. A call
    takes ~50 ms of the server's time (bench/recipe_profile.py counted it in every stage's wall time); one that
    fails is logged, not raised: a missing summary card must not fail a trained stage."""

    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name=BACKGROUND_THREAD, daemon=True)
                self._thread.start()
        self._queue.put((contextvars.copy_context(), fn, args, kwargs))

    def _work(self) -> None:
        while True:
            context, fn, args, kwargs = self._queue.get()
            try:
                context.run(fn, *args, **kwargs)
            except Exception as err:  # noqa: BLE001 — reported, and the run goes on
                log.warning("could not record %s on the Prefect run: %s", fn.__name__, err)
            finally:
                self._queue.task_done()

    def flush(self, timeout: float = 60.0) -> None:
        """Wait until every call handed over has run (at most ``timeout`` seconds: a server that stopped answering
        must not hold the run's end)."""
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                if (left := deadline - time.monotonic()) <= 0:
                    log.warning("%d stage artifact(s) not yet on the Prefect run after %.0f s; not waiting longer",
                                self._queue.unfinished_tasks, timeout)
                    return
                self._queue.all_tasks_done.wait(left)


background = _Background()


def stage_artifact(flow_run_id: str, task_run_id: Any, stage: str, fields: dict[str, Any], *,
                   model_name: str | None = None) -> None:
    """Put a markdown artifact on the Prefect run ``flow_run_id`` (and the stage's task run) for one finished stage,
    in the background (:data:`background`; the recipe flushes it when it ends): its state and time, links to its
    MLflow run and registered version, and its headline metrics as a table."""
    background.submit(_create_stage_artifact, flow_run_id=flow_run_id, task_run_id=task_run_id, stage=stage,
                      fields=dict(fields), model_name=model_name)


def _create_stage_artifact(flow_run_id: str, task_run_id: Any, stage: str, fields: dict[str, Any], *,
                           model_name: str | None = None) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import ArtifactCreate

    lines = [f"### {stage}", "", f"{fields['state']} in {fields['seconds']:.1f} s"]
    if run_id := fields.get("run_id"):
        lines.append(f"· [MLflow run]({mlflow_run_url(run_id)})")
    if model_name and (version := fields.get("version")):
        lines.append(f"· [{model_name} v{version}]({model_version_url(model_name, version)})")
    if metrics := fields.get("metrics"):
        lines += ["", "| metric | value |", "|---|---|", *(f"| {k} | {_number(v)} |" for k, v in metrics.items())]
    key = re.sub(r"[^a-z0-9-]+", "-", f"stage-{stage}".lower()).strip("-")
    with get_client(sync_client=True) as client:
        client.create_artifact(ArtifactCreate(key=key, type="markdown", data="\n".join(lines),
                                              description=f"stage {stage}", flow_run_id=flow_run_id,
                                              task_run_id=task_run_id))
