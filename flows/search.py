"""Deep-search synthesis flow (paper §2.2.1): head-entity shards → QAs + agent trajectories + critic →
review store → deep_search / tool_use pools for the mix.

    synthesize_search(cfg.deep_search, pool_paths, pools_digest)    # called by flows/data.py
"""

from __future__ import annotations

from pathlib import Path

import mlflow
from prefect import flow

from flows._progress import log, run_stage
from forge.config import DeepSearchConfig
from registry.tracking import STAGE_TAG, log_curve, log_table, start_stage_run
from tasks.data import digest_corpora
from tasks.search import merge_search_task, review_digest_task, synthesize_shard_task


def _stage(name: str, task, *args):
    """run_stage, recomputing a cache hit whose output files are gone."""
    result = run_stage(name, task, *args)
    paths = [result[k] for k in ("qa_path", "traj_path") if k in result] + list(result.get("pools", {}).values())
    if not all(Path(p).exists() for p in paths):
        log.warning("stage %s: cached result points at missing files; recomputing", name)
        result = task.with_options(refresh_cache=True)(*args)
    return result


@flow(name="synthesize-search")
def synthesize_search(
    config: DeepSearchConfig,
    pool_paths: dict[str, str],
    pools_digest: str,
    parent_run_id: str | None = None,
    lineage: dict | None = None,
) -> dict:
    corpora = digest_corpora()
    shards = []
    for i in range(config.num_shards):
        shards.append(_stage(f"search-shard-{i + 1}-of-{config.num_shards}", synthesize_shard_task, config, i, corpora))
    reviews = review_digest_task(config)
    merged = _stage("search-merge", merge_search_task, config, shards, pool_paths, pools_digest, reviews)
    stats = merged["stats"]
    with start_stage_run("deep_search", parent_run_id=parent_run_id, tags={**(lineage or {}), STAGE_TAG: "deep_search"}):
        mlflow.log_metrics({"qas": stats["qas"], "trajectories": stats["trajectories"],
                            "turn_pass_rate": stats["turn_pass_rate"], "obfuscated_heads": stats["obfuscated_heads"],
                            **{f"accuracy_{a}": v for a, v in stats["accuracy"].items()},
                            **{f"samples_{d}": n for d, n in stats["samples"].items()},
                            "qa_per_s": stats["qas"] / max(1e-9, sum(s["qa_seconds"] for s in shards))})
        hops = sorted((int(k), v) for k, v in stats["hops"].items())
        log_curve("qa_hops", [h for h, _ in hops], [n for _, n in hops], ylabel="QAs with this many hops")
        log_table(shards, "shards.json")
    return merged
