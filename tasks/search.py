"""Prefect tasks for deep-search synthesis (§2.2.1): one cached task per head-entity shard, one for the merge."""

from __future__ import annotations

from contextlib import nullcontext

import mlflow

from forge.config import DeepSearchConfig, GenerationConfig
from forge.stages import Pools, SearchShard
from forge.workspace import Workspace
from registry.tracking import FLOW_RUN_ID_TAG, PROFILE_TAG, STAGE_TAG, StageContext, log_curve, log_table
from tasks._cache import cached_task, uncached_task

SEARCH_MODULES = ("forge.search.synthesize", "forge.review.feedback")


@cached_task(name="search-shard", modules=SEARCH_MODULES)
def synthesize_shard_task(
    *, cfg: DeepSearchConfig, shard: int, corpora: str, agent_model: str | None = None,
    generation: GenerationConfig | None = None
) -> SearchShard:
    """QAs + trajectories (with critic verdicts) of one shard; keyed on the config, shard, corpora and code. With
    ``cfg.policy_agent``, a ReAct agent joins the scripted ones: over the teacher endpoint when the profile names
    one, else over the checkpoint ``agent_model`` (the base model) under ``generation``."""
    from forge.generation import local_backend
    from forge.search.synthesize import synthesize_shard

    with local_backend(generation, agent_model) if agent_model and generation else nullcontext() as local:
        return SearchShard(**synthesize_shard(Workspace.from_env(), cfg, shard, local))


@uncached_task(name="review-digest")
def review_digest_task(cfg: DeepSearchConfig) -> str:
    """State of the human verdicts: part of the merge's cache key, so new reviews re-filter the data."""
    from sqlalchemy.orm import Session

    from forge.review.repository import open_workspace_store, review_digest

    engine = open_workspace_store(cfg.review_db_url, Workspace.from_env().home)
    with Session(engine) as session:
        digest = review_digest(session)
    engine.dispose()
    return digest


@cached_task(name="search-merge", modules=SEARCH_MODULES)
def merge_search_task(
    *, ctx: StageContext, cfg: DeepSearchConfig, shards: list[SearchShard], pools: Pools, reviews: str
) -> Pools:
    """Join the shards, put the trajectories in the review store and take the reviewed ones back (human verdicts
    over the critic's), write the deep_search / tool_use pools with turn masks; ``pools`` with those two replaced.
    ``reviews`` (the store's digest) is only a cache key: new verdicts re-run the merge."""
    from forge.hashing import files_digest
    from forge.review.feedback import apply_reviews
    from forge.search.synthesize import merge_shards

    ws = Workspace.from_env()

    flow_run_id = ctx.tags.get(FLOW_RUN_ID_TAG)
    actor = f"synthesis in run {flow_run_id[:8]} ({ctx.tags.get(PROFILE_TAG)})" if flow_run_id else "synthesis"

    def review(trajs, qas):
        return apply_reviews(trajs, qas, url=cfg.review_db_url, home=ws.home, actor=actor)

    merged = merge_shards(ws, cfg, [s.model_dump() for s in shards], pools.files, review=review)
    stats = merged["stats"]
    metrics = {"qas": stats["qas"], "trajectories": stats["trajectories"], "turn_pass_rate": stats["turn_pass_rate"],
               "obfuscated_heads": stats["obfuscated_heads"],
               **{f"accuracy_{a}": v for a, v in stats["accuracy"].items()},
               **{f"samples_{d}": n for d, n in stats["samples"].items()},
               "qa_per_s": stats["qas"] / max(1e-9, sum(s.qa_seconds for s in shards))}
    with ctx.start_run("deep_search", {STAGE_TAG: "deep_search"}) as run:
        mlflow.log_metrics(metrics)
        hops = sorted((int(k), v) for k, v in stats["hops"].items())
        log_curve("qa_hops", [h for h, _ in hops], [n for _, n in hops], ylabel="QAs with this many hops")
        log_table([s.model_dump() for s in shards], "shards.json")
        mlflow.log_dict(stats, "stats.json")
    files = {**pools.files, **merged["pools"]}
    return Pools(files=files, digest=files_digest(files), review=stats["review"], run_id=run.info.run_id,
                 metrics=metrics)
