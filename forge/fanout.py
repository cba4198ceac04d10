"""Independent stages fanned out on a Ray cluster (docs/architecture.md, "Team deployment").

When a profile names ``cluster.ray_address``, the flows that hold independent stages (deep-search synthesis, one
task per head-entity shard; the evaluation matrix, one task per suite) run with prefect-ray's ``RayTaskRunner``:
``RecipeRun.stages`` submits every stage at once, each runs in a Ray worker process, reports to the same Prefect
API and writes into the same checkout and home, so the files are the ones an in-process run writes (same code,
same seeds). Ray nodes must
see this checkout and home at the same paths: one machine, or a volume every node mounts.

    synthesize = on_cluster(synthesize_search, config.cluster)   # the flow as is when no cluster is named
    shards = run.stages([(name, task, inputs), ...])             # submitted together when fans_out()
"""

from __future__ import annotations

import logging
import os
from typing import Any

from forge.config import ClusterConfig
from forge.workspace import REPO_ROOT, Workspace

# What a Ray worker needs of this process's environment: where the checkout, home, Prefect API, MLflow and the
# offline hub settings are. Ray starts workers with the environment of `ray start`, not the submitter's.
FORWARDED_PREFIXES = ("FORGE_", "PREFECT_", "MLFLOW_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "AWS_", "DVC_",
                      "RAY_")


def worker_env() -> dict[str, str]:
    """The environment Ray workers get: this process's Forge, Prefect, MLflow and hub settings, Forge's code on
    ``PYTHONPATH`` and the Prefect API this process talks to (without it each worker would start a temporary
    Prefect server of its own and the task runs would land in no database the run can read)."""
    from prefect.client.orchestration import get_client

    ws = Workspace.from_env()
    env = {key: value for key, value in os.environ.items() if key.startswith(FORWARDED_PREFIXES)}
    env.update(FORGE_ROOT=str(ws.root), FORGE_HOME=str(ws.home),
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p))
    with get_client(sync_client=True) as client:
        env["PREFECT_API_URL"] = str(client.api_url).rstrip("/")
    return env


def on_cluster(flow: Any, cluster: ClusterConfig) -> Any:
    """``flow`` with prefect-ray's task runner on ``cluster.ray_address``; ``flow`` itself when none is named."""
    if not cluster.ray_address:
        return flow
    from prefect_ray import RayTaskRunner

    runtime_env = {"env_vars": worker_env()}
    return flow.with_options(task_runner=RayTaskRunner(
        address=cluster.ray_address,
        init_kwargs={"runtime_env": runtime_env, "log_to_driver": False, "logging_level": logging.WARNING}))


def fans_out() -> bool:
    """True inside a flow run whose task runner is a Ray cluster's."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    return ctx is not None and type(ctx.task_runner).__name__ == "RayTaskRunner"
