"""Stage 5: the pair-wise reward model with the swap-consistency regulariser, and the "beats the reference" reward.

§2.1.3: responses of a strong and a weak checkpoint to the same prompts form pairs; a checklist filter keeps a
win–loss label only when it agrees with "strong beats weak"; the RM reads (prompt with the whole dialogue
history, response A, response B) and outputs a reward difference d(A, B). Training loss (xu2025unified):

    L = BCE(σ(d(A, B)), y)  +  λ · MSE(d(A, B), −d(B, A))

The second term asks the verdict to be antisymmetric under a swap, which removes position bias: a model that
prefers slot A whatever it holds has d(A, B) ≈ d(B, A), and pays for it. Pair-wise GRPO then rewards a rollout
with 1 when the RM says it beats the prompt's reference answer, else 0.

    split = pairwise_pairs(prompts, strong, weak, tokenizer, ...)     # forge/training/pairs.py, checklist-filtered
    result = train_pairwise_rm(policy_dir, split.train, split.heldout, cfg.pairwise_rl, cfg.runtime, out_dir)
    reward = BeatsReferenceReward(PairwiseScorer(out_dir), win=1.0, loss=0.0)
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from datasets import Dataset
from transformers import PreTrainedTokenizerBase, Trainer, TrainingArguments

from forge.chat import completion_text, render_chat
from forge.config import PairwiseRLConfig, RewardModelSettings, TrainingRuntimeConfig
from forge.training.checkpoints import ForwardMetrics, MetricsLogger, ResumableTraining, common_trainer_args
from forge.training.grpo import RolloutStats
from forge.training.pairs import StrongWeakPair
from forge.training.reward_model import FrozenScorer, load_reward_model, score_ids

logger = logging.getLogger(__name__)

Chat = list[dict[str, Any]]


# --- model input ----------------------------------------------------------------------------------------------------


def encode_pair(
    tokenizer: PreTrainedTokenizerBase, history: Chat, a: str, b: str, max_length: int
) -> list[int]:
    """Token ids of the judge input: the rendered dialogue history, then response A, then response B.

    Each response keeps at most a third of ``max_length`` tokens; the history is cut from the left to fit the
    rest, so the latest turns (the question being answered) are the ones kept.
    """
    budget = max(8, max_length // 3)
    hist_text, _ = render_chat(tokenizer, history)

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    a_ids, b_ids = ids(a)[:budget], ids(b)[:budget]
    head_a, head_b, tail = ids("\n[Response A]\n"), ids("\n[Response B]\n"), ids("\n[Verdict]")
    room = max_length - len(a_ids) - len(b_ids) - len(head_a) - len(head_b) - len(tail)
    hist_ids = ids(hist_text)[-room:] if room > 0 else []
    return [*hist_ids, *head_a, *a_ids, *head_b, *b_ids, *tail]


def pairwise_dataset(
    tokenizer: PreTrainedTokenizerBase, pairs: list[StrongWeakPair], max_length: int, seed: int
) -> Dataset:
    """Columns ``ab_ids`` (as presented), ``ba_ids`` (swapped) and ``label`` (1.0 when slot A holds the strong
    answer). Which slot the strong answer takes is a seeded coin flip per pair."""
    rng = random.Random(f"{seed}:pairwise-order")
    ab, ba, labels = [], [], []
    for pair in pairs:
        first, second, label = (pair.strong, pair.weak, 1.0) if rng.random() < 0.5 else (pair.weak, pair.strong, 0.0)
        ab.append(encode_pair(tokenizer, pair.history, first, second, max_length))
        ba.append(encode_pair(tokenizer, pair.history, second, first, max_length))
        labels.append(label)
    return Dataset.from_dict({"ab_ids": ab, "ba_ids": ba, "label": labels})


class PairCollator:
    """Right-pads ``ab_ids`` and ``ba_ids`` into one ``(2 × batch, longest)`` tensor: rows [0, B) are the pairs as
    presented, rows [B, 2B) the same pairs swapped (one forward pass gives both d(A, B) and d(B, A))."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad = pad_token_id

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        seqs = [e["ab_ids"] for e in examples] + [e["ba_ids"] for e in examples]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[row, : len(seq)] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([e["label"] for e in examples])}


def pairwise_loss(d_ab: torch.Tensor, d_ba: torch.Tensor, labels: torch.Tensor, swap_weight: float) -> torch.Tensor:
    """BCE of σ(d(A, B)) against the label, plus ``swap_weight`` × MSE(d(A, B), −d(B, A)). Shapes: ``(batch,)``."""
    loss = F.binary_cross_entropy_with_logits(d_ab, labels)
    if swap_weight > 0:
        loss = loss + swap_weight * F.mse_loss(d_ab, -d_ba)
    return loss


class PairwiseRMTrainer(Trainer):
    """HF ``Trainer`` with the pairwise loss; checkpoints and resume come from the ``Trainer``."""

    def __init__(self, *args: Any, swap_weight: float = 1.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.swap_weight = swap_weight

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels").float()
        logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], use_cache=False).logits
        d = logits[:, 0]  # (2B,)
        d_ab, d_ba = d[: len(labels)], d[len(labels) :]
        loss = pairwise_loss(d_ab, d_ba, labels, self.swap_weight)
        return (loss, logits) if return_outputs else loss


# --- evaluation -------------------------------------------------------------------------------------------------


@dataclass
class PairwiseEval:
    accuracy: float  # verdict on the pair as presented agrees with the label
    position_bias_rate: float  # the same slot wins in both orders: the verdict flips when A and B swap
    pairs: int


def evaluate_pairwise(model, tokenizer, heldout: Dataset) -> PairwiseEval:
    """Accuracy and position-bias rate on held-out pairs (same ``pairwise_dataset`` rows for every model)."""
    d_ab = score_ids(model, tokenizer.pad_token_id, heldout["ab_ids"])
    d_ba = score_ids(model, tokenizer.pad_token_id, heldout["ba_ids"])
    labels = heldout["label"]
    n = len(labels)
    correct = sum((x > 0) == (y > 0.5) for x, y in zip(d_ab, labels, strict=True))
    flips = sum((x > 0) == (y > 0) for x, y in zip(d_ab, d_ba, strict=True))
    return PairwiseEval(accuracy=correct / n, position_bias_rate=flips / n, pairs=n)


@dataclass
class PairwiseRMResult:
    out_dir: Path
    before: PairwiseEval
    after: PairwiseEval
    train_curve: list[tuple[int, float]] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    train_pairs: int = 0
    resumed_from_step: int | None = None


def pairwise_rm_args(
    cfg: RewardModelSettings, runtime: TrainingRuntimeConfig, work_dir: Path, seed: int = 0
) -> TrainingArguments:
    """``TrainingArguments`` of the pairwise RM (its own columns reach the collator: no column pruning)."""
    return TrainingArguments(
        **common_trainer_args(work_dir, runtime, seed=seed, save_steps=cfg.save_steps),
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        per_device_train_batch_size=cfg.batch_size,
        warmup_steps=max(1, cfg.max_steps // 20),
        logging_steps=max(1, min(10, cfg.max_steps // 10)),
        remove_unused_columns=False,
        eval_strategy="no",
    )


def train_pairwise_rm(
    model_dir: Path,
    train_pairs: list[StrongWeakPair],
    heldout_pairs: list[StrongWeakPair],
    cfg: PairwiseRLConfig,
    runtime: TrainingRuntimeConfig,
    out_dir: Path,
    seed: int = 0,
    log_metrics: MetricsLogger | None = None,
) -> PairwiseRMResult:
    """Train the pairwise RM (weight ``cfg.swap_consistency_weight`` on the swap term); write it atomically."""
    run = ResumableTraining(out_dir, runtime)
    model, tokenizer = load_reward_model(model_dir)
    train_ds = pairwise_dataset(tokenizer, train_pairs, cfg.rm.max_length, seed)
    heldout_ds = pairwise_dataset(tokenizer, heldout_pairs, cfg.rm.max_length, seed + 1)
    before = evaluate_pairwise(model, tokenizer, heldout_ds)
    trainer = PairwiseRMTrainer(
        model=model,
        args=pairwise_rm_args(cfg.rm, runtime, run.work_dir, seed),
        train_dataset=train_ds,
        data_collator=PairCollator(tokenizer.pad_token_id),
        processing_class=tokenizer,
        callbacks=[ForwardMetrics(log_metrics, prefix="rm_pairwise/")],
        swap_weight=cfg.swap_consistency_weight,
    )
    run.train(trainer, "rm-pairwise")
    after = evaluate_pairwise(trainer.model, tokenizer, heldout_ds)
    logger.info("rm-pairwise (λ=%g): held-out accuracy %.3f, position-bias rate %.3f (before %.3f / %.3f)",
                cfg.swap_consistency_weight, after.accuracy, after.position_bias_rate, before.accuracy,
                before.position_bias_rate)
    run.finish(trainer, tokenizer)
    return PairwiseRMResult(
        out_dir=run.out_dir,
        before=before,
        after=after,
        train_curve=[(int(r["step"]), float(r["loss"])) for r in trainer.state.log_history if "loss" in r],
        steps=trainer.state.global_step,
        seconds=run.seconds,
        train_pairs=len(train_pairs),
        resumed_from_step=run.resumed_from_step,
    )


# --- pair-wise GRPO reward --------------------------------------------------------------------------------------


class PairwiseScorer(FrozenScorer):
    """A frozen pairwise RM: ``margin(history, x, y)`` = ½ (d(x, y) − d(y, x)), antisymmetric by construction
    (loaded as :class:`forge.training.reward_model.FrozenScorer` says)."""

    def both_orders(self, histories: list[Chat], xs: list[str], ys: list[str]) -> list[tuple[float, float]]:
        """``(d(x, y), d(y, x))`` per item: the verdict with x in slot A, then with the two swapped."""
        xy = [encode_pair(self.tokenizer, h, x, y, self.max_length) for h, x, y in zip(histories, xs, ys, strict=True)]
        yx = [encode_pair(self.tokenizer, h, y, x, self.max_length) for h, x, y in zip(histories, xs, ys, strict=True)]
        pad = self.tokenizer.pad_token_id
        d_xy, d_yx = score_ids(self.model, pad, xy, self.batch_size), score_ids(self.model, pad, yx, self.batch_size)
        return list(zip(d_xy, d_yx, strict=True))

    def margins(self, histories: list[Chat], xs: list[str], ys: list[str]) -> list[float]:
        return [(a - b) / 2 for a, b in self.both_orders(histories, xs, ys)]


class BeatsReferenceReward:
    """Pair-wise GRPO reward (§2.1.3): ``win`` when the pairwise RM says the rollout beats the reference answer
    (the ``reference`` dataset column), else ``loss``. Judged in both orders, so slot position cannot decide it."""

    __name__ = "beats_reference"

    def __init__(
        self, scorer: Any, *, win: float = 1.0, loss: float = 0.0, max_completion_length: int = 0,
        stop_ids: tuple[int, ...] = (),
    ) -> None:
        self.scorer, self.win, self.loss = scorer, win, loss
        self.stats = RolloutStats(max_completion_length, stop_ids)

    def __call__(self, prompts, completions, reference, completion_ids=None, log_metric=None, **kwargs):
        texts = [completion_text(c) for c in completions]
        self.stats(texts, completion_ids, log_metric)
        margins = self.scorer.margins([list(p) for p in prompts], texts, list(reference))
        return [self.win if m > 0 else self.loss for m in margins]
