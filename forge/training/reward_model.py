"""Stage 4a: the point-wise (general) reward model, a Bradley–Terry scorer on preference pairs (§2.1.2).

A sequence-classification head (one logit) on the policy's own backbone reads a conversation that ends with
one assistant answer and returns a scalar score. Training minimises the Bradley–Terry loss
``-log σ(r(prompt, chosen) − r(prompt, rejected))`` with TRL's ``RewardTrainer``. Conversations are rendered
with Forge's chat template and tokenized here (``chosen_ids``/``rejected_ids`` columns), so the RM sees exactly
the text the policy writes; long conversations are cut from the left, because the answer at the end is what is
being judged and Llama's classification head reads the last token.

Pairs come from HH-RLHF (``data/pools/preferences.jsonl``) plus pairs Forge makes itself: the SFT mix's reference
answer over the weak checkpoint's (:mod:`forge.training.pairs`) and, with refinement on, a refined answer over its
unrefined draft (:mod:`forge.data.refinement`).

    result = train_reward_model(policy_dir, train_pairs, eval_pairs, cfg.pointwise_rl.rm, cfg.runtime, out_dir)
    scorer = RewardScorer(out_dir)             # frozen; scores chats for GRPO
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedTokenizerBase
from trl import RewardConfig, RewardTrainer

from forge.chat import messages_to_hf, render_chat
from forge.config import RewardModelSettings, TrainingRuntimeConfig
from forge.data.schemas import PreferencePair
from forge.training.checkpoints import (
    ForwardMetrics,
    MetricsLogger,
    ResumableTraining,
    apply_runtime,
    common_trainer_args,
    training_device,
)

logger = logging.getLogger(__name__)

Chat = list[dict[str, Any]]


def encode_scored_chat(tokenizer: PreTrainedTokenizerBase, history: Chat, answer: str, max_length: int) -> list[int]:
    """Token ids of ``history`` + one assistant ``answer``, keeping the last ``max_length`` tokens.

    The answer is given as the text the policy generated (``<think>`` block included, if any), so it is placed
    verbatim as the assistant content.
    """
    text, _ = render_chat(tokenizer, [*history, {"role": "assistant", "content": answer}])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids[-max_length:]


def tokenize_pairs(tokenizer: PreTrainedTokenizerBase, pairs: list[PreferencePair], max_length: int) -> Dataset:
    """``chosen_ids`` / ``rejected_ids`` columns for TRL's ``RewardTrainer`` (pre-tokenized: it skips its own)."""
    chosen, rejected = [], []
    for pair in pairs:
        history = messages_to_hf(pair.prompt)
        chosen.append(encode_scored_chat(tokenizer, history, pair.chosen, max_length))
        rejected.append(encode_scored_chat(tokenizer, history, pair.rejected, max_length))
    return Dataset.from_dict({"chosen_ids": chosen, "rejected_ids": rejected})


def load_reward_model(model_dir: str | Path):
    """``(model, tokenizer)``: a one-logit sequence classifier on the checkpoint's backbone.

    From a causal-LM checkpoint the score head is new (initialised by transformers); from a saved RM it is the
    trained head. ``pad_token_id`` must be set: Llama's classifier reads the last non-pad position.
    """
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def load_frozen_scorer(model_dir: str | Path, device: str | torch.device | None, bf16: bool):
    """:func:`load_reward_model`, frozen, on ``device`` (default :func:`training_device`), in bf16 when asked."""
    model, tokenizer = load_reward_model(model_dir)
    model = model.to(device=device or training_device(), dtype=torch.bfloat16 if bf16 else None)
    return model.eval().requires_grad_(False), tokenizer


class FrozenScorer:
    """A frozen reward model read from ``model_dir`` (:func:`load_frozen_scorer`), loaded when it first scores.

    It pickles as its directory and settings, never its weights: a GRPO stage's reward is built in the task and
    crosses to each rank of a launched stage (forge/training/launch.py), which loads the RM on its own device
    (:func:`forge.training.checkpoints.training_device`) as it unpickles it. The task itself then never holds a
    copy.

    Args:
        model_dir: a saved RM.
        max_length: tokens read per input (left-truncated).
        batch_size: inputs per forward pass.
        device: where it scores (default: :func:`forge.training.checkpoints.training_device`, the policy's; a
            pickled scorer always takes its rank's).
        bf16: score in bf16 (the profile's ``runtime.bf16``).
    """

    def __init__(self, model_dir: str | Path, max_length: int = 1024, batch_size: int = 16,
                 device: str | torch.device | None = None, bf16: bool = False) -> None:
        self.model_dir, self.max_length, self.batch_size = str(model_dir), max_length, batch_size
        self.device, self.bf16 = device, bf16
        self._loaded: tuple | None = None

    def _load(self) -> tuple:
        if self._loaded is None:
            self._loaded = load_frozen_scorer(self.model_dir, self.device, self.bf16)
        return self._loaded

    @property
    def model(self):
        return self._load()[0]

    @property
    def tokenizer(self):
        return self._load()[1]

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_loaded": None, "device": None}

    def __setstate__(self, state: dict) -> None:
        # A rank unpickles its job before any process group exists, and loads now: under an FSDP config a
        # from_pretrained once the group is up gives zeros on every rank but the first (docs/scale.md).
        self.__dict__.update(state)
        self._load()


@torch.inference_mode()
def score_ids(model, pad_token_id: int, sequences: list[list[int]], batch_size: int = 16) -> list[float]:
    """Scores of already-tokenized sequences, right-padded in batches; returns one float per sequence."""
    model.eval()
    device = next(model.parameters()).device
    scores: list[float] = []
    for start in range(0, len(sequences), batch_size):
        chunk = sequences[start : start + batch_size]
        width = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, seq in enumerate(chunk):
            ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[row, : len(seq)] = 1
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits  # (batch, 1)
        scores.extend(logits[:, 0].float().tolist())
    return scores


def pair_wins(model, tokenizer, pairs: list[PreferencePair], max_length: int) -> list[bool]:
    """Per pair: does the chosen answer score strictly above the rejected one (a tie counts as wrong)?"""
    if not pairs:
        return []
    ds = tokenize_pairs(tokenizer, pairs, max_length)
    chosen = score_ids(model, tokenizer.pad_token_id, ds["chosen_ids"])
    rejected = score_ids(model, tokenizer.pad_token_id, ds["rejected_ids"])
    return [c > r for c, r in zip(chosen, rejected, strict=True)]


def pair_accuracy(model, tokenizer, pairs: list[PreferencePair], max_length: int) -> float:
    """Share of pairs whose chosen answer scores strictly above the rejected one (ties count as wrong)."""
    wins = pair_wins(model, tokenizer, pairs, max_length)
    return sum(wins) / len(wins) if wins else float("nan")


def accuracy_by_source(model, tokenizer, pairs: list[PreferencePair], max_length: int) -> dict[str, float]:
    """Pair accuracy per ``source`` (HH-RLHF, Forge's reference-over-weak pairs, refinement pairs), plus ``"all"``."""
    wins = pair_wins(model, tokenizer, pairs, max_length)
    groups: dict[str, list[bool]] = {"all": wins}
    for pair, win in zip(pairs, wins, strict=True):
        groups.setdefault(pair.source, []).append(win)
    return {name: sum(ws) / len(ws) if ws else float("nan") for name, ws in groups.items()}


@dataclass
class RewardModelResult:
    out_dir: Path
    accuracy_before: float
    accuracy_after: float
    by_source_before: dict[str, float] = field(default_factory=dict)  # held-out accuracy per pair source
    by_source_after: dict[str, float] = field(default_factory=dict)
    train_curve: list[tuple[int, float]] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    train_pairs: int = 0
    eval_pairs: int = 0
    resumed_from_step: int | None = None


def reward_config(
    cfg: RewardModelSettings, runtime: TrainingRuntimeConfig, work_dir: Path, seed: int = 0
) -> RewardConfig:
    """TRL's ``RewardConfig`` for the profile (bf16 / gradient checkpointing from ``runtime``)."""
    return RewardConfig(
        **common_trainer_args(work_dir, runtime, seed=seed, save_steps=cfg.save_steps),
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        per_device_train_batch_size=cfg.batch_size,
        warmup_steps=max(1, cfg.max_steps // 20),
        max_length=None,  # already cut from the left by tokenize_pairs; TRL would drop long pairs instead
        logging_steps=max(1, min(10, cfg.max_steps // 10)),
        eval_strategy="no",
    )


def build_reward_trainer(
    model_dir: Path,
    train_pairs: list[PreferencePair],
    cfg: RewardModelSettings,
    runtime: TrainingRuntimeConfig,
    work_dir: Path,
    seed: int = 0,
    log_metrics: MetricsLogger | None = None,
) -> RewardTrainer:
    """A ``RewardTrainer`` over pre-tokenized pairs, ready to ``train()``."""
    apply_runtime(runtime)
    model, tokenizer = load_reward_model(model_dir)
    return RewardTrainer(
        model=model,
        args=reward_config(cfg, runtime, work_dir, seed),
        train_dataset=tokenize_pairs(tokenizer, train_pairs, cfg.max_length),
        processing_class=tokenizer,
        callbacks=[ForwardMetrics(log_metrics, prefix="rm_pointwise/")],
    )


def train_reward_model(
    model_dir: Path,
    train_pairs: list[PreferencePair],
    eval_pairs: list[PreferencePair],
    cfg: RewardModelSettings,
    runtime: TrainingRuntimeConfig,
    out_dir: Path,
    seed: int = 0,
    log_metrics: MetricsLogger | None = None,
) -> RewardModelResult:
    """Train the Bradley–Terry RM from ``model_dir``'s backbone; write it to ``out_dir`` atomically.

    Held-out pair accuracy is measured before (fresh head) and after training. A checkpoint left in the
    work dir by a killed run is resumed.
    """
    run = ResumableTraining(out_dir, runtime)
    trainer = build_reward_trainer(model_dir, train_pairs, cfg, runtime, run.work_dir, seed, log_metrics)
    tokenizer = trainer.processing_class
    before = accuracy_by_source(trainer.model, tokenizer, eval_pairs, cfg.max_length)
    logger.info("rm-pointwise: %d train pairs, held-out accuracy %s before", len(train_pairs), _fmt(before))
    run.train(trainer, "rm-pointwise")
    after = accuracy_by_source(trainer.model, tokenizer, eval_pairs, cfg.max_length)
    logger.info("rm-pointwise: %d steps, held-out accuracy %s after", trainer.state.global_step, _fmt(after))
    run.finish(trainer, tokenizer)
    curve = [(int(r["step"]), float(r["loss"])) for r in trainer.state.log_history if "loss" in r]
    return RewardModelResult(
        out_dir=run.out_dir,
        accuracy_before=before["all"],
        accuracy_after=after["all"],
        by_source_before=before,
        by_source_after=after,
        train_curve=curve,
        steps=trainer.state.global_step,
        seconds=run.seconds,
        train_pairs=len(train_pairs),
        eval_pairs=len(eval_pairs),
        resumed_from_step=run.resumed_from_step,
    )


def heldout_metrics(result: RewardModelResult, short_names: dict[str, str]) -> dict[str, float]:
    """The RM's figures as flat metrics: held-out accuracy after and before training, overall and per pair source
    (``short_names`` maps a source to its metric suffix, e.g. HH-RLHF's file → ``hh``), and the pair counts."""
    metrics = {"heldout_pair_accuracy": result.accuracy_after, "heldout_pair_accuracy_before": result.accuracy_before,
               "train_pairs": result.train_pairs, "heldout_pairs": result.eval_pairs}
    for source, name in short_names.items():
        if source in result.by_source_after:
            metrics[f"heldout_pair_accuracy_{name}"] = result.by_source_after[source]
            metrics[f"heldout_pair_accuracy_{name}_before"] = result.by_source_before[source]
    return metrics


def _fmt(by_source: dict[str, float]) -> str:
    return ", ".join(f"{name} {acc:.3f}" for name, acc in by_source.items())


class RewardScorer(FrozenScorer):
    """A frozen point-wise RM that scores (history, answer) chats; what GRPO's reward function calls
    (``model_dir``: ``train_reward_model``'s output; the settings: :class:`FrozenScorer`)."""

    def score(self, histories: list[Chat], answers: list[str]) -> list[float]:
        seqs = [encode_scored_chat(self.tokenizer, h, a, self.max_length)
                for h, a in zip(histories, answers, strict=True)]
        return score_ids(self.model, self.tokenizer.pad_token_id, seqs, self.batch_size)
