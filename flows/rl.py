"""RL flow after SFT: point-wise RM → point-wise GRPO → pair-wise RM → pair-wise GRPO (§2.1.2–2.1.3), then code RL
stage 1 → stage 2, each after its on-policy filter (§2.3.2–2.3.3), then agentic RL (§2.2).

Every stage registers its checkpoint (``forge-rm-pointwise``, ``forge-rm-pairwise``, and one ``forge-policy``
version per GRPO stage whose parent tag names the version it started from); the last policy is what the recipe
evaluates and proposes for promotion. The pair-wise RM's strong side is the SFT policy (or the teacher endpoint
when one is configured), its weak side the base model.
"""

from __future__ import annotations

from prefect import flow

from flows._stages import RecipeRun
from flows.links import name_phase_run
from forge.config import RecipeConfig
from forge.stages import Base, Checkpoint, DataMix, RewardModel
from registry.tracking import DATA_MD5_TAG
from tasks.agentic import agentic_rl_task, agentic_warmup_task
from tasks.code import code_grpo_task, code_rl_filter_task, code_warmup_task, shared_config, stage_config
from tasks.rl import grpo_task, rm_pairwise_task, rm_pointwise_task


@flow(name="rl", flow_run_name=name_phase_run)
def rl_flow(config: RecipeConfig, run: RecipeRun, *, base: Base, sft: Checkpoint, data: DataMix
            ) -> tuple[Checkpoint, RewardModel]:
    """The last policy, and the pair-wise RM (the evaluation's alignment judge)."""
    env = {"runtime": config.runtime, "generation": config.generation, "seed": config.seed}
    with run.phase("rl", {DATA_MD5_TAG: data.data_md5}) as rl:
        # §2.1.2 point-wise RL
        rm = rl.stage("rm-pointwise", rm_pointwise_task, cfg=config.pointwise_rl, **env, policy=sft, weak=base,
                      data=data)
        policy = rl.stage("grpo-pointwise", grpo_task, stage="grpo-pointwise", cfg=config.pointwise_rl,
                          sft=config.sft, **env, policy=sft, rm=rm, data=data)
        # §2.1.3 pair-wise RL
        prm = rl.stage("rm-pairwise", rm_pairwise_task, cfg=config.pairwise_rl, **env, strong=sft, weak=base,
                       data=data)
        policy = rl.stage("grpo-pairwise", grpo_task, stage="grpo-pairwise", cfg=config.pairwise_rl,
                          sft=config.sft, **env, policy=policy, rm=prm, data=data)
        # §2.3.2–2.3.3 code RL: each stage filters its problems on-policy, then trains from the previous checkpoint
        if config.code_rl.enabled:
            if config.code_rl.warmup:  # tiny scale: more epochs on the drills first (docs/architecture.md)
                policy = rl.stage("code-warmup", code_warmup_task, stage=config.code_rl.warmup,
                                  drills=config.code_rl.drills, replay=config.code_rl.warmup_replay,
                                  sft=config.sft, runtime=config.runtime, seed=config.seed, policy=policy, data=data)
            for stage in (1, 2):
                # Each task reads only its share of code_rl: a change to stage 2's GRPO settings re-runs stage 2 alone
                kept = rl.stage(f"code-rl-filter-{stage}", code_rl_filter_task, cfg=shared_config(config.code_rl),
                                judge=config.code_judge, generation=config.generation, seed=config.seed, stage=stage,
                                policy=policy)
                policy = rl.stage(f"code-rl-stage{stage}", code_grpo_task, cfg=stage_config(config.code_rl, stage),
                                  judge=config.code_judge, sft=config.sft, **env, policy=policy, problems=kept,
                                  data=data)
        # Agentic RL (§2.2, §2.4: "a lightweight agentic RL stage" last): multi-turn tool episodes, trajectory +
        # turn rewards
        if config.agentic_rl.warmup:  # tiny scale: the scripted link solutions first (tasks/agentic.py)
            policy = rl.stage("agentic-warmup", agentic_warmup_task, cfg=config.agentic_rl, sft=config.sft,
                              runtime=config.runtime, seed=config.seed, policy=policy, data=data)
        policy = rl.stage("agentic-rl", agentic_rl_task, cfg=config.agentic_rl, sft=config.sft,
                          runtime=config.runtime, seed=config.seed, policy=policy, data=data)
        return policy, prm
