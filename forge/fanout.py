"""Independent work fanned out on a Ray cluster (docs/architecture.md, "Team deployment").

When a profile names ``cluster.ray_address``, the flows that hold independent work run with prefect-ray's
``RayTaskRunner``: deep-search synthesis and the evaluation matrix submit their stages together
(``RecipeRun.stages``: one task per head-entity shard, one per suite), and the code judge inside the RL flow's
tasks submits its verdicts in batches (:func:`fan_map`, ``code-judge-batch`` tasks). Each task runs in a Ray worker
process, reports to the same Prefect API and writes into the same checkout and home, so the files and verdicts are
the ones an in-process run produces (same code, same seeds). Ray nodes must see this checkout and home at the same
paths (one machine, or a volume every node mounts), and each must be able to run the code sandbox
(``forge sandbox report`` there).

    synthesize = on_cluster(synthesize_search, config.cluster)   # the flow as is when no cluster is named
    shards = run.stages([(name, task, inputs), ...])             # submitted together when fans_out()
    verdicts = fan_map(judge_one, jobs, name="code-judge-batch", workers=4)   # threads here otherwise
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from forge.config import ClusterConfig
from forge.workspace import REPO_ROOT, Workspace

# What a Ray worker needs of this process's environment: where the checkout, home, Prefect API, MLflow and the
# offline hub settings are. Ray starts workers with the environment of `ray start`, not the submitter's.
FORWARDED_PREFIXES = ("FORGE_", "PREFECT_", "MLFLOW_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "AWS_", "DVC_",
                      "RAY_")
BATCHES_PER_CPU = 2  # fan_map's batches per cluster CPU: a slow batch leaves the others something to take
# Items a fan_map batch holds at least: a Prefect task on Ray costs ~1 s to submit and collect (bench/fanout.py:
# 176 code verdicts took 0.9 s on threads, 4.1 s in four batches), so fewer than two batches' worth stay here.
MIN_BATCH = 32

T = TypeVar("T")
R = TypeVar("R")


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


def fan_map(fn: Callable[[T], R], items: Sequence[T], *, name: str, workers: int, here: bool = False) -> list[R]:
    """``[fn(x) for x in items]``: in batches, each a Prefect task ``name`` on the Ray cluster, when the flow fans
    out (a task calling this runs in the flow's process and submits to its task runner) and there are at least two
    batches' worth (``MIN_BATCH`` items each); else (or ``here``) on ``workers`` threads in this process. ``fn``
    travels to the Ray workers pickled: a closure over picklable values."""
    if here or len(items) < 2 * MIN_BATCH or not fans_out():
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(fn, items))
    import ray
    from prefect import task
    from prefect.cache_policies import NO_CACHE

    n = min(len(items) // MIN_BATCH, max(1, int(ray.cluster_resources().get("CPU", 1)) * BATCHES_PER_CPU))
    bounds = [len(items) * i // n for i in range(n + 1)]
    batch = task(_apply, name=name, cache_policy=NO_CACHE, persist_result=False)
    futures = [batch.with_options(task_run_name=f"{name}-{i}").submit(fn, list(items[lo:hi]))
               for i, (lo, hi) in enumerate(itertools.pairwise(bounds))]
    return [out for future in futures for out in future.result()]


def _apply(fn: Callable[[T], R], batch: list[T]) -> list[R]:
    return [fn(x) for x in batch]
