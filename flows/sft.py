"""SFT flow: the three-stage context curriculum (§2.1.1: 32k → 64k → 256k; tiny: 256 → 512 → 1024), then the
final checkpoint registered as a new `forge-policy` version."""

from __future__ import annotations

from prefect import flow

from flows._progress import run_stage
from forge.config import RecipeConfig
from registry.tracking import DATA_MD5_TAG, STAGE_TAG, start_stage_run
from tasks.training import register_policy_task, sft_stage_task


@flow(name="sft")
def sft_flow(
    config: RecipeConfig, base: dict, data: dict, parent_run_id: str | None = None, lineage: dict | None = None
) -> dict:
    tags = {**(lineage or {}), STAGE_TAG: "sft", DATA_MD5_TAG: data["data_md5"]}
    with start_stage_run("sft", parent_run_id=parent_run_id, tags=tags) as run:
        model_dir, metrics = base["model_dir"], {}
        for i, stage in enumerate(config.sft.curriculum):
            out = run_stage(
                f"sft-{i + 1}-{stage.name}",
                sft_stage_task,
                stage,
                i,
                config.sft,
                config.runtime,
                model_dir,
                data["mix_dir"],
                data["data_md5"],
                parent_run_id=run.info.run_id,
                lineage=tags,
            )
            model_dir, metrics = out["model_dir"], out["metrics"]
        final = {"sft_heldout_loss": metrics["eval_loss_after"]}
        reg = run_stage(
            "register-policy",
            register_policy_task,
            model_dir,
            data["data_md5"],
            base["version"],
            final,
            parent_run_id=run.info.run_id,
            lineage=tags,
        )
    return {"model_dir": model_dir, "version": reg["version"], "metrics": final}
