"""Data flow: per-domain pools from corpora/, deep-search synthesis, the code drills, the SFT mix in target token
shares, DVC."""

from __future__ import annotations

from prefect import flow

from flows._stages import RecipeRun
from flows.search import synthesize_search
from forge.config import RecipeConfig
from forge.stages import DataMix, Tokenizer
from tasks.code import code_drills_task
from tasks.data import build_mix_task, build_pools_task, digest_corpora, version_data_task


@flow(name="data")
def data_flow(config: RecipeConfig, run: RecipeRun, *, tokenizer: Tokenizer) -> DataMix:
    pools = run.stage("pools", build_pools_task, cfg=config.pools, corpora=digest_corpora())
    if config.deep_search.enabled:  # §2.2.1: graph-walk QAs and agent trajectories join deep_search / tool_use
        pools = synthesize_search(config.deep_search, run, pools=pools)
    if config.code_rl.enabled and config.code_rl.drills.sft_per_op:  # the tiny code family joins the code pool
        pools = run.stage("code-drills", code_drills_task, cfg=config.code_rl.drills, seed=config.seed, pools=pools)
    mix = run.stage("mix", build_mix_task, cfg=config.mix, pools=pools, tokenizer=tokenizer,
                    heldout_rows=config.eval.heldout_rows)
    return run.stage("dvc", version_data_task, mix=mix)
