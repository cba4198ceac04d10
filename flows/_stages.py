"""One recipe run as its stages see it, passed explicitly from the recipe flow down to every stage.

A :class:`RecipeRun` holds where the stages log (a :class:`registry.tracking.StageContext`: the MLflow run they
nest under and the lineage tags) and the run summary that ``forge status`` prints. Flows call their tasks through
:meth:`RecipeRun.stage`, by keyword, with the typed results of earlier stages (``forge/stages.py``):

    with RecipeRun.start(profile="tiny", flow_run_id=id, workspace=ws) as run:
        with run.phase("sft", {DATA_MD5_TAG: mix.data_md5}) as sft:
            ckpt = sft.stage("sft-1-ctx-256", sft_stage_task, stage=cfg.sft.curriculum[0], init=base, data=mix)

The summary (``$FORGE_HOME/runs/latest.json`` and ``runs/<flow run id>.json``) records per stage its state,
duration, CPU seconds and peak memory (forge/usage.py), MLflow run, registered version and headline metrics; it is
rewritten atomically after every stage, so a killed run leaves an honest record of what had finished.

A cached result is handed on only while the files it points at are the ones its run wrote. Output folders are named
by a stage's inputs (and some by the profile alone: ``data/mixes/<name>``), its cache key by its inputs *and* its
code, so a run of other code writes the same folder under another key; going back to the first code would then hit
a cache entry whose folder holds the other run's model. Each computed stage therefore records, per path it wrote,
the key it wrote it under (``$FORGE_HOME/written-by/``), and a cache hit whose paths were written since under
another key is recomputed, as one whose paths are gone is.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flows.links import (
    background,
    flow_run_url,
    logs_to_flow_run,
    mlflow_run_url,
    recipe_run_name,
    stage_artifact,
    tag_flow_run,
)
from forge.atomic import atomic_write_text
from forge.fanout import fans_out
from forge.hashing import value_digest
from forge.stages import Checkpoint, DataMix, Release, StageResult
from forge.usage import UsageMeter
from forge.workspace import DiskFullError, Workspace, disk_full, disk_full_message
from registry.tracking import (
    FLOW_RUN_ID_TAG,
    GIT_COMMIT_TAG,
    PREFECT_URL_TAG,
    PROFILE_TAG,
    STAGE_TAG,
    StageContext,
    git_commit,
    start_stage_run,
)

log = logging.getLogger("forge")


class RunSummary:
    """The record of one run that ``forge status`` reads, written after every change."""

    def __init__(self, runs_dir: Path, flow_run_id: str, profile: str, mlflow_run_id: str | None):
        self.path = runs_dir / "latest.json"
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
        # One line: json's C encoder (an indent takes the pure-Python one, ~12 ms for the tiny recipe's 35 stages;
        # `forge status --json` prints it indented). Atomic, not fsynced: a status record rewritten twice a stage
        # (forge/atomic.py says what that gives up).
        text = json.dumps(self.data, default=str)
        atomic_write_text(self.path, text, durable=False)
        atomic_write_text(self.path.parent / f"{self.data['flow_run_id']}.json", text, durable=False)

    def stage(self, name: str, **fields: Any) -> None:
        self.data["stages"].setdefault(name, {}).update(fields)
        self.save()

    def note(self, **fields: Any) -> None:
        """Run-level facts as they become known (name, links, data md5, promotion outcome)."""
        self.data.update(fields)
        self.save()

    def finish(self, state: str) -> None:
        self.data.update(state=state, finished=time.time())
        self.save()


class RecipeRun:
    """Where a run's stages log and what they report to; see the module docstring.

    Args:
        ctx: the MLflow parent run and lineage tags handed to every task that takes a ``ctx`` argument.
        summary: the run summary; None for a flow run outside the recipe (the scheduled evaluation).
    """

    def __init__(self, ctx: StageContext, summary: RunSummary | None = None) -> None:
        self.ctx = ctx
        self.summary = summary

    @classmethod
    @contextmanager
    def start(cls, *, profile: str, flow_run_id: str, workspace: Workspace) -> Iterator[RecipeRun]:
        """The recipe's own MLflow run (every stage run nests under it) and its summary, finished either way."""
        url = flow_run_url(flow_run_id)
        lineage = {GIT_COMMIT_TAG: git_commit(workspace.root), FLOW_RUN_ID_TAG: flow_run_id, PREFECT_URL_TAG: url,
                   PROFILE_TAG: profile}
        name = recipe_run_name(profile, flow_run_id)
        tag_flow_run(flow_run_id, f"profile:{profile}")
        with (logs_to_flow_run(flow_run_id),
              start_stage_run(name, tags={**lineage, STAGE_TAG: "recipe",
                                          "mlflow.note.content": f"Prefect run [{name}]({url})"}) as mlflow_run):
            log.info("recipe %s: MLflow run %s", name, mlflow_run_url(mlflow_run.info.run_id))
            summary = RunSummary(workspace.home / "runs", flow_run_id, profile, mlflow_run.info.run_id)
            summary.note(name=name, prefect_url=url, mlflow_url=mlflow_run_url(mlflow_run.info.run_id))
            try:
                yield cls(StageContext(parent_run_id=mlflow_run.info.run_id, tags=lineage), summary)
            except BaseException:
                summary.finish("failed")
                raise
            finally:
                background.flush()  # the stages' artifacts are on the run before it ends
            summary.finish("completed")

    def record_data(self, data: DataMix) -> None:
        """The data version the run trains on: a tag on the Prefect run and a field of the summary."""
        tag_flow_run(self.ctx.tags[FLOW_RUN_ID_TAG], f"data:{data.data_md5[:8]}")
        self.summary.note(data_md5=data.data_md5)

    def record_release(self, release: Release) -> None:
        self.summary.note(promotion={"outcome": release.outcome, "model": release.model_name,
                                     "version": release.version, "reasons": release.reasons})

    @contextmanager
    def phase(self, name: str, tags: dict[str, str] | None = None) -> Iterator[RecipeRun]:
        """A phase (sft, rl, ...): one MLflow run its stages nest under; ``tags`` (e.g. the data md5) go on the
        phase's run and on every stage run and version inside it."""
        with self.ctx.start_run(name, {STAGE_TAG: name, **(tags or {})}) as mlflow_run:
            yield RecipeRun(self.ctx.nested(mlflow_run.info.run_id, tags), self.summary)

    def stage(self, name: str, task: Any, /, **inputs: Any) -> Any:
        """Run ``task`` as stage ``name`` with keyword ``inputs`` (plus this run's ``ctx`` when the task takes one):
        record state, time and result in the summary, and recompute a cache hit whose files are gone."""
        task, inputs, started = self._begin(name, task, inputs)
        meter = UsageMeter()
        try:
            state = task(return_state=True, **inputs)
            return self._finish(name, task, inputs, started=started, state=state, meter=meter)
        finally:
            meter.stop()  # a failed stage's sampler ends too

    def stages(self, calls: list[tuple[str, Any, dict[str, Any]]]) -> list[Any]:
        """Independent stages ``(name, task, inputs)``: submitted together when the flow runs on a Ray cluster
        (forge/fanout.py), else run one after another; either way each is recorded as :meth:`stage` records it."""
        if not fans_out():
            return [self.stage(name, task, **inputs) for name, task, inputs in calls]
        submitted = []
        for name, task, inputs in calls:
            task, inputs, started = self._begin(name, task, inputs)
            submitted.append((name, task, inputs, started, task.submit(**inputs)))
        results = []
        for name, task, inputs, started, future in submitted:
            future.wait()
            results.append(self._finish(name, task, inputs, started=started, state=future.state))
        return results

    def _begin(self, name: str, task: Any, inputs: dict[str, Any]) -> tuple[Any, dict[str, Any], float]:
        if "ctx" in inspect.signature(task.fn).parameters:
            inputs = {**inputs, "ctx": self.ctx}
        task = task.with_options(task_run_name=name)  # the Prefect UI names the run after the stage
        started = time.time()
        self._record(name, state="running", started=started)
        log.info("stage %s: started", name)
        return task, inputs, started

    def _finish(self, name: str, task: Any, inputs: dict[str, Any], *, started: float, state: Any,
                meter: UsageMeter | None = None) -> Any:
        """Record the stage's outcome; with a ``meter`` (forge/usage.py, a stage run in this process) what it cost,
        a recomputed cache hit included."""
        try:
            result = state.result()
        except Exception as err:
            seconds = round(time.time() - started, 2)
            if not disk_full(err):  # what `forge status` shows for the stage: failed, and why
                self._record(name, state="failed", seconds=seconds, error=f"{type(err).__name__}: {err}"[:1000])
                raise
            message = disk_full_message(Workspace.from_env())
            self._record(name, state="failed", seconds=seconds, error=message)
            raise DiskFullError(f"stage {name}: {message}") from err
        cached = state.name == "Cached"
        if isinstance(result, StageResult):
            why = stale(result, result_key(state)) if cached else None
            if why:
                log.warning("stage %s: the cached result %s; recomputing", name, why)
                state = task.with_options(refresh_cache=True)(return_state=True, **inputs)
                result, cached = state.result(), False
            if not cached:
                record_writer(result, result_key(state), since=started)
        seconds = time.time() - started
        log.info("stage %s: %s in %.1f s", name, "cached" if cached else "done", seconds)
        fields: dict[str, Any] = {"state": "cached" if cached else "completed", "seconds": round(seconds, 2),
                                  **(meter.stop() if meter else {})}
        if isinstance(result, StageResult):
            fields.update(run_id=result.run_id, metrics=result.metrics)
        if isinstance(result, Checkpoint) and result.version:
            fields["version"] = result.version
        self._record(name, **fields)
        if flow_run_id := self.ctx.tags.get(FLOW_RUN_ID_TAG):  # a run of ours (not a bare test context)
            stage_artifact(flow_run_id, state.state_details.task_run_id, name, fields,
                           model_name=result.model_name if isinstance(result, Checkpoint) else None)
        return result

    def _record(self, name: str, **fields: Any) -> None:
        if self.summary is not None:
            self.summary.stage(name, **fields)


def result_key(state: Any) -> str | None:
    """The cache key a task's result is stored under (Prefect names the stored record after it); None for a task
    that keeps no result (``uncached_task``)."""
    storage_key = getattr(getattr(state.data, "metadata", None), "storage_key", None)
    return os.path.basename(str(storage_key)) if storage_key else None


def _writers_file(path: str) -> Path:
    return Workspace.from_env().written_by / f"{value_digest(str(Path(path).resolve()), length=32)}.json"


def _writers(path: str) -> list[str]:
    """The cache keys ``path`` was written under, the latest last."""
    try:
        return json.loads(_writers_file(path).read_text())["keys"]
    except (FileNotFoundError, ValueError, KeyError):
        return []


MAX_WRITERS = 64  # keys remembered per path: enough for every version of a stage a user goes back and forth between


def record_writer(result: StageResult, key: str | None, *, since: float) -> None:
    """Record ``key`` as the latest writer of each of ``result``'s paths that this stage wrote (it or a file in it
    modified since the stage started; a path it only hands on, another stage's, is left as it was)."""
    if key is None:
        return
    for path in result.paths():
        if _last_modified(path) >= since:
            keys = [k for k in _writers(path) if k != key][-(MAX_WRITERS - 1):] + [key]
            # not durable: a record lost in a crash only means a hit is not checked, as before records existed
            atomic_write_text(_writers_file(path), json.dumps({"path": path, "keys": keys}) + "\n", durable=False)


def _last_modified(path: str) -> float:
    """The newest modification time of ``path`` and, for a folder, of everything in it (a file rewritten in place
    leaves its folder's own time as it was); 0 for a path that is gone."""
    try:
        newest = os.stat(path).st_mtime
    except FileNotFoundError:
        return 0.0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                newest = max(newest, os.stat(os.path.join(folder, name)).st_mtime)
    return newest


def stale(result: StageResult, key: str | None) -> str | None:
    """Why a cached ``result`` (stored under ``key``) cannot be handed on, or None: a path it points at is gone, or
    this key wrote it once and a run under another key (other code or other inputs naming the same folder) wrote it
    since. A path the result only hands on, which another stage wrote, is that stage's to check."""
    if missing := result.missing():
        return f"points at missing files ({missing[0]})"
    for path in result.paths() if key else ():
        writers = _writers(path)
        if key in writers and writers[-1] != key:
            return f"points at {path}, written since by another run (other code or inputs naming the same folder)"
    return None
