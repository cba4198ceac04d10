"""Stage 3: supervised fine-tuning, one curriculum stage at a time, with TRL's ``SFTTrainer``.

The paper grows the context 32k → 64k → 256k (§2.1.1); the tiny profile 256 → 512 → 1024 tokens. Each
stage starts from the previous stage's output directory. Conversations are tokenized here with
:func:`forge.training.tokenizer.encode_chat`, so the loss mask is per assistant turn (a turn the critic or
a reviewer rejected has ``loss=False`` and is context only).

How the mask reaches the loss in TRL 1.16: a pre-tokenized dataset (it has ``input_ids``) skips TRL's
tokenization; ``_prepare_dataset`` then builds a ``labels`` column from ``completion_mask`` when
``completion_only_loss=True`` (token kept where the mask is 1, -100 elsewhere) and, unless it packs, drops
fully-masked rows; the collator pads ``labels`` with -100. Packed, Forge drops them from the held-out set itself.
:func:`build_sft_trainer` returns the trainer without training, so tests can inspect a collated batch.

    result = run_sft_stage(base_dir, train_rows, eval_rows, cfg.sft.curriculum[0], cfg.sft, cfg.runtime, out)
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase, Trainer
from trl import SFTConfig as TRLSFTConfig
from trl import SFTTrainer
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

from forge.config import SFTConfig, SFTStageConfig, TrainingRuntimeConfig
from forge.data.schemas import ChatSample
from forge.training.checkpoints import (
    ForwardMetrics,
    MetricsLogger,
    ResumableTraining,
    apply_runtime,
    common_trainer_args,
)
from forge.training.launch import beside, rank, sum_over_ranks
from forge.training.tokenizer import encode_chat

logger = logging.getLogger(__name__)

TOKEN_SCHEMA = pa.schema([("input_ids", pa.list_(pa.int32())), ("completion_mask", pa.list_(pa.int8()))])
BATCH_TOKENS = 32_768  # tokens encoded before they are written: what tokenizing holds (~36 bytes a token as Python ints)


def tokenize_rows(
    tokenizer: PreTrainedTokenizerBase, rows: Iterable[ChatSample], max_length: int, path: Path
) -> Dataset:
    """Encode conversations into ``path`` (an Arrow file, written ``BATCH_TOKENS`` at a time) and return it as a
    memory-mapped ``datasets.Dataset`` with ``input_ids`` and ``completion_mask`` columns. ``rows`` may be a
    stream (:class:`forge.data.mix.MixRows`): neither the rows nor their tokens are ever all in memory, so the
    GPU profile's 2B-token mix tokenizes in the memory of one batch (tests/training/test_sft.py checks the bound).

    Rows whose trained turns fall entirely past ``max_length`` keep no loss tokens: with packing TRL keeps them (they
    fill packed rows and add nothing to the loss), so the held-out set drops them (:func:`_with_loss_tokens`).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, TOKEN_SCHEMA) as writer:

        def write(batch: list[dict[str, list[int]]]) -> None:
            columns = [pa.array([e[f.name] for e in batch], f.type) for f in TOKEN_SCHEMA]
            writer.write_batch(pa.record_batch(columns, schema=TOKEN_SCHEMA))

        batch, tokens = [], 0
        for row in rows:
            batch.append(encode_chat(tokenizer, row, max_length))
            tokens += len(batch[-1]["input_ids"])
            if tokens >= BATCH_TOKENS:
                write(batch)
                batch, tokens = [], 0
        if batch:
            write(batch)
    return Dataset.from_file(str(path))


def _with_loss_tokens(eval_ds: Dataset, stage: SFTStageConfig) -> Dataset:
    """The held-out rows that keep a trained token at the stage's ``max_length``. With packing TRL keeps the others
    (it drops fully masked rows only when it truncates), and the Trainer averages the held-out loss per evaluation
    batch: a batch of such rows alone counted as a loss of 0 (or nan, 0/0), so the held-out loss read low or nan
    depending on how the rows fell into batches (tests/training/test_sft.py). In the tiny mix 20 of the 64 held-out
    rows keep no trained token at 256 tokens, 10 at 512, none at 1,024."""
    kept = eval_ds.filter(lambda row: any(row["completion_mask"]))
    if len(kept) == 0:
        raise ValueError(f"SFT stage {stage.name}: none of the {len(eval_ds)} held-out rows keeps an assistant token "
                         f"within max_length {stage.max_length} (every trained turn starts past it): the held-out loss "
                         "would be over nothing; raise max_length or hold out shorter conversations")
    if len(kept) < len(eval_ds):
        logger.info("sft %s: %d of %d held-out rows keep no trained token within %d tokens; the held-out loss is "
                    "over the other %d", stage.name, len(eval_ds) - len(kept), len(eval_ds), stage.max_length, len(kept))
    return kept


def _token_dir(work_dir: Path) -> Path:
    """This process's folder for tokenized rows and the maps TRL caches beside them, emptied first: a resumed
    stage tokenizes again rather than trusting files a killed run may have left half written; each rank of a
    launched stage tokenizes into its own."""
    folder = Path(work_dir) / "tokens" / f"rank-{rank()}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


class CountingCollator:
    """TRL's LM collator plus counts of real and padded positions, for the padding-fraction metric.

    Output of ``__call__``: ``input_ids`` / ``attention_mask`` / ``labels`` LongTensors of shape
    ``(batch, longest_in_batch)``, labels padded with -100.
    """

    def __init__(self, pad_token_id: int, inner: Any = None) -> None:
        self.inner = inner or DataCollatorForLanguageModeling(pad_token_id=pad_token_id)
        self.counting = True
        self.real_tokens = 0
        self.positions = 0

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.inner(examples)
        if self.counting:
            self.real_tokens += sum(len(e["input_ids"]) for e in examples)  # rows arrive already truncated
            self.positions += batch["input_ids"].numel()
        return batch


class PackedRowsCollator:
    """Batches of packed rows (TRL best-fit-decreasing packing: each row holds several samples, ``seq_lengths``
    says where each ends) kept as ``(batch, longest_row)`` with ``position_ids`` restarting at every sample.

    Without an ``attention_mask`` transformers builds a block-causal mask from the restarts, so no sample sees
    another. TRL's padding-free collator would instead flatten the whole batch into one row, which without
    varlen (flash-attention) kernels makes attention cost grow with the square of the *batch's* tokens: on CPU
    that is slower than padding. Rows are nearly full after best-fit packing, so little padding is left; the pad
    tail gets its own positions and -100 labels. The first label of every sample is -100 too (nothing before it
    in its own sample predicts it).
    """

    def __init__(self, pad_token_id: int) -> None:
        self.pad = pad_token_id

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        width = max(len(e["input_ids"]) for e in examples)
        ids = torch.full((len(examples), width), self.pad, dtype=torch.long)
        labels = torch.full((len(examples), width), -100, dtype=torch.long)
        positions = torch.zeros((len(examples), width), dtype=torch.long)
        for row, e in enumerate(examples):
            n = len(e["input_ids"])
            ids[row, :n] = torch.tensor(e["input_ids"])
            labels[row, :n] = torch.tensor(e.get("labels", e["input_ids"]))
            lengths = [*e.get("seq_lengths", [n]), *([width - n] if width > n else [])]
            positions[row] = torch.cat([torch.arange(k) for k in lengths])
        labels[positions == 0] = -100
        return {"input_ids": ids, "labels": labels, "position_ids": positions}


class LogitsLossSFTTrainer(SFTTrainer):
    """TRL's ``SFTTrainer`` with the loss taken from the model's own logits (transformers' ``Trainer.compute_loss``:
    the mean negative log-likelihood of the labelled tokens, ``num_items_in_batch`` across accumulation steps)
    instead of TRL 1.16's fused LM head, which projects and scores the hidden states in tiles
    (``trl/kernels/chunked_logprob.py``) so that the ``(batch, length, vocabulary)`` logits never exist at once.
    That saves a GPU's memory at a 150k vocabulary and long contexts; on CPU at the tiny profile's 4k vocabulary the
    tiles' forward and backward took half of every step (``runtime.fused_lm_head`` chooses; bench/sft_lm_head.py
    measures both side by side). TRL's per-step entropy and token-accuracy metrics, which
    only the fused head computes, are not logged (nothing in Forge reads them)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        return Trainer.compute_loss(self, model, {**inputs, "use_cache": False}, return_outputs, num_items_in_batch)


def build_sft_trainer(
    model_dir: Path,
    train_rows: Iterable[ChatSample],
    eval_rows: Iterable[ChatSample],
    stage: SFTStageConfig,
    sft: SFTConfig,
    runtime: TrainingRuntimeConfig,
    work_dir: Path,
    log_metrics: MetricsLogger | None = None,
) -> SFTTrainer:
    """An ``SFTTrainer`` for one curriculum stage, ready to ``train()`` (nothing trained yet)."""
    apply_runtime(runtime)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model.config.pad_token_id = tokenizer.pad_token_id
    tokens = _token_dir(work_dir)
    train_ds = tokenize_rows(tokenizer, train_rows, stage.max_length, tokens / "train.arrow")
    eval_ds = tokenize_rows(tokenizer, eval_rows, stage.max_length, tokens / "eval.arrow")
    if sft.assistant_only_loss:
        eval_ds = _with_loss_tokens(eval_ds, stage)
    args = TRLSFTConfig(
        **common_trainer_args(work_dir, runtime, seed=sft.seed, save_steps=sft.save_steps),
        max_steps=stage.max_steps,
        learning_rate=stage.learning_rate,
        per_device_train_batch_size=stage.per_device_batch_size,
        per_device_eval_batch_size=stage.per_device_batch_size,
        gradient_accumulation_steps=stage.gradient_accumulation_steps,
        warmup_steps=max(1, stage.max_steps // 20),
        max_length=stage.max_length,
        packing=sft.packing,
        # Our own per-turn mask is the loss mask: completion_only_loss folds `completion_mask` into labels.
        # assistant_only_loss stays off, it would re-render conversations with TRL's template and ignore it.
        completion_only_loss=sft.assistant_only_loss,
        assistant_only_loss=False,
        logging_steps=max(1, min(10, sft.save_steps)),
        eval_strategy="no",
    )
    trainer = (SFTTrainer if runtime.fused_lm_head else LogitsLossSFTTrainer)(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        # With packing TRL refuses a custom collator at construction (it wants its padding-free one), so the
        # packed-rows collator is swapped in right after; the counter measures padding either way.
        data_collator=None if sft.packing else CountingCollator(tokenizer.pad_token_id),
        callbacks=[ForwardMetrics(log_metrics, prefix="sft/", label=f"sft/{stage.name}/")],
    )
    if sft.packing:
        pad = tokenizer.pad_token_id
        trainer.data_collator = CountingCollator(pad, inner=PackedRowsCollator(pad))
    return trainer


@dataclass
class SFTStageResult:
    stage: str
    out_dir: Path
    eval_loss_before: float
    eval_loss_after: float
    train_curve: list[tuple[int, float]] = field(default_factory=list)
    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    padding_fraction: float = 0.0
    resumed_from_step: int | None = None
    train_rows: int = 0
    eval_rows: int = 0


def _evaluate(trainer: SFTTrainer) -> float:
    collator: CountingCollator = trainer.data_collator
    collator.counting = False  # padding is a training-throughput figure; eval batches would blur it
    try:
        return float(trainer.evaluate()["eval_loss"])
    finally:
        collator.counting = True


def run_sft_stage(
    model_dir: Path,
    train_rows: Iterable[ChatSample],
    eval_rows: Iterable[ChatSample],
    stage: SFTStageConfig,
    sft: SFTConfig,
    runtime: TrainingRuntimeConfig,
    out_dir: Path,
    log_metrics: MetricsLogger | None = None,
) -> SFTStageResult:
    """Fine-tune the model in ``model_dir`` for one curriculum stage; write the result to ``out_dir`` atomically.

    A checkpoint left in the stage's work dir (``.<out_dir name>.work``) by a killed run is resumed.

    Returns:
        Held-out chat loss before and after, the ``(step, train_loss)`` curve, steps, trained tokens (non-pad
        positions seen by this call), seconds, and the padding fraction of the training batches.
    """
    run = ResumableTraining(out_dir, runtime)
    trainer = build_sft_trainer(model_dir, train_rows, eval_rows, stage, sft, runtime, run.work_dir, log_metrics)
    collator: CountingCollator = trainer.data_collator
    run.evaluate_at_start(trainer, "eval_loss_before", lambda on: setattr(collator, "counting", on))
    logger.info("sft %s: %d train rows", stage.name, len(trainer.train_dataset))
    run.train(trainer, f"sft {stage.name}")
    before = run.saved("eval_loss_before")
    after = _evaluate(trainer)
    logger.info("sft %s: %d steps, held-out loss %.4f → %.4f", stage.name, trainer.state.global_step, before, after)
    run.finish(trainer, trainer.processing_class)

    real_tokens, positions = sum_over_ranks(collator.real_tokens, collator.positions)  # every rank's batches
    curve = [(int(r["step"]), float(r["loss"])) for r in trainer.state.log_history if "loss" in r]
    return SFTStageResult(
        stage=stage.name,
        out_dir=run.out_dir,
        eval_loss_before=before,
        eval_loss_after=after,
        train_curve=curve,
        steps=trainer.state.global_step,
        tokens=int(real_tokens),
        seconds=run.seconds,
        padding_fraction=1.0 - real_tokens / positions if positions else 0.0,
        resumed_from_step=run.resumed_from_step,
        train_rows=len(trainer.train_dataset),
        eval_rows=len(trainer.eval_dataset),
    )


def heldout_chat_loss(
    model_dir: Path,
    eval_rows: list[ChatSample],
    sft: SFTConfig,
    runtime: TrainingRuntimeConfig,
) -> float:
    """Held-out chat loss of any policy checkpoint, measured exactly as the last SFT stage measures it (same rows,
    same masks, its ``max_length``), so RL checkpoints carry a ``sft_heldout_loss`` the promotion gate can
    compare with an SFT champion's. Works in a hidden folder beside ``model_dir``, removed afterwards."""
    work_dir = beside(model_dir, "eval")
    trainer = build_sft_trainer(model_dir, eval_rows, eval_rows, sft.curriculum[-1], sft, runtime, work_dir)
    try:
        return _evaluate(trainer)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
