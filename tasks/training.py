"""Prefect tasks for stage 0 (tokenizer + base model) and SFT: each a nested MLflow run, each cached.

A task's output folder is named by the digest of what it was computed from, so a changed config writes a new
folder and an older cached result still points at intact files. Checkpoints are written atomically by the
library (temp folder + rename): a killed task leaves no half-written model behind, and the trainer's own
checkpoints let it continue where it stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow

from forge.config import BaseModelConfig, SFTConfig, SFTStageConfig, TokenizerConfig, TrainingRuntimeConfig
from forge.hashing import value_digest
from forge.stages import Base, Checkpoint, DataMix, Tokenizer
from forge.workspace import Workspace
from registry.tracking import (
    DATA_MD5_TAG,
    PARENT_VERSION_TAG,
    STAGE_TAG,
    StageContext,
    log_config,
    log_curve,
    log_dataset,
    metrics_logger,
)
from tasks._cache import cached_task


@cached_task(name="train-tokenizer", modules=("forge.training.tokenizer", "forge.data.pools", "forge.data.corpora"))
def train_tokenizer_task(*, cfg: TokenizerConfig, corpora: str, seed: int) -> Tokenizer:
    """Byte-level BPE with the chat template, trained on corpora/ (pre-training text, eval sets excluded)."""
    from forge.atomic import atomic_dir
    from forge.data.pools import iter_pretraining_texts
    from forge.training.tokenizer import train_tokenizer

    ws = Workspace.from_env()
    out = ws.models / f"tokenizer-{value_digest(cfg, corpora, seed)}"
    if not out.exists():
        tok = train_tokenizer(iter_pretraining_texts(ws.corpora, cfg.max_training_chars, seed), cfg)
        with atomic_dir(out) as tmp:
            tok.save_pretrained(tmp)
    return Tokenizer(tokenizer_dir=str(out))


@cached_task(name="pretrain-base", modules=("forge.training.base_model", "forge.data.pools", "forge.data.corpora"))
def pretrain_task(
    *, ctx: StageContext, cfg: BaseModelConfig, runtime: TrainingRuntimeConfig, tokenizer: Tokenizer, corpora: str
) -> Base:
    """Stage 0: build the tiny Llama and pre-train it on the corpora; register it as ``forge-base``."""
    from transformers import AutoTokenizer

    from forge.data.pools import iter_pretraining_texts
    from forge.training.base_model import build_model, pretrain
    from registry.models import register_checkpoint

    ws = Workspace.from_env()
    out = ws.models / f"base-{value_digest(cfg, runtime, tokenizer.tokenizer_dir, corpora)}"
    tags = ctx.lineage({STAGE_TAG: "base"})
    with ctx.start_run("stage0-base", tags) as run:
        log_config(cfg)
        tok = AutoTokenizer.from_pretrained(tokenizer.tokenizer_dir)
        texts = list(iter_pretraining_texts(ws.corpora, cfg.max_corpus_chars, cfg.seed))
        model = build_model(cfg, tok)
        mlflow.log_param("parameters", sum(p.numel() for p in model.parameters()))
        result = pretrain(model, tok, texts, cfg, runtime, out, log_metrics=metrics_logger())
        metrics = {"heldout_loss_initial": result.initial_heldout_loss,
                   "heldout_loss_final": result.final_heldout_loss}
        mlflow.log_metrics(metrics)
        evals = [p for p in result.curve if p[2] is not None]
        log_curve("pretrain_heldout_loss", [p[0] for p in evals], [p[2] for p in evals], "held-out loss")
        version = register_checkpoint(out, "forge-base", run_id=run.info.run_id, tags=tags, metrics=metrics)
    return Base(model_dir=str(out), tokenizer_dir=tokenizer.tokenizer_dir, model_name="forge-base", version=version,
                run_id=run.info.run_id, metrics=metrics)


def sft_stage_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    """What an SFT stage's cache key hashes: its inputs, with the curriculum cut after this stage (a stage reads the
    ones before it for its step offset, never the ones after), so lengthening the last stage re-runs that stage only."""
    sft, index = inputs["sft"], inputs["index"]
    return {**inputs, "sft": sft.model_dump(mode="json", exclude={"curriculum"})
            | {"curriculum": [s.model_dump(mode="json") for s in sft.curriculum[: index + 1]]}}


@cached_task(name="sft-stage", modules=("forge.training.sft", "forge.training.tokenizer", "forge.data.mix",
                                        "registry.models"), key_view=sft_stage_inputs)
def sft_stage_task(
    *,
    ctx: StageContext,
    stage: SFTStageConfig,
    index: int,
    sft: SFTConfig,
    runtime: TrainingRuntimeConfig,
    init: Checkpoint,
    data: DataMix,
    register_from: Checkpoint | None = None,
) -> Checkpoint:
    """One curriculum stage: SFT at ``stage.max_length`` tokens from ``init``'s weights. The last stage is given
    ``register_from`` (the base) and registers its checkpoint as a new ``forge-policy`` version, parented on it,
    from this stage's run (the version links to the run that trained it; its metric is the held-out chat loss)."""
    from forge.data.mix import MixRows, read_heldout
    from forge.training.launch import run_training
    from forge.training.sft import run_sft_stage

    ws = Workspace.from_env()
    train_rows, eval_rows = MixRows(data.mix_dir), read_heldout(data.mix_dir)  # the training rows stream
    out = ws.models / f"sft-{index}-{value_digest(stage, sft, runtime, init.model_dir, data.data_md5)}"
    name = f"sft-{index + 1}-{stage.name}"
    with ctx.start_run(name, {STAGE_TAG: f"sft/{stage.name}", DATA_MD5_TAG: data.data_md5}) as run:
        log_config(stage)
        log_dataset(data.mix_dir, data.manifest.get("name", "sft-mix"), data.data_md5, "training")
        # One key (sft/loss) for the whole curriculum, each stage's steps after the previous stages', so the three
        # stage runs overlay as one curve in MLflow's chart view.
        offset = sum(s.max_steps for s in sft.curriculum[:index])
        result = run_training(
            run_sft_stage, runtime, out, log_metrics=metrics_logger(step_offset=offset),
            model_dir=Path(init.model_dir), train_rows=train_rows, eval_rows=eval_rows, stage=stage, sft=sft,
        )
        metrics = {
            "eval_loss_before": result.eval_loss_before,
            "eval_loss_after": result.eval_loss_after,
            "train_tokens": result.tokens,
            "padding_fraction": result.padding_fraction,
        }
        mlflow.log_metrics(metrics)
        curve = result.train_curve
        log_curve(f"sft_{stage.name}_train_loss", [p[0] for p in curve], [p[1] for p in curve], "train loss")
        if register_from is None:
            return Checkpoint(model_dir=str(out), run_id=run.info.run_id, metrics=metrics)
        from registry.models import register_checkpoint

        version_metrics = {"sft_heldout_loss": result.eval_loss_after}
        tags = ctx.lineage({STAGE_TAG: "sft", PARENT_VERSION_TAG: register_from.ref, DATA_MD5_TAG: data.data_md5})
        version = register_checkpoint(out, "forge-policy", run_id=run.info.run_id, tags=tags, metrics=version_metrics)
    return Checkpoint(model_dir=str(out), model_name="forge-policy", version=version, run_id=run.info.run_id,
                      metrics={**metrics, **version_metrics})
