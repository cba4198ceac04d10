"""Deep-search synthesis flow (§2.2.1): head-entity shards → QAs + agent trajectories + critic → review store →
deep_search / tool_use pools for the mix. Called by flows/data.py; the shards are independent, so on a Ray
cluster (the profile's ``cluster.ray_address``, forge/fanout.py) they run side by side."""

from __future__ import annotations

from prefect import flow

from flows._stages import RecipeRun
from flows.links import name_phase_run
from forge.config import DeepSearchConfig, GenerationConfig
from forge.stages import Base, Pools
from tasks.data import digest_corpora
from tasks.search import merge_search_task, review_digest_task, synthesize_shard_task


@flow(name="synthesize-search", flow_run_name=name_phase_run)
def synthesize_search(config: DeepSearchConfig, run: RecipeRun, *, pools: Pools, base: Base | None = None,
                      generation: GenerationConfig | None = None) -> Pools:
    """``base`` and ``generation``: the model the policy agent runs when ``config.policy_agent`` asks for one and
    names no teacher endpoint (a shard's inputs, so a new base model redoes the shards)."""
    corpora = digest_corpora()
    inputs = {"corpora": corpora}
    if config.policy_agent and not config.teacher_base_url and base is not None:
        inputs.update(agent_model=base.model_dir, generation=generation)
    shards = run.stages([(f"search-shard-{i + 1}-of-{config.num_shards}", synthesize_shard_task,
                          {"cfg": config, "shard": i, **inputs}) for i in range(config.num_shards)])
    return run.stage("search-merge", merge_search_task, cfg=config, shards=shards, pools=pools,
                     reviews=review_digest_task(config))
