"""Prefect tasks for the general RL stages (§2.1.2–2.1.3): point-wise RM → GRPO, pair-wise RM → GRPO.

Each task is one nested MLflow run, cached on its inputs and on the library code it calls, and registers its
checkpoint: ``forge-rm-pointwise`` / ``forge-rm-pairwise`` for the reward models, a new ``forge-policy``
version (parent: the policy version it started from) for each GRPO stage. Output folders are named by the
digest of their inputs; trainers resume from their own checkpoints after a kill.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import mlflow

from forge.config import (
    GenerationConfig,
    PairwiseRLConfig,
    PointwiseRLConfig,
    SFTConfig,
    TrainingRuntimeConfig,
)
from forge.data.pools import HH as HH_SOURCE
from forge.hashing import value_digest
from forge.workspace import Workspace
from registry.tracking import DATA_MD5_TAG, PARENT_VERSION_TAG, STAGE_TAG, log_config, log_curve, start_stage_run
from tasks._cache import cached_task

REWARD_MODEL_TAG = "forge.reward_model"
RL_MODULES = ("forge.training.grpo", "forge.training.sft", "forge.data.jsonl")


def _mlflow_logger():
    def log(metrics: dict, step: int) -> None:
        mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)

    return log


def _mix_rows(mix_dir: str):
    from forge.data.jsonl import read_jsonl
    from forge.data.schemas import ChatSample

    mix = Path(mix_dir)
    train = [r for shard in sorted(mix.glob("train-*.jsonl")) for r in read_jsonl(shard, ChatSample).rows]
    return train, read_jsonl(mix / "heldout.jsonl", ChatSample).rows


def _heldout_loss(model_dir: Path, heldout, sft: SFTConfig, runtime: TrainingRuntimeConfig) -> float:
    from forge.training.sft import heldout_chat_loss

    return heldout_chat_loss(model_dir, heldout, sft.curriculum[-1], sft, runtime,
                             model_dir.parent / f".{model_dir.name}.eval")


def _log_rollout_curves(prefix: str, result) -> dict[str, float]:
    """Reward / overlong / repetition curves as plots, and first-vs-last 20% means as metrics."""
    metrics: dict[str, float] = {}
    for key, label in (("reward", "mean reward"), ("rm_score", "RM score (before the overlong penalty)"),
                       ("overlong_rate", "overlong truncation rate"),
                       ("repetition_rate", "repetition rate")):
        steps, values = result.series(key)
        if not values:
            continue
        log_curve(f"{prefix}_{key}", steps, values, label)
        metrics[f"{key}_first20"] = result.window_mean(key, 0.0, 0.2)
        metrics[f"{key}_last20"] = result.window_mean(key, 0.8, 1.0)
    return metrics


@cached_task(name="rm-pointwise", modules=("forge.training.reward_model", "forge.training.pairwise_rm",
                                            "forge.data.jsonl"))
def rm_pointwise_task(
    cfg: PointwiseRLConfig,
    runtime: TrainingRuntimeConfig,
    generation: GenerationConfig,
    policy_dir: str,
    policy_version: str,
    weak_dir: str,
    mix_dir: str,
    data_md5: str,
    seed: int,
    extra_pairs: str | None = None,
    parent_run_id: str | None = None,
    lineage: dict | None = None,
) -> dict:
    """Bradley–Terry RM on the policy's backbone, registered ``forge-rm-pointwise``. Its pairs: the preference pool
    (HH-RLHF), Forge's reference-over-weak pairs (the SFT mix's reference answer over the weak checkpoint's answer
    to the same prompt, kept when the checklist agrees) and ``extra_pairs`` (refined-over-draft, when refinement
    ran). Held-out accuracy is reported per source."""
    from transformers import AutoTokenizer

    from forge.data.jsonl import read_jsonl
    from forge.data.schemas import PreferencePair
    from forge.generation import local_backend
    from forge.training.grpo import build_rl_prompts
    from forge.training.pairwise_rm import FORGE_PAIR_SOURCE, filter_pairs, reference_over_weak, to_preference_pairs
    from forge.training.reward_model import split_pairs, train_reward_model
    from registry.models import register_checkpoint, set_version_metrics

    ws = Workspace.from_env()
    pairs = read_jsonl(ws.pools / "preferences.jsonl", PreferencePair).rows
    train, heldout = split_pairs(pairs, cfg.rm_eval_pairs, seed)
    if extra_pairs:
        train += read_jsonl(extra_pairs, PreferencePair).rows
    out = ws.models / (f"rm-pointwise-"
                       f"{value_digest(cfg, runtime, generation, policy_dir, weak_dir, data_md5, seed, extra_pairs)}")
    tags = {**(lineage or {}), STAGE_TAG: "rm-pointwise", DATA_MD5_TAG: data_md5,
            PARENT_VERSION_TAG: f"forge-policy/{policy_version}"}
    with start_stage_run("rm-pointwise", parent_run_id=parent_run_id, tags=tags) as run:
        log_config(cfg)
        metrics: dict[str, float] = {}
        if cfg.forge_pairs:
            tokenizer = AutoTokenizer.from_pretrained(policy_dir)
            prompts = build_rl_prompts(_mix_rows(mix_dir)[0], tokenizer, max_prompts=cfg.forge_pairs,
                                       max_prompt_tokens=cfg.max_prompt_length, seed=seed + 3)
            weak = local_backend(generation.backend, weak_dir)
            raw = reference_over_weak(weak, prompts, tokenizer, max_new_tokens=cfg.forge_pair_max_new_tokens,
                                      temperature=generation.temperature, seed=seed)
            kept, counts = filter_pairs(raw)
            forge_train, forge_heldout = split_pairs(to_preference_pairs(kept), cfg.forge_eval_pairs, seed)
            train += forge_train
            heldout += forge_heldout
            metrics |= {f"forge_pairs_{k}": v for k, v in counts.items()}
        res = train_reward_model(Path(policy_dir), train, heldout, cfg, runtime, out, seed, _mlflow_logger())
        metrics |= {"heldout_pair_accuracy": res.accuracy_after, "heldout_pair_accuracy_before": res.accuracy_before,
                    "train_pairs": res.train_pairs, "heldout_pairs": res.eval_pairs}
        for source, name in ((HH_SOURCE, "hh"), (FORGE_PAIR_SOURCE, "forge")):
            if source in res.by_source_after:
                metrics[f"heldout_pair_accuracy_{name}"] = res.by_source_after[source]
                metrics[f"heldout_pair_accuracy_{name}_before"] = res.by_source_before[source]
        mlflow.log_metrics(metrics)
        log_curve("rm_pointwise_train_loss", [p[0] for p in res.train_curve], [p[1] for p in res.train_curve],
                  "Bradley–Terry loss")
        version = register_checkpoint(out, "forge-rm-pointwise", run_id=run.info.run_id, tags=tags)
        set_version_metrics("forge-rm-pointwise", version, metrics)
    return {"model_dir": str(out), "run_id": run.info.run_id, "version": version, "metrics": metrics}


def _register_policy(out: Path, run_id: str, tags: dict, eval_metrics: dict) -> str:
    """Register a GRPO policy. Only evaluation metrics go on the version: the promotion gate compares every metric
    a version carries, and a stage's rollout diagnostics (reward under its own RM, truncation rate) are neither
    comparable across reward models nor "higher is better"; they stay on the stage's MLflow run."""
    from registry.models import register_checkpoint, set_version_metrics

    version = register_checkpoint(out, "forge-policy", run_id=run_id, tags=tags)
    set_version_metrics("forge-policy", version, eval_metrics)
    return version


def _grpo_stage(
    stage: str,
    rm_name: str,
    make_reward,
    cfg: PointwiseRLConfig | PairwiseRLConfig,
    sft: SFTConfig,
    runtime: TrainingRuntimeConfig,
    generation: GenerationConfig,
    policy_dir: str,
    policy_version: str,
    rm: dict,
    mix_dir: str,
    data_md5: str,
    seed: int,
    prompt_seed: int,
    parent_run_id: str | None,
    lineage: dict | None,
) -> dict:
    """One GRPO stage: prompts from the mix, ``make_reward(tokenizer)`` as the only reward, the new policy
    registered with its parent and reward model; both GRPO stages differ only in the reward."""
    from transformers import AutoTokenizer

    from forge.training.grpo import build_rl_prompts, grpo_settings, run_grpo

    ws = Workspace.from_env()
    train_rows, heldout = _mix_rows(mix_dir)
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    prompts = build_rl_prompts(train_rows, tokenizer, max_prompts=cfg.max_prompts,
                               max_prompt_tokens=cfg.max_prompt_length, seed=prompt_seed)
    out = ws.models / f"{stage}-{value_digest(cfg, runtime, generation, policy_dir, rm['model_dir'], data_md5)}"
    tags = {**(lineage or {}), STAGE_TAG: stage, DATA_MD5_TAG: data_md5,
            PARENT_VERSION_TAG: f"forge-policy/{policy_version}", REWARD_MODEL_TAG: f"{rm_name}/{rm['version']}"}
    started = time.time()
    with start_stage_run(stage, parent_run_id=parent_run_id, tags=tags) as run:
        log_config(cfg)
        mlflow.log_param("prompts", len(prompts))
        result = run_grpo(Path(policy_dir), prompts, [make_reward(tokenizer)], grpo_settings(cfg, seed), runtime,
                          out, stage=stage, generation=generation, log_metrics=_mlflow_logger())
        metrics = _log_rollout_curves(stage.replace("-", "_"), result)
        metrics["sft_heldout_loss"] = _heldout_loss(out, heldout, sft, runtime)
        mlflow.log_metrics(metrics)
        version = _register_policy(out, run.info.run_id, tags, {"sft_heldout_loss": metrics["sft_heldout_loss"]})
    return {"model_dir": str(out), "run_id": run.info.run_id, "version": version, "metrics": metrics,
            "seconds": time.time() - started}


@cached_task(name="grpo-pointwise", modules=("forge.training.reward_model", *RL_MODULES))
def grpo_pointwise_task(
    cfg: PointwiseRLConfig,
    sft: SFTConfig,
    runtime: TrainingRuntimeConfig,
    generation: GenerationConfig,
    policy_dir: str,
    policy_version: str,
    rm: dict,
    mix_dir: str,
    data_md5: str,
    seed: int,
    parent_run_id: str | None = None,
    lineage: dict | None = None,
) -> dict:
    """GRPO with ``num_generations`` rollouts per prompt, the frozen point-wise RM's score as reward (§2.1.2)."""
    from forge.training.grpo import PointwiseRMReward
    from forge.training.reward_model import RewardScorer

    def make_reward(tokenizer):
        return PointwiseRMReward(RewardScorer(rm["model_dir"], max_length=cfg.rm_max_length),
                                 cfg.max_completion_length, [tokenizer.eos_token_id], cfg.overlong_penalty)

    return _grpo_stage("grpo-pointwise", "forge-rm-pointwise", make_reward, cfg, sft, runtime, generation,
                       policy_dir, policy_version, rm, mix_dir, data_md5, seed, seed, parent_run_id, lineage)


def _strong_backend(generation: GenerationConfig, model_dir: str):
    """The strong side of the pairs: the teacher endpoint when one is configured, else the given checkpoint."""
    from forge.generation import get_backend, local_backend

    if generation.backend == "openai" and generation.openai_base_url:
        return get_backend("openai", base_url=generation.openai_base_url)
    return local_backend(generation.backend, model_dir)


@cached_task(name="rm-pairwise", modules=("forge.training.pairwise_rm", *RL_MODULES))
def rm_pairwise_task(
    cfg: PairwiseRLConfig,
    runtime: TrainingRuntimeConfig,
    generation: GenerationConfig,
    strong_dir: str,
    weak_dir: str,
    policy_version: str,
    mix_dir: str,
    data_md5: str,
    seed: int,
    parent_run_id: str | None = None,
    lineage: dict | None = None,
) -> dict:
    """Strong-vs-weak answers, checklist-filtered labels, pairwise RM with the swap-consistency term (§2.1.3)."""
    from transformers import AutoTokenizer

    from forge.generation import local_backend
    from forge.training.grpo import build_rl_prompts
    from forge.training.pairwise_rm import StrongWeakPair, filter_pairs, generate_strong_weak, train_pairwise_rm
    from registry.models import register_checkpoint, set_version_metrics

    ws = Workspace.from_env()
    train_rows, _ = _mix_rows(mix_dir)
    tokenizer = AutoTokenizer.from_pretrained(strong_dir)
    prompts = build_rl_prompts(train_rows, tokenizer, max_prompts=cfg.pair_prompts,
                               max_prompt_tokens=cfg.max_prompt_length, seed=seed + 1)
    out = ws.models / f"rm-pairwise-{value_digest(cfg, runtime, generation, strong_dir, weak_dir, data_md5, seed)}"
    tags = {**(lineage or {}), STAGE_TAG: "rm-pairwise", DATA_MD5_TAG: data_md5,
            PARENT_VERSION_TAG: f"forge-policy/{policy_version}"}
    with start_stage_run("rm-pairwise", parent_run_id=parent_run_id, tags=tags) as run:
        log_config(cfg)
        weak = local_backend(generation.backend, weak_dir)
        raw = generate_strong_weak(_strong_backend(generation, strong_dir), weak, prompts,
                                   max_new_tokens=cfg.pair_max_new_tokens, temperature=generation.temperature,
                                   seed=seed)
        # The SFT data's own answer is the strongest "checkpoint" there is (the teacher that wrote it): its
        # pairs against the weak checkpoint join the policy's, through the same checklist filter.
        reference_pairs = [StrongWeakPair(p.history, p.reference, p.weak, p.reference, p.domain) for p in raw]
        kept_policy, counts = filter_pairs(raw)
        kept_reference, ref_counts = filter_pairs(reference_pairs)
        kept = kept_policy + kept_reference
        random.Random(f"{seed}:pairwise-split").shuffle(kept)
        n_eval = min(cfg.rm_eval_pairs, len(kept) // 3)
        heldout, train = kept[:n_eval], kept[n_eval:]
        if len(kept) < cfg.min_pairs:
            raise ValueError(f"rm-pairwise: the checklist kept {len(kept)} of {len(raw) + len(reference_pairs)} "
                             f"pairs (fewer than min_pairs={cfg.min_pairs}): too few to train on")
        res = train_pairwise_rm(Path(strong_dir), train, heldout, cfg, runtime, out, seed, _mlflow_logger())
        metrics = {
            "heldout_accuracy": res.after.accuracy,
            "position_bias_rate": res.after.position_bias_rate,
            "position_bias_rate_before": res.before.position_bias_rate,
            "pairs_kept_policy": counts["kept"], "pairs_disagree_policy": counts["disagree"],
            "pairs_tie_policy": counts["tie"], "pairs_kept_reference": ref_counts["kept"],
            "pairs_disagree_reference": ref_counts["disagree"], "pairs_tie_reference": ref_counts["tie"],
            "pairs_train": len(train), "pairs_heldout": len(heldout),
        }
        mlflow.log_metrics(metrics)
        log_curve("rm_pairwise_train_loss", [p[0] for p in res.train_curve], [p[1] for p in res.train_curve],
                  "BCE + swap-consistency loss")
        mlflow.log_dict([{"history": p.history, "strong": p.strong, "weak": p.weak} for p in kept[:20]],
                        "pairs_sample.json")
        version = register_checkpoint(out, "forge-rm-pairwise", run_id=run.info.run_id, tags=tags)
        set_version_metrics("forge-rm-pairwise", version, metrics)
    return {"model_dir": str(out), "run_id": run.info.run_id, "version": version, "metrics": metrics}


@cached_task(name="grpo-pairwise", modules=("forge.training.pairwise_rm", *RL_MODULES))
def grpo_pairwise_task(
    cfg: PairwiseRLConfig,
    sft: SFTConfig,
    runtime: TrainingRuntimeConfig,
    generation: GenerationConfig,
    policy_dir: str,
    policy_version: str,
    rm: dict,
    mix_dir: str,
    data_md5: str,
    seed: int,
    parent_run_id: str | None = None,
    lineage: dict | None = None,
) -> dict:
    """GRPO whose reward is ``win_reward`` when the pairwise RM says the rollout beats the reference answer."""
    from forge.training.pairwise_rm import BeatsReferenceReward, PairwiseScorer

    def make_reward(tokenizer):
        return BeatsReferenceReward(PairwiseScorer(rm["model_dir"], max_length=cfg.rm_max_length),
                                    win=cfg.win_reward, loss=cfg.loss_reward,
                                    max_completion_length=cfg.max_completion_length,
                                    stop_ids=(tokenizer.eos_token_id,))

    return _grpo_stage("grpo-pairwise", "forge-rm-pairwise", make_reward, cfg, sft, runtime, generation,
                       policy_dir, policy_version, rm, mix_dir, data_md5, seed, seed + 2, parent_run_id, lineage)
