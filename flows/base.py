"""Stage 0 flow: the base model (tokenizer + pre-trained tiny Llama, or the hub checkpoint for the GPU profile)."""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows._stages import RecipeRun
from flows.links import name_phase_run
from forge.config import RecipeConfig
from forge.stages import Base
from tasks.data import digest_corpora
from tasks.training import pretrain_task, train_tokenizer_task


@flow(name="base-model", flow_run_name=name_phase_run)
def base_flow(config: RecipeConfig, run: RecipeRun) -> Base:
    if config.base.source != "build":
        # The full profile starts from Nanbeige4-3B-Base (§2.1.1): nothing to train. The checkpoint is found (or,
        # where the profile allows, fetched) before any stage runs, so a missing one fails here with how to fix it.
        from forge.training.base_model import resolve_base

        path = str(resolve_base(config.base))
        where = (f"the checkpoint directory {path}" if config.base.source == "local"
                 else f"{config.base.hub_id} from the Hugging Face cache at {path}")
        get_run_logger().info("base: %s", where)
        return Base(model_dir=path, tokenizer_dir=path, model_name="forge-base", version=config.base.source)
    corpora = digest_corpora()
    tokenizer = run.stage("tokenizer", train_tokenizer_task, cfg=config.base.tokenizer, corpora=corpora,
                          seed=config.seed)
    return run.stage("pretrain", pretrain_task, cfg=config.base, runtime=config.runtime, tokenizer=tokenizer,
                     corpora=corpora)
