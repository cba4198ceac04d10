"""Stage 0 flow: the base model (tokenizer + pre-trained tiny Llama, or the hub checkpoint for the GPU profile)."""

from __future__ import annotations

from prefect import flow

from flows._progress import run_stage
from forge.config import RecipeConfig
from tasks.data import digest_corpora
from tasks.training import pretrain_task, train_tokenizer_task


@flow(name="base-model")
def base_flow(config: RecipeConfig, parent_run_id: str | None = None, lineage: dict | None = None) -> dict:
    if config.base.source == "hub":
        # The full profile starts from Nanbeige4-3B-Base (§2.1.1): nothing to train, the hub id is the base.
        return {"model_dir": config.base.hub_id, "tokenizer_dir": config.base.hub_id, "version": "hub"}
    corpora = digest_corpora()
    tokenizer_dir = run_stage("tokenizer", train_tokenizer_task, config.base.tokenizer, corpora, config.seed)
    base = run_stage(
        "pretrain",
        pretrain_task,
        config.base,
        config.runtime,
        tokenizer_dir,
        corpora,
        parent_run_id=parent_run_id,
        lineage=lineage,
    )
    return {**base, "tokenizer_dir": tokenizer_dir}
