"""General RL flow (§2.1.2–2.1.3), after SFT: point-wise RM → point-wise GRPO → pair-wise RM → pair-wise GRPO.

Every stage registers its checkpoint (``forge-rm-pointwise``, ``forge-rm-pairwise``, and one ``forge-policy``
version per GRPO stage whose parent tag names the version it started from); the last policy is what the recipe
evaluates and proposes for promotion. The pair-wise RM's strong side is the SFT policy (or the teacher endpoint
when one is configured), its weak side the base model.
"""

from __future__ import annotations

from prefect import flow

from flows._progress import run_stage
from forge.config import RecipeConfig
from registry.tracking import DATA_MD5_TAG, STAGE_TAG, start_stage_run
from tasks.refinement import cot_reconstruction_task, solution_refinement_task
from tasks.rl import grpo_pairwise_task, grpo_pointwise_task, rm_pairwise_task, rm_pointwise_task


@flow(name="rl")
def rl_flow(
    config: RecipeConfig,
    base: dict,
    sft: dict,
    data: dict,
    parent_run_id: str | None = None,
    lineage: dict | None = None,
) -> dict:
    tags = {**(lineage or {}), STAGE_TAG: "rl", DATA_MD5_TAG: data["data_md5"]}
    common = (config.runtime,)
    with start_stage_run("rl", parent_run_id=parent_run_id, tags=tags) as run:
        parent = run.info.run_id
        extra_pairs = None
        if config.refinement.enabled:  # §2.1.1: refined-over-draft pairs join the preference data
            refined = run_stage("solution-refinement", solution_refinement_task, config.refinement,
                                config.sft.solution_refinement_iterations, config.generation, sft["model_dir"],
                                data["mix_dir"], data["data_md5"], config.seed)
            run_stage("cot-reconstruction", cot_reconstruction_task, config.refinement, config.generation,
                      sft["model_dir"], refined["traces"], config.seed)
            extra_pairs = refined["pairs"]
        rm = run_stage("rm-pointwise", rm_pointwise_task, config.pointwise_rl, *common, config.generation,
                       sft["model_dir"], sft["version"], base["model_dir"], data["mix_dir"], data["data_md5"],
                       config.seed, extra_pairs, parent_run_id=parent, lineage=tags)
        point = run_stage("grpo-pointwise", grpo_pointwise_task, config.pointwise_rl, config.sft, *common,
                          config.generation, sft["model_dir"], sft["version"], rm, data["mix_dir"],
                          data["data_md5"], config.seed, parent_run_id=parent, lineage=tags)
        prm = run_stage("rm-pairwise", rm_pairwise_task, config.pairwise_rl, *common, config.generation,
                        sft["model_dir"], base["model_dir"], sft["version"], data["mix_dir"], data["data_md5"],
                        config.seed, parent_run_id=parent, lineage=tags)
        pair = run_stage("grpo-pairwise", grpo_pairwise_task, config.pairwise_rl, config.sft, *common,
                         config.generation, point["model_dir"], point["version"], prm, data["mix_dir"],
                         data["data_md5"], config.seed, parent_run_id=parent, lineage=tags)
    metrics = {
        "rm_pointwise_heldout_accuracy": rm["metrics"]["heldout_pair_accuracy"],
        **{f"rm_pointwise_heldout_accuracy_{s}": rm["metrics"][f"heldout_pair_accuracy_{s}"]
           for s in ("hh", "forge") if f"heldout_pair_accuracy_{s}" in rm["metrics"]},
        "rm_pairwise_position_bias_rate": prm["metrics"]["position_bias_rate"],
        "grpo_pointwise_reward_gain": point["metrics"].get("reward_last20", 0.0)
        - point["metrics"].get("reward_first20", 0.0),
        "sft_heldout_loss": pair["metrics"]["sft_heldout_loss"],
    }
    return {"model_dir": pair["model_dir"], "version": pair["version"], "metrics": metrics,
            "versions": {"forge-rm-pointwise": rm["version"], "grpo-pointwise": point["version"],
                         "forge-rm-pairwise": prm["version"], "grpo-pairwise": pair["version"]}}
