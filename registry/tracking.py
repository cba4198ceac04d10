"""MLflow tracking glue: one experiment, one nested run per stage, lineage tags, configs/curves/tables as artifacts.

    from forge.workspace import configure_environment
    from registry.tracking import StageContext, init_mlflow, log_config, log_curve
    client = init_mlflow(configure_environment())
    ctx = StageContext(tags={PROFILE_TAG: "tiny"})        # the recipe hands one to every stage
    with ctx.start_run("sft", {DATA_MD5_TAG: md5}) as run:
        log_config(cfg.sft)
        log_curve("loss", steps, losses, ylabel="loss")

Every stage run carries the lineage tags below, so a registered checkpoint can be traced to its code (git
commit), its data (DVC md5), its Prefect flow run and the model version it started from.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, RunTag
from mlflow.exceptions import MlflowException
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
from pydantic import BaseModel, ConfigDict, Field

from forge.workspace import REPO_ROOT, Workspace

EXPERIMENT = "forge"
LOGGED_ARTIFACTS_TAG = "mlflow.loggedArtifacts"  # which of a run's artifacts are tables (MLflow's UI reads it)

# Lineage tags (on runs and on model versions).
STAGE_TAG = "forge.stage"
PARENT_VERSION_TAG = "forge.parent_version"
DATA_MD5_TAG = "forge.data_md5"
RL_DATA_MD5_TAG = "forge.rl_data_md5"  # DVC's md5 of rl-data/ (on-policy filtered problems, rl-data.dvc)
GIT_COMMIT_TAG = "forge.git_commit"
FLOW_RUN_ID_TAG = "forge.flow_run_id"
PREFECT_URL_TAG = "forge.prefect_url"  # the Prefect run's page (flows/links.py)
PROFILE_TAG = "forge.profile"
LINEAGE_TAGS = (STAGE_TAG, PARENT_VERSION_TAG, DATA_MD5_TAG, GIT_COMMIT_TAG, FLOW_RUN_ID_TAG, PREFECT_URL_TAG,
                PROFILE_TAG)

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
PARAMS_PER_BATCH = 100  # MLflow's limit on params per log_batch call


def init_mlflow(ws: Workspace, tracking_uri: str | None = None) -> MlflowClient:
    """Point MLflow (tracking and registry) at the workspace's store and make the ``forge`` experiment current.

    Idempotent. The experiment's artifacts go under ``ws.mlflow_artifacts`` (MLflow's default would be
    ``./mlruns`` in whatever the cwd is). ``tracking_uri``, else an http(s) ``MLFLOW_TRACKING_URI``, overrides the
    workspace's SQLite store: a tracking server (a team's, ``forge stack``'s) stores the artifacts itself.
    """
    configured = os.environ.get("MLFLOW_TRACKING_URI", "")
    # A tracking server named in the environment wins (a team's, `forge stack`'s). Only a server: MLflow itself
    # writes whatever `set_tracking_uri` was last given into this variable, so a store URI there proves nothing.
    server_env = configured if configured.startswith(("http://", "https://")) else None
    uri = tracking_uri or server_env or ws.mlflow_uri
    server = uri.startswith(("http://", "https://"))  # a tracking server keeps the artifacts where it was told
    if uri.startswith("sqlite:"):
        ws.mlflow_dir.mkdir(parents=True, exist_ok=True)
    if not server:
        ws.mlflow_artifacts.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        try:
            client.create_experiment(EXPERIMENT, artifact_location=None if server else
                                     ws.mlflow_artifacts.resolve().as_uri())
        except MlflowException:  # another process created it between our check and our create
            pass
        experiment = client.get_experiment_by_name(EXPERIMENT)
    mlflow.set_experiment(experiment_id=experiment.experiment_id)
    return client


DVC_FILES = ("data.dvc", "rl-data.dvc")


def git_commit(root: Path | str = REPO_ROOT) -> str:
    """HEAD's commit of the checkout at ``root``, with ``+dirty`` when tracked files changed; "unknown" outside git.

    Untracked files do not count: data/, caches and run outputs live in the checkout without being code; nor do
    the DVC pointers (``data.dvc``, ``rl-data.dvc``), which every run rewrites.
    """

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        # The DVC pointers are Forge's own writes (each run versions its data): they do not make the code dirty.
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", *(f":(exclude){f}" for f in DVC_FILES))
    except (subprocess.SubprocessError, OSError):
        return "unknown"
    return f"{commit}+dirty" if dirty else commit


@contextmanager
def start_stage_run(
    name: str, *, parent_run_id: str | None = None, tags: dict[str, str] | None = None
) -> Iterator[mlflow.ActiveRun]:
    """A run for one recipe stage, nested under ``parent_run_id`` (or under the active run, if any).

    Tagged with the stage name and the git commit; ``tags`` adds the other lineage tags (data md5, flow run id,
    profile, parent model version) that the caller knows.
    """
    run_tags = {STAGE_TAG: name, **{k: str(v) for k, v in (tags or {}).items()}}
    if GIT_COMMIT_TAG not in run_tags:  # the recipe's lineage carries it, read once per run (two git calls, ~16 ms)
        run_tags[GIT_COMMIT_TAG] = git_commit()
    active = mlflow.active_run()
    if parent_run_id is None and active is not None:
        parent_run_id = active.info.run_id
    with mlflow.start_run(run_name=name, nested=active is not None, parent_run_id=parent_run_id, tags=run_tags) as run:
        yield run


class StageContext(BaseModel):
    """Where a stage logs: the MLflow run its own run nests under, and the lineage tags of the recipe run (flow run
    id, git commit, profile, data md5, ...) that every stage run and registered version carries.

    The recipe flow builds one and passes it down explicitly; it is bookkeeping, never part of a cache key
    (tasks/_cache.py leaves the ``ctx`` argument out)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parent_run_id: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)

    def nested(self, parent_run_id: str, tags: dict[str, str] | None = None) -> StageContext:
        """The context of stages that nest under ``parent_run_id`` (a phase's run), with ``tags`` added."""
        return StageContext(parent_run_id=parent_run_id, tags={**self.tags, **(tags or {})})

    def lineage(self, tags: dict[str, str] | None = None) -> dict[str, str]:
        """The recipe's lineage tags plus ``tags``: what a stage's run and its registered version carry."""
        return {**self.tags, **{k: str(v) for k, v in (tags or {}).items()}}

    @contextmanager
    def start_run(self, name: str, tags: dict[str, str] | None = None) -> Iterator[mlflow.ActiveRun]:
        """:func:`start_stage_run` under this context's parent run, tagged with its lineage plus ``tags``."""
        with start_stage_run(name, parent_run_id=self.parent_run_id, tags=self.lineage(tags)) as run:
            yield run


def _flatten(value, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for key, inner in value.items():
            out.update(_flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    text = value if isinstance(value, str) else json.dumps(value)
    return {prefix: text[:MAX_PARAM_CHARS]}


def log_config(cfg: BaseModel, artifact_file: str = "config.json", prefix: str = "") -> dict[str, str]:
    """Log a pydantic config as flat dotted params (``sft.curriculum``, ``base.hidden_size``) and as JSON.

    Lists stay one param (JSON text); the artifact keeps the whole config, beyond MLflow's param length limit.
    Returns the params logged.
    """
    data = cfg.model_dump(mode="json")
    params = _flatten(data, prefix)
    items = list(params.items())
    for i in range(0, len(items), PARAMS_PER_BATCH):
        mlflow.log_params(dict(items[i : i + PARAMS_PER_BATCH]))
    mlflow.log_dict(data, artifact_file)
    return params


def log_curve(name: str, steps: Sequence[float], values: Sequence[float], ylabel: str) -> str:
    """Plot ``values`` against ``steps`` and log the PNG as ``curves/<name>.png``; returns the artifact path."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state, safe from worker threads

    if len(steps) != len(values):
        raise ValueError(f"log_curve({name!r}): {len(steps)} steps but {len(values)} values")
    fig = Figure(figsize=(6, 4), dpi=100)
    ax = fig.add_subplot()
    ax.plot(list(steps), list(values), marker="." if len(values) < 50 else None)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(name)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    artifact = f"curves/{name}.png"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.png")
        fig.savefig(path, format="png")
        mlflow.log_artifact(path, artifact_path="curves")
    return artifact


def metrics_logger(step_offset: int = 0):
    """A ``log_metrics(metrics, step)`` callback for Forge's trainers (forge/ stays MLflow-free): every record goes
    to the active MLflow run at ``step + step_offset``."""

    def log(metrics: dict, step: int) -> None:
        mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step + step_offset)

    return log


def log_dataset(path: str | Path, name: str, digest: str, context: str) -> None:
    """The data the active run read, as an MLflow dataset input (the run page's Datasets panel): where it lies and
    DVC's md5 of it as the digest; no rows are copied."""
    import warnings

    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # two local-artifact source classes claim a path; both fit
        source = resolve_dataset_source(Path(path).resolve().as_uri())
    mlflow.log_input(MetaDataset(source, name=name, digest=digest), context=context)


def log_table(rows: list[dict], artifact_file: str, *, metrics: dict[str, float] | None = None) -> None:
    """Log rows (dicts, possibly with different keys) to the active run as an MLflow table artifact
    (``artifact_file`` ends .json), and ``metrics`` with it.

    Written as ``mlflow.log_table`` writes a table (``{"columns": [...], "data": [[...], ...]}``, the run's
    ``mlflow.loggedArtifacts`` tag naming it a table, so the MLflow UI and ``mlflow.load_table`` read it), in one
    artifact write and one batch of tag and metrics (one store call): ``mlflow.log_table`` goes through pandas and
    four store calls (list the run's artifacts, write, read the run, set the tag), most of a short evaluation's
    MLflow time (bench/recipe_profile.py). The run's list of tables is kept in this process, not read back from the store.
    A table already at ``artifact_file`` is replaced, not appended to."""
    if not artifact_file.endswith(".json"):
        raise ValueError(f"log_table: artifact_file must end with .json, got {artifact_file!r}")
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    table = {"columns": columns, "data": [[_json_value(row.get(c)) for c in columns] for row in rows]}
    try:
        text = json.dumps(table, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise MlflowException(f"log_table: {artifact_file}: a value is not JSON: {err}") from None
    active = mlflow.active_run()
    if active is None:
        raise MlflowException(f"log_table: {artifact_file}: no active run to log it to")
    run_id = active.info.run_id
    # Written through the run's artifact repository, found from the active run: mlflow.log_text reads the run back
    # from the store first to learn where its artifacts go (one store call less, ~8 ms on SQLite).
    repo = get_artifact_repository(active.info.artifact_uri, tracking_uri=mlflow.get_tracking_uri())
    folder, name = os.path.split(artifact_file)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / name
        local.write_text(text, encoding="utf-8")
        repo.log_artifact(str(local), folder or None)
    # The run's tables: as the run stood when this process started (or resumed) it, plus those logged since.
    logged = _TABLES.setdefault(run_id, json.loads(active.data.tags.get(LOGGED_ARTIFACTS_TAG, "[]")))
    entry = {"path": artifact_file, "type": "table"}
    tags = []
    if entry not in logged:
        logged.append(entry)
        tags.append(RunTag(LOGGED_ARTIFACTS_TAG, json.dumps(logged)))
    now = int(time.time() * 1000)
    MlflowClient().log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()],
                             tags=tags)


_TABLES: dict[str, list[dict]] = {}  # run id -> its tables (its loggedArtifacts tag), kept rather than read back


def _json_value(value):
    """A table cell as JSON has it: NaN and infinities as null (as pandas writes them), numpy scalars as numbers."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value

