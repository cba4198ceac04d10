"""Stage 0 flow: the base model (tokenizer + pre-trained tiny Llama, or the hub checkpoint for the GPU profile)."""

from __future__ import annotations

from prefect import flow

from flows._stages import RecipeRun
from flows.links import name_phase_run
from forge.config import RecipeConfig
from forge.stages import Base
from tasks.data import digest_corpora
from tasks.training import pretrain_task, train_tokenizer_task


@flow(name="base-model", flow_run_name=name_phase_run)
def base_flow(config: RecipeConfig, run: RecipeRun) -> Base:
    if config.base.source == "hub":
        # The full profile starts from Nanbeige4-3B-Base (§2.1.1): nothing to train, the hub id is the base.
        hub = config.base.hub_id
        return Base(model_dir=hub, tokenizer_dir=hub, model_name="forge-base", version="hub")
    corpora = digest_corpora()
    tokenizer = run.stage("tokenizer", train_tokenizer_task, cfg=config.base.tokenizer, corpora=corpora,
                          seed=config.seed)
    return run.stage("pretrain", pretrain_task, cfg=config.base, runtime=config.runtime, tokenizer=tokenizer,
                     corpora=corpora)
