"""Prefect tasks for the general RL stages (§2.1.2–2.1.3): point-wise RM → GRPO, pair-wise RM → GRPO.

Each task is one nested MLflow run, cached on its inputs and on the library code it calls, and registers its
checkpoint: ``forge-rm-pointwise`` / ``forge-rm-pairwise`` for the reward models, a new ``forge-policy``
version (parent: the policy version it started from) for each GRPO stage. Output folders are named by the
digest of their inputs; trainers resume from their own checkpoints after a kill. The pairs, prompts and rewards
are built in ``forge/training/``; a task loads inputs, generates with the profile's backend, logs and registers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlflow

from forge.config import GenerationConfig, PairwiseRLConfig, PointwiseRLConfig, SFTConfig, TrainingRuntimeConfig
from forge.data.pools import HH as HH_SOURCE
from forge.hashing import value_digest
from forge.stages import Checkpoint, DataMix, RewardModel
from forge.workspace import Workspace
from registry.tracking import (
    DATA_MD5_TAG,
    PARENT_VERSION_TAG,
    STAGE_TAG,
    StageContext,
    log_config,
    log_curve,
    metrics_logger,
)
from tasks._cache import cached_task

REWARD_MODEL_TAG = "forge.reward_model"
RL_MODULES = ("forge.training.grpo", "forge.training.pairs", "forge.training.sft", "forge.data.mix")
ROLLOUT_CURVES = {"reward": "mean reward", "rm_score": "RM score (before the overlong penalty)",
                  "overlong_rate": "overlong truncation rate", "repetition_rate": "repetition rate"}


def _answers(backend: Any, prompts: list[dict], generation: GenerationConfig, max_new_tokens: int, seed: int):
    """One answer per prompt, sampled with the profile's temperature and top-p."""
    return backend.generate([p["prompt"] for p in prompts], max_new_tokens=max_new_tokens,
                            temperature=generation.temperature, top_p=generation.top_p, seed=seed)


# Read by GRPO only, never by the stage's reward model: outside the reward model's cache key.
GRPO_ONLY = ("overlong_penalty", "win_reward", "loss_reward")


def reward_model_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    """What a reward model stage's cache key hashes: its inputs, with its RL section narrowed to what the reward model
    reads: of the GRPO settings only the prompt budget (it draws the prompts GRPO will train on). So tuning a GRPO
    stage re-runs that stage, not its reward model."""
    cfg = inputs["cfg"]
    narrowed = cfg.model_dump(mode="json", exclude={"grpo", *GRPO_ONLY})
    return {**inputs, "cfg": {**narrowed, "grpo.max_prompt_length": cfg.grpo.max_prompt_length}}


@cached_task(name="rm-pointwise", modules=("forge.training.reward_model", *RL_MODULES), key_view=reward_model_inputs)
def rm_pointwise_task(
    *,
    ctx: StageContext,
    cfg: PointwiseRLConfig,
    runtime: TrainingRuntimeConfig,
    generation: GenerationConfig,
    seed: int,
    policy: Checkpoint,
    weak: Checkpoint,
    data: DataMix,
) -> RewardModel:
    """Bradley–Terry RM on the policy's backbone, registered ``forge-rm-pointwise``. Its pairs: the preference pool
    (HH-RLHF), Forge's reference-over-weak pairs (the SFT mix's reference answer over ``weak``'s answer to the same
    prompt, both held to one budget, kept when the checklist agrees) and the refined-over-draft pairs the mix
    carries when §2.1.1's refinement built it. Held-out accuracy is reported per source."""
    from transformers import AutoTokenizer

    from forge.data.jsonl import read_jsonl
    from forge.data.mix import MixRows, read_refinement_pairs
    from forge.data.schemas import PreferencePair
    from forge.generation import local_backend
    from forge.training.launch import run_training
    from forge.training.pairs import FORGE_PAIR_SOURCE, build_rl_prompts, reference_pairs, split_pairs
    from forge.training.reward_model import heldout_metrics, train_reward_model
    from registry.models import register_checkpoint

    ws = Workspace.from_env()
    train, heldout = split_pairs(read_jsonl(ws.pools / "preferences.jsonl", PreferencePair).rows, cfg.rm.eval_pairs,
                                 seed)
    train += read_refinement_pairs(data.mix_dir)
    digest = value_digest(cfg, runtime, generation, policy.model_dir, weak.model_dir, data.data_md5, seed)
    out = ws.models / f"rm-pointwise-{digest}"
    tags = ctx.lineage({STAGE_TAG: "rm-pointwise", DATA_MD5_TAG: data.data_md5, PARENT_VERSION_TAG: policy.ref})
    with ctx.start_run("rm-pointwise", tags) as run:
        log_config(cfg)
        metrics: dict[str, float] = {}
        if cfg.forge_pairs:
            tokenizer = AutoTokenizer.from_pretrained(policy.model_dir)
            prompts = build_rl_prompts(MixRows(data.mix_dir), tokenizer, max_prompts=cfg.forge_pairs,
                                       max_prompt_tokens=cfg.grpo.max_prompt_length, seed=f"{seed}:rm-pointwise")
            budget = cfg.forge_pair_max_new_tokens
            with local_backend(generation, weak.model_dir) as weak_model:
                weak_answers = _answers(weak_model, prompts, generation, budget, seed)
            split = reference_pairs(prompts, weak_answers, tokenizer, budget=budget, eval_pairs=cfg.forge_eval_pairs,
                                    seed=seed)
            train, heldout = train + split.train, heldout + split.heldout
            metrics |= {f"forge_pairs_{k}": v for k, v in split.counts.items()}
        res = run_training(train_reward_model, runtime, out, log_metrics=metrics_logger(),
                           model_dir=Path(policy.model_dir), train_pairs=train, eval_pairs=heldout, cfg=cfg.rm, seed=seed)
        metrics |= heldout_metrics(res, {HH_SOURCE: "hh", FORGE_PAIR_SOURCE: "forge"})
        mlflow.log_metrics(metrics)
        log_curve("rm_pointwise_train_loss", [p[0] for p in res.train_curve], [p[1] for p in res.train_curve],
                  "Bradley–Terry loss")
        version = register_checkpoint(out, "forge-rm-pointwise", run_id=run.info.run_id, tags=tags, metrics=metrics)
    return RewardModel(model_dir=str(out), model_name="forge-rm-pointwise", version=version, run_id=run.info.run_id,
                       metrics=metrics)


def _reward(cfg: PointwiseRLConfig | PairwiseRLConfig, rm: RewardModel, tokenizer: Any, bf16: bool) -> Callable:
    """The stage's only reward: the frozen point-wise RM's score minus the overlong penalty (§2.1.2), or "beats the
    reference answer" under the frozen pairwise RM (§2.1.3)."""
    if isinstance(cfg, PairwiseRLConfig):
        from forge.training.pairwise_rm import BeatsReferenceReward, PairwiseScorer

        scorer = PairwiseScorer(rm.model_dir, max_length=cfg.rm.max_length, bf16=bf16)
        return BeatsReferenceReward(scorer, win=cfg.win_reward, loss=cfg.loss_reward,
                                    max_completion_length=cfg.grpo.max_completion_length,
                                    stop_ids=(tokenizer.eos_token_id,))
    from forge.training.grpo import PointwiseRMReward
    from forge.training.reward_model import RewardScorer

    scorer = RewardScorer(rm.model_dir, max_length=cfg.rm.max_length, bf16=bf16)
    return PointwiseRMReward(scorer, cfg.grpo.max_completion_length, [tokenizer.eos_token_id], cfg.overlong_penalty)


@cached_task(name="grpo", modules=("forge.training.reward_model", "forge.training.pairwise_rm", *RL_MODULES))
def grpo_task(
    *,
    ctx: StageContext,
    stage: str,
    cfg: PointwiseRLConfig | PairwiseRLConfig,
    sft: SFTConfig,
    runtime: TrainingRuntimeConfig,
    generation: GenerationConfig,
    seed: int,
    policy: Checkpoint,
    rm: RewardModel,
    data: DataMix,
) -> Checkpoint:
    """One GRPO stage (``grpo-pointwise`` or ``grpo-pairwise``): ``cfg.grpo.num_generations`` rollouts per prompt
    from the mix, scored by the stage's reward model; the new policy is registered with its parent and its reward
    model. The version carries the SFT held-out loss; rollout diagnostics stay on the run."""
    from transformers import AutoTokenizer

    from forge.data.mix import MixRows, read_heldout
    from forge.training.grpo import train_grpo
    from forge.training.pairs import build_rl_prompts
    from forge.training.sft import heldout_chat_loss
    from registry.models import register_checkpoint

    ws = Workspace.from_env()
    tokenizer = AutoTokenizer.from_pretrained(policy.model_dir)
    heldout_rows = read_heldout(data.mix_dir)  # the SFT held-out loss; the prompts are read from the mix on demand
    prompts = build_rl_prompts(MixRows(data.mix_dir), tokenizer, max_prompts=cfg.grpo.max_prompts,
                               max_prompt_tokens=cfg.grpo.max_prompt_length, seed=f"{seed}:{stage}")
    digest = value_digest(cfg, runtime, generation, policy.model_dir, rm.model_dir, data.data_md5)
    out = ws.models / f"{stage}-{digest}"
    tags = ctx.lineage({STAGE_TAG: stage, DATA_MD5_TAG: data.data_md5, PARENT_VERSION_TAG: policy.ref,
                        REWARD_MODEL_TAG: rm.ref})
    with ctx.start_run(stage, tags) as run:
        log_config(cfg)
        mlflow.log_param("prompts", len(prompts))
        reward = _reward(cfg, rm, tokenizer, runtime.bf16)
        result = train_grpo(runtime, out, log_metrics=metrics_logger(), policy_dir=Path(policy.model_dir),
                            prompts=prompts, reward_funcs=[reward], settings=cfg.grpo, seed=seed, stage=stage,
                            generation=generation)
        for key, label in ROLLOUT_CURVES.items():
            steps, values = result.series(key)
            if values:
                log_curve(f"{stage.replace('-', '_')}_{key}", steps, values, label)
        heldout_loss = heldout_chat_loss(out, heldout_rows, sft, runtime)
        metrics = {**result.window_metrics(ROLLOUT_CURVES), "sft_heldout_loss": heldout_loss}
        mlflow.log_metrics(metrics)
        # Rollout diagnostics (reward under this stage's own RM, truncation) are not comparable across reward
        # models: they stay on the run, the version carries what evaluates the policy itself.
        version = register_checkpoint(out, "forge-policy", run_id=run.info.run_id, tags=tags,
                                      metrics={"sft_heldout_loss": heldout_loss})
    return Checkpoint(model_dir=str(out), model_name="forge-policy", version=version, run_id=run.info.run_id,
                      metrics=metrics)


@cached_task(name="rm-pairwise", modules=("forge.training.pairwise_rm", *RL_MODULES), key_view=reward_model_inputs)
def rm_pairwise_task(
    *,
    ctx: StageContext,
    cfg: PairwiseRLConfig,
    runtime: TrainingRuntimeConfig,
    generation: GenerationConfig,
    seed: int,
    strong: Checkpoint,
    weak: Checkpoint,
    data: DataMix,
) -> RewardModel:
    """Strong-vs-weak and reference-vs-weak answers under one budget, checklist-filtered labels, pairwise RM with
    the swap-consistency term (§2.1.3). The strong side is the teacher endpoint when the profile names one."""
    from transformers import AutoTokenizer

    from forge.data.mix import MixRows
    from forge.generation import local_backend, teacher_or_local
    from forge.training.launch import run_training
    from forge.training.pairs import build_rl_prompts, pairwise_pairs
    from forge.training.pairwise_rm import train_pairwise_rm
    from registry.models import register_checkpoint

    ws = Workspace.from_env()
    tokenizer = AutoTokenizer.from_pretrained(strong.model_dir)
    prompts = build_rl_prompts(MixRows(data.mix_dir), tokenizer, max_prompts=cfg.pair_prompts,
                               max_prompt_tokens=cfg.grpo.max_prompt_length, seed=f"{seed}:rm-pairwise")
    budget = cfg.pair_max_new_tokens
    digest = value_digest(cfg, runtime, generation, strong.model_dir, weak.model_dir, data.data_md5, seed)
    out = ws.models / f"rm-pairwise-{digest}"
    tags = ctx.lineage({STAGE_TAG: "rm-pairwise", DATA_MD5_TAG: data.data_md5, PARENT_VERSION_TAG: strong.ref})
    with ctx.start_run("rm-pairwise", tags) as run:
        log_config(cfg)
        # One engine at a time, each released before the next loads (and before the RM trains on the GPU).
        with teacher_or_local(generation, strong.model_dir) as strong_model:
            strong_answers = _answers(strong_model, prompts, generation, budget, seed)
        with local_backend(generation, weak.model_dir) as weak_model:
            weak_answers = _answers(weak_model, prompts, generation, budget, seed)
        split = pairwise_pairs(prompts, strong_answers, weak_answers, tokenizer, budget=budget,
                               eval_pairs=cfg.rm.eval_pairs, min_pairs=cfg.min_pairs, seed=seed)
        res = run_training(train_pairwise_rm, runtime, out, log_metrics=metrics_logger(),
                           model_dir=Path(strong.model_dir), train_pairs=split.train, heldout_pairs=split.heldout,
                           cfg=cfg, seed=seed)
        metrics = {"heldout_accuracy": res.after.accuracy, "position_bias_rate": res.after.position_bias_rate,
                   "position_bias_rate_before": res.before.position_bias_rate,
                   **{f"pairs_{k}": v for k, v in split.counts.items()}}
        mlflow.log_metrics(metrics)
        log_curve("rm_pairwise_train_loss", [p[0] for p in res.train_curve], [p[1] for p in res.train_curve],
                  "BCE + swap-consistency loss")
        mlflow.log_dict([{"history": p.history, "strong": p.strong, "weak": p.weak} for p in split.train[:20]],
                        "pairs_sample.json")
        version = register_checkpoint(out, "forge-rm-pairwise", run_id=run.info.run_id, tags=tags, metrics=metrics)
    return RewardModel(model_dir=str(out), model_name="forge-rm-pairwise", version=version, run_id=run.info.run_id,
                       metrics=metrics)
