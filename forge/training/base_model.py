"""Stage 0: the base model. The paper starts from Nanbeige4-3B-Base; the tiny profile builds its own.

``source='build'``: a small Llama (tied embeddings) pre-trained with the HF ``Trainer`` on corpus text,
packed into fixed-length blocks; a share of the documents is held out and its loss measured every
``eval_every`` steps. Checkpoints go to a work dir next to the output, so a killed run resumes; the final
model + tokenizer are renamed into place atomically. ``source='hub'`` or ``'local'``: :func:`resolve_base` finds the
checkpoint (the local HF cache, a download where the profile allows one, or a directory) and nothing is trained.

    tok = train_tokenizer(texts, cfg.base.tokenizer)
    model = build_model(cfg.base, tok)
    result = pretrain(model, tok, texts, cfg.base, cfg.runtime, ws.models / "base")
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase, Trainer, TrainingArguments

from forge.chat import ENDOFTEXT
from forge.config import BaseModelConfig, TrainingRuntimeConfig
from forge.training.checkpoints import (
    ForwardMetrics,
    MetricsLogger,
    ResumableTraining,
    common_trainer_args,
    loss_curve,
)
from forge.workspace import hub_online

logger = logging.getLogger(__name__)

def build_model(cfg: BaseModelConfig, tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    """A freshly initialised Llama sized by ``cfg``, its vocabulary and special ids taken from ``tokenizer``.

    Initialisation is seeded with ``cfg.seed`` (same config + tokenizer → same weights).
    """
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        # Tied input/output embeddings: at tiny sizes the embedding matrix is most of the parameters.
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(cfg.seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


class BaseCheckpointMissing(FileNotFoundError):
    """The profile's base checkpoint is neither where it points nor allowed to be fetched; says how to provide it."""


CHECKPOINT_FILES = ("config.json", "tokenizer_config.json")


def resolve_base(cfg: BaseModelConfig) -> Path:
    """The base checkpoint as a local directory the trainers read (``source`` 'local' or 'hub').

    'local': ``cfg.local_path``, which must hold a ``save_pretrained`` model and its tokenizer. 'hub': ``cfg.hub_id``
    from the local Hugging Face cache; fetched from huggingface.co only when ``cfg.allow_hub_download``. Either way
    a missing checkpoint raises :class:`BaseCheckpointMissing` naming the model and the two ways to provide it.
    """
    how = (f"Provide it one of two ways: (1) let this profile fetch it, base.allow_hub_download: true (or `forge run "
           f"--set base.allow_hub_download=true`); (2) download it yourself (`hf download {cfg.hub_id} --local-dir "
           f"DIR`) and set base.source: local and base.local_path: DIR.")
    if cfg.source == "local":
        path = Path(cfg.local_path or "").expanduser()
        missing = [f for f in CHECKPOINT_FILES if not (path / f).is_file()]
        if missing:
            raise BaseCheckpointMissing(
                f"base.local_path: {path} is not a checkpoint directory with its tokenizer (missing "
                f"{', '.join(missing)}); the profile's base model is {cfg.hub_id}. {how}")
        return path.resolve()  # absolute: the stages' cache keys and launched ranks read it from anywhere
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        if cfg.allow_hub_download:
            with hub_online():
                return Path(snapshot_download(cfg.hub_id))
        return Path(snapshot_download(cfg.hub_id, local_files_only=True))
    except LocalEntryNotFoundError as err:
        why = (f"the download failed ({err})" if cfg.allow_hub_download
               else "this profile does not allow downloads (base.allow_hub_download is false)")
        raise BaseCheckpointMissing(
            f"base.hub_id: {cfg.hub_id} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and {why}. "
            f"{how}") from None


class PackedBlocks(Dataset):
    """Fixed-length token blocks for causal LM training.

    Each item: ``input_ids`` and ``labels``, both LongTensor of shape ``(seq_len,)`` (the model shifts labels).
    """

    def __init__(self, blocks: torch.Tensor) -> None:
        self.blocks = blocks  # (num_blocks, seq_len)

    def __len__(self) -> int:
        return self.blocks.shape[0]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


def pack_texts(tokenizer: PreTrainedTokenizerBase, texts: list[str], seq_len: int) -> torch.Tensor:
    """Tokenize documents, join them with ``<|endoftext|>`` and cut the stream into blocks.

    Returns:
        LongTensor of shape ``(num_blocks, seq_len)``; the tail shorter than a block is dropped.
    """
    eot = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    stream: list[int] = []
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        stream.extend(ids)
        stream.append(eot)
    n = len(stream) // seq_len
    return torch.tensor(stream[: n * seq_len], dtype=torch.long).view(n, seq_len)


def split_heldout(texts: list[str], fraction: float, seed: int, min_chars: int) -> tuple[list[str], list[str]]:
    """Hold out whole documents (no block straddles train and held-out), at least ``min_chars`` of them."""
    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    total = sum(len(t) for t in texts)
    want = max(int(total * fraction), min_chars)
    held, taken = [], 0
    for i in order:
        if taken >= want:
            break
        held.append(i)
        taken += len(texts[i])
    held_set = set(held)
    train = [texts[i] for i in order if i not in held_set]
    if not train:
        raise ValueError(f"corpus too small: {total} characters leave nothing to train on after the held-out share")
    return train, [texts[i] for i in held]


@dataclass
class PretrainResult:
    out_dir: Path
    initial_heldout_loss: float
    final_heldout_loss: float
    curve: list[tuple[int, float | None, float]] = field(default_factory=list)
    steps: int = 0
    tokens_seen: int = 0
    seconds: float = 0.0
    resumed_from_step: int | None = None
    train_blocks: int = 0
    heldout_blocks: int = 0


def _limit_chars(texts: list[str], max_chars: int) -> list[str]:
    out, seen = [], 0
    for t in texts:
        if seen >= max_chars:
            break
        out.append(t[: max_chars - seen])
        seen += len(out[-1])
    return out


def pretraining_blocks(tokenizer: PreTrainedTokenizerBase, texts: list[str], cfg: BaseModelConfig,
                       max_eval_blocks: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """The train and held-out blocks :func:`pretrain` trains and evaluates on: the first ``cfg.max_corpus_chars``
    characters of the non-empty ``texts``, whole documents held out (``cfg.eval_fraction``), packed to
    ``cfg.seq_len``; at most ``max_eval_blocks`` held-out blocks."""
    texts = _limit_chars([t for t in texts if t.strip()], cfg.max_corpus_chars)
    # Enough held-out text for at least two blocks at ~4 characters a token.
    train_texts, heldout_texts = split_heldout(texts, cfg.eval_fraction, cfg.seed, min_chars=8 * cfg.seq_len)
    return (pack_texts(tokenizer, train_texts, cfg.seq_len),
            pack_texts(tokenizer, heldout_texts, cfg.seq_len)[:max_eval_blocks])


def pretrain(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    texts: list[str],
    cfg: BaseModelConfig,
    runtime: TrainingRuntimeConfig,
    out_dir: Path,
    log_metrics: MetricsLogger | None = None,
    *,
    save_steps: int | None = None,
    max_eval_blocks: int = 64,
) -> PretrainResult:
    """Pre-train ``model`` on ``texts`` and write the final model + tokenizer to ``out_dir`` atomically.

    Args:
        model: a causal LM (from :func:`build_model`); trained in place.
        tokenizer: its tokenizer; saved alongside the model.
        texts: corpus documents; the first ``cfg.max_corpus_chars`` characters are used.
        cfg: sizes, steps, learning rate (cosine after ``warmup_steps``), ``eval_every``, ``eval_fraction``.
        runtime: bf16, gradient checkpointing, threads.
        out_dir: final destination; its sibling ``.<name>.work`` holds resumable checkpoints.
        log_metrics: called as ``log_metrics(metrics, step)`` on every Trainer log record.
        save_steps: checkpoint interval (default ``cfg.eval_every``).
        max_eval_blocks: cap on held-out blocks evaluated (bounds the cost of each evaluation).

    Returns:
        Held-out loss before and after, the ``(step, train_loss, heldout_loss)`` curve (across resumes), steps,
        tokens seen, seconds of this call, and the step this call resumed from (None for a fresh run).
    """
    run = ResumableTraining(out_dir, runtime)
    train_blocks, heldout_blocks = pretraining_blocks(tokenizer, texts, cfg, max_eval_blocks)
    if len(train_blocks) == 0 or len(heldout_blocks) == 0:
        raise ValueError(
            f"corpus too small for seq_len={cfg.seq_len}: {len(train_blocks)} train blocks, "
            f"{len(heldout_blocks)} held-out blocks"
        )
    logger.info(
        "pretrain: %d train blocks, %d held-out blocks of %d tokens",
        len(train_blocks),
        len(heldout_blocks),
        cfg.seq_len,
    )

    args = TrainingArguments(
        **common_trainer_args(run.work_dir, runtime, seed=cfg.seed, save_steps=save_steps or cfg.eval_every),
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        warmup_steps=cfg.warmup_steps,
        weight_decay=0.1,
        max_grad_norm=1.0,
        logging_steps=max(1, min(10, cfg.eval_every)),
        eval_strategy="steps",
        eval_steps=cfg.eval_every,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=PackedBlocks(train_blocks),
        eval_dataset=PackedBlocks(heldout_blocks),
        processing_class=tokenizer,
        callbacks=[ForwardMetrics(log_metrics, prefix="pretrain/")],
    )
    # The loss before any training is measured once and kept in the work dir, so a resumed run reports it too.
    initial = run.once("initial_heldout_loss", lambda: trainer.evaluate()["eval_loss"])
    run.train(trainer, "pretrain")
    history = trainer.state.log_history
    curve = loss_curve(history)
    if curve and curve[-1][0] == trainer.state.global_step:
        final = curve[-1][2]
    else:
        final = trainer.evaluate()["eval_loss"]
        curve = loss_curve(trainer.state.log_history)
    run.finish(trainer, tokenizer)
    steps = trainer.state.global_step
    return PretrainResult(
        out_dir=run.out_dir,
        initial_heldout_loss=float(initial),
        final_heldout_loss=float(final),
        curve=curve,
        steps=steps,
        tokens_seen=steps * cfg.batch_size * cfg.seq_len,
        seconds=run.seconds,
        resumed_from_step=run.resumed_from_step,
        train_blocks=len(train_blocks),
        heldout_blocks=len(heldout_blocks),
    )
