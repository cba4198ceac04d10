"""SFT flow: the three-stage context curriculum (§2.1.1: 32k → 64k → 256k; tiny: 256 → 512 → 1024), each stage
from the previous stage's weights; the last registers its checkpoint as a new `forge-policy` version."""

from __future__ import annotations

from prefect import flow

from flows._stages import RecipeRun
from flows.links import name_phase_run
from forge.config import RecipeConfig
from forge.stages import Base, Checkpoint, DataMix
from registry.tracking import DATA_MD5_TAG
from tasks.training import sft_stage_task


@flow(name="sft", flow_run_name=name_phase_run)
def sft_flow(config: RecipeConfig, run: RecipeRun, *, base: Base, data: DataMix) -> Checkpoint:
    with run.phase("sft", {DATA_MD5_TAG: data.data_md5}) as sft:
        checkpoint: Checkpoint = base
        last = len(config.sft.curriculum) - 1
        for i, stage in enumerate(config.sft.curriculum):  # the last stage registers its checkpoint
            checkpoint = sft.stage(f"sft-{i + 1}-{stage.name}", sft_stage_task, stage=stage, index=i, sft=config.sft,
                                   runtime=config.runtime, init=checkpoint, data=data,
                                   register_from=base if i == last else None)
        return checkpoint
