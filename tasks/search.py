"""Prefect tasks for deep-search synthesis: one cached task per head-entity shard, one for the merge."""

from __future__ import annotations

from prefect import task

from forge.config import DeepSearchConfig
from forge.workspace import Workspace
from tasks._cache import cached_task

SEARCH_MODULES = ("forge.search.synthesize", "forge.review.repository")


@cached_task(name="search-shard", modules=SEARCH_MODULES)
def synthesize_shard_task(cfg: DeepSearchConfig, shard: int, corpora_digest: str) -> dict:
    """QAs + trajectories (with critic verdicts) of one shard; keyed on the config, shard, corpora and code."""
    from forge.search.synthesize import synthesize_shard

    return synthesize_shard(Workspace.from_env(), cfg, shard)


@task(name="review-digest")
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
def merge_search_task(cfg: DeepSearchConfig, shards: list[dict], pool_paths: dict[str, str], pools_digest: str,
                      reviews_digest: str) -> dict:
    """Join the shards, fill the review store, write the deep_search / tool_use pools with turn masks."""
    from forge.search.synthesize import merge_shards

    return merge_shards(Workspace.from_env(), cfg, shards, pool_paths)
