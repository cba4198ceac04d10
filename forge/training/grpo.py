"""GRPO builders shared by the point-wise (§2.1.2) and pair-wise (§2.1.3) RL stages, with TRL's ``GRPOTrainer``.

What is Forge's here: the reward callables (:class:`PointwiseRMReward` scores a rollout with the frozen point-wise
RM; :mod:`forge.training.pairwise_rm` provides the "beats the reference" reward), the per-step health metrics
the paper watches (overlong truncation 5.27% → 0.38%, repetition) and the mapping from the profile's
:class:`forge.config.GRPOSettings` to TRL's ``GRPOConfig`` — the same function builds the CPU and the GPU (vLLM
colocate, bf16) configs. The prompts come from :func:`forge.training.pairs.build_rl_prompts`.

Reward functions follow TRL's signature ``r(prompts, completions, completion_ids, **kwargs) -> list[float]``;
conversational completions arrive as ``[{"role": "assistant", "content": text}]``.

    prompts = build_rl_prompts(mix_rows, tokenizer, max_prompts=64, max_prompt_tokens=96, seed=0)
    reward = PointwiseRMReward(RewardScorer(rm_dir), max_completion_length=64)
    result = run_grpo(policy_dir, prompts, [reward], cfg.pointwise_rl.grpo, cfg.runtime, out_dir, seed=cfg.seed)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from forge.chat import completion_text
from forge.config import GenerationConfig, GRPOSettings, TrainingRuntimeConfig
from forge.training.checkpoints import ForwardMetrics, MetricsLogger, ResumableTraining, common_trainer_args
from forge.training.launch import beside, broadcast_from_rank0, run_training
from forge.training.pairs import repetition_fraction

logger = logging.getLogger(__name__)

Chat = list[dict[str, Any]]


# --- rollout health metrics -----------------------------------------------------------------------------------




def is_repetitive(text: str, threshold: float = 0.3) -> bool:
    """A completion counts as repetitive when more than ``threshold`` of its 4-grams are repeats."""
    return repetition_fraction(text) > threshold


def is_overlong(ids: Sequence[int], max_completion_length: int, stop_ids: Sequence[int]) -> bool:
    """Truncated at the length limit: the budget is used up and the last token is not an end-of-turn token."""
    return len(ids) >= max_completion_length and (not ids or ids[-1] not in stop_ids)


class RolloutStats:
    """Per-call health metrics of a batch of rollouts, reported through TRL's ``log_metric`` hook."""

    def __init__(self, max_completion_length: int, stop_ids: Sequence[int]) -> None:
        self.max_completion_length = max_completion_length
        self.stop_ids = list(stop_ids)

    def __call__(self, texts: list[str], completion_ids: list[list[int]] | None, log_metric: Callable | None) -> None:
        if log_metric is None:
            return
        log_metric("repetition_rate", sum(is_repetitive(t) for t in texts) / max(1, len(texts)))
        if completion_ids is not None:
            over = sum(is_overlong(ids, self.max_completion_length, self.stop_ids) for ids in completion_ids)
            log_metric("overlong_rate", over / max(1, len(completion_ids)))


class PointwiseRMReward:
    """GRPO reward = the frozen point-wise RM's score of (prompt history + rollout) (§2.1.2), minus
    ``overlong_penalty`` for a rollout cut at the length limit.

    The penalty is what keeps a small policy from buying reward with length: an RM trained on short reference
    answers still scores a longer answer's extra words, and a rollout that never ends is truncated mid-thought
    (§2.1.2 reports the truncation rate falling from 5.27% to 0.38%).

    Args:
        scorer: a :class:`forge.training.reward_model.RewardScorer` (or anything with ``score(histories, answers)``).
        max_completion_length: GRPO's completion budget, to count overlong (truncated) rollouts.
        stop_ids: token ids that end a turn.
        overlong_penalty: subtracted from a truncated rollout's score (0: none).
    """

    __name__ = "rm_pointwise"

    def __init__(
        self, scorer: Any, max_completion_length: int, stop_ids: Sequence[int] = (), overlong_penalty: float = 0.0
    ) -> None:
        self.scorer = scorer
        self.stats = RolloutStats(max_completion_length, stop_ids)
        self.overlong_penalty = overlong_penalty

    def __call__(self, prompts: list[Chat], completions: list[Any], completion_ids=None, log_metric=None, **kwargs):
        texts = [completion_text(c) for c in completions]
        self.stats(texts, completion_ids, log_metric)
        scores = self.scorer.score([list(p) for p in prompts], texts)
        if log_metric is not None:
            log_metric("rm_score", sum(scores) / max(1, len(scores)))
        if not self.overlong_penalty or completion_ids is None:
            return scores
        limit, stops = self.stats.max_completion_length, self.stats.stop_ids
        return [s - self.overlong_penalty * is_overlong(ids, limit, stops) for s, ids in zip(scores, completion_ids,
                                                                                             strict=True)]


# --- trainer --------------------------------------------------------------------------------------------------


def build_grpo_config(
    s: GRPOSettings,
    runtime: TrainingRuntimeConfig,
    work_dir: Path,
    generation: GenerationConfig | None = None,
    seed: int = 0,
    reward_weights: Sequence[float] | None = None,
    vllm_server_url: str | None = None,
) -> GRPOConfig:
    """TRL's ``GRPOConfig`` from the profile's settings; every default that bites on CPU set explicitly
    (docs/stack.md). ``GRPOSettings`` has already checked that the batch divides into rollout groups.

    With ``s.use_vllm`` the rollouts run in vLLM sized by ``generation.vllm``: inside the training processes (TRL
    colocate mode), or on the stage's own server at ``vllm_server_url`` (server mode; started by
    :func:`train_grpo`). Building the config imports nothing from vLLM, so a CPU test can validate a GPU profile.
    """
    vllm: dict[str, Any] = {"use_vllm": False}
    if s.use_vllm:
        v = (generation or GenerationConfig()).vllm
        vllm = {"use_vllm": True, "vllm_mode": v.trl_mode}
        if v.trl_mode == "colocate":
            vllm |= {
                "vllm_gpu_memory_utilization": v.gpu_memory_utilization,
                "vllm_tensor_parallel_size": v.tensor_parallel_size,
                "vllm_max_model_length": v.max_model_len,
                "vllm_enable_sleep_mode": True,
            }
        elif vllm_server_url is None:
            raise ValueError("generation.vllm.trl_mode is server but the stage has no server: GRPO stages run "
                             "through forge.training.grpo.train_grpo, which starts one")
        else:  # the server was sized when it started (forge/training/vllm_server.py)
            vllm |= {"vllm_server_base_url": vllm_server_url, "vllm_server_timeout": v.server_start_timeout_s}
    args = common_trainer_args(work_dir, runtime, seed=seed, save_steps=s.save_steps)
    args["lr_scheduler_type"] = "constant"  # a short RL run should not spend half its steps at a decayed rate
    return GRPOConfig(
        **args,
        max_steps=s.max_steps,
        learning_rate=s.learning_rate,
        per_device_train_batch_size=s.per_device_batch_size,
        steps_per_generation=s.steps_per_generation,
        num_generations=s.num_generations,
        max_completion_length=s.max_completion_length,
        temperature=s.temperature,
        top_p=1.0,
        beta=s.beta,
        loss_type=s.loss_type,
        scale_rewards=s.scale_rewards,
        logging_steps=1,  # one record per step: the reward curve the tests and MLflow read
        log_completions=False,
        reward_weights=list(reward_weights) if reward_weights is not None else None,
        **vllm,
    )


class MixedSamplingGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` sampling its rollouts under the autocast its training forwards run under (bf16 where
    ``runtime.bf16`` resolves true; none in fp32). TRL 1.16 calls ``generate`` outside autocast, so on a bf16 host
    the policy sampled in fp32 what it was then scored and trained on in bf16. Under autocast the rollouts come from
    the distribution the loss sees, and with the CPU decode attention (forge/attention.py) they are
    faster too: 1.2x a GRPO stage's sampling on an AMD EPYC 25/17 (docs/scale.md "Attention for one new token")."""

    def _generate_single_turn(self, *args, **kwargs):
        with self.accelerator.autocast():
            return super()._generate_single_turn(*args, **kwargs)


class LogitsGRPOTrainer(MixedSamplingGRPOTrainer):
    """TRL's ``GRPOTrainer`` with the per-token log-probabilities (and entropies) of the completions taken from the
    model's logits instead of TRL 1.16's fused LM head (``runtime.fused_lm_head: false``; why, in
    :class:`forge.training.sft.LogitsLossSFTTrainer`). Only the last ``logits_to_keep + 1`` positions are projected,
    divided by the sampling temperature as TRL does; positions outside the attention mask get 0, as the fused head
    leaves them. Multimodal inputs and the MoE aux loss, which Forge never uses, go to TRL's own path."""

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **media):
        if compute_aux_loss or any(v is not None for v in media.values()):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss, **media)
        batch_size = batch_size or input_ids.size(0)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start:start + batch_size], attention_mask[start:start + batch_size]
            with self.accelerator.autocast():
                logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=logits_to_keep + 1,
                               use_cache=False).logits
            logp = (logits[:, :-1].float() / self.temperature).log_softmax(-1)
            keep = mask[:, -logits_to_keep:].bool()
            logps.append(logp.gather(-1, ids[:, -logits_to_keep:].unsqueeze(-1)).squeeze(-1).masked_fill(~keep, 0.0))
            if compute_entropy:
                entropies.append((-(logp.exp() * logp).sum(-1)).masked_fill(~keep, 0.0))
        return torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None


@dataclass
class GRPOResult:
    out_dir: Path
    curve: list[dict[str, float]] = field(default_factory=list)  # one record per step
    steps: int = 0
    seconds: float = 0.0
    resumed_from_step: int | None = None

    def series(self, key: str) -> tuple[list[int], list[float]]:
        pts = [(int(r["step"]), float(r[key])) for r in self.curve if key in r]
        return [p[0] for p in pts], [p[1] for p in pts]

    def window_metrics(self, keys: Sequence[str]) -> dict[str, float]:
        """``<key>_first20`` / ``<key>_last20``: each logged key's mean over the first and the last 20% of steps (the
        windows in which the paper reads its RL curves' trends)."""
        out: dict[str, float] = {}
        for key in keys:
            if self.series(key)[1]:
                out[f"{key}_first20"] = self.window_mean(key, 0.0, 0.2)
                out[f"{key}_last20"] = self.window_mean(key, 0.8, 1.0)
        return out

    def window_mean(self, key: str, start: float, end: float) -> float:
        """Mean of ``key`` over the steps in the fractional window ``[start, end)`` of the run."""
        _, values = self.series(key)
        n = len(values)
        lo = round(start * n)
        hi = max(lo + 1, round(end * n))
        window = values[lo:hi]
        return sum(window) / len(window) if window else float("nan")


class _StepRecords(TrainerCallback):
    """Keeps every per-step GRPO log record (reward, clipped ratio, our metrics)."""

    def __init__(self) -> None:
        self.records: list[dict[str, float]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            numbers = {k: v for k, v in logs.items() if isinstance(v, float | int)}
            self.records.append({"step": state.global_step, **numbers})


def run_grpo(
    policy_dir: Path,
    prompts: list[dict[str, Any]],
    reward_funcs: list[Callable],
    settings: GRPOSettings,
    runtime: TrainingRuntimeConfig,
    out_dir: Path,
    *,
    seed: int = 0,
    stage: str = "grpo",
    generation: GenerationConfig | None = None,
    log_metrics: MetricsLogger | None = None,
    reward_weights: Sequence[float] | None = None,
    vllm_server_url: str | None = None,
) -> GRPOResult:
    """GRPO from the policy in ``policy_dir`` over ``prompts``; the trained policy is written to ``out_dir``.
    The reward is the sum of ``reward_funcs`` weighted by ``reward_weights`` (default: all 1); TRL logs each one.
    ``vllm_server_url``: the stage's vLLM server in TRL's server mode (see :func:`train_grpo`).

    A checkpoint left in the work dir by a killed run is resumed (the per-step curve then starts there).
    """
    run = ResumableTraining(out_dir, runtime)
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    model = AutoModelForCausalLM.from_pretrained(policy_dir)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    # Stop at the end of the assistant turn (the tokenizer's eos is <|im_end|>).
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    records = _StepRecords()
    trainer = (MixedSamplingGRPOTrainer if runtime.fused_lm_head else LogitsGRPOTrainer)(
        model=model,
        reward_funcs=reward_funcs,
        args=build_grpo_config(settings, runtime, run.work_dir, generation, seed, reward_weights, vllm_server_url),
        train_dataset=Dataset.from_list(prompts),
        processing_class=tokenizer,
        callbacks=[records, ForwardMetrics(log_metrics, prefix=f"{stage}/")],
    )
    if getattr(trainer, "ref_model", None) is not None:
        # TRL loads the KL reference once the process group is up; under an FSDP config that gives zeros on all but
        # rank 0, and TRL does not wrap (so never broadcasts) a reference it only evaluates on CPU ranks.
        broadcast_from_rank0(trainer.accelerator.unwrap_model(trainer.ref_model))
    logger.info("%s: %d prompts × %d rollouts, %d steps", stage, len(prompts), settings.num_generations,
                settings.max_steps)
    run.train(trainer, stage)
    run.finish(trainer, tokenizer)
    return GRPOResult(
        out_dir=run.out_dir,
        curve=records.records,
        steps=trainer.state.global_step,
        seconds=run.seconds,
        resumed_from_step=run.resumed_from_step,
    )


def train_grpo(
    runtime: TrainingRuntimeConfig,
    out_dir: Path,
    *,
    policy_dir: Path,
    settings: GRPOSettings,
    generation: GenerationConfig | None = None,
    log_metrics: MetricsLogger | None = None,
    **kwargs: Any,
) -> GRPOResult:
    """:func:`run_grpo` as a stage runs it: in this process or on every rank of an ``accelerate launch``
    (forge/training/launch.py), inside the stage's vLLM server when the profile rolls out in TRL's server mode
    (forge/training/vllm_server.py: started on the starting checkpoint, stopped when training ends)."""
    from forge.training.vllm_server import rollout_server

    # Its log beside the output, not in the launch folder: run_training empties that before the ranks start.
    with rollout_server(settings, generation, policy_dir, beside(out_dir, "vllm")) as url:
        return run_training(run_grpo, runtime, out_dir, log_metrics=log_metrics, policy_dir=policy_dir,
                            settings=settings, generation=generation, vllm_server_url=url, **kwargs)
