"""Prefect tasks for stage 0 (tokenizer + base model) and SFT: each a nested MLflow run, each cached.

A task's output folder is named by the digest of what it was computed from, so a changed config writes a new
folder and an older cached result still points at intact files. Checkpoints are written atomically by the
library (temp folder + rename): a killed task leaves no half-written model behind, and the trainer's own
checkpoints let it continue where it stopped.
"""

from __future__ import annotations

import time
from pathlib import Path

import mlflow

from forge.config import BaseModelConfig, SFTConfig, SFTStageConfig, TokenizerConfig, TrainingRuntimeConfig
from forge.hashing import value_digest
from forge.workspace import Workspace
from registry.tracking import DATA_MD5_TAG, PARENT_VERSION_TAG, STAGE_TAG, log_config, log_curve, start_stage_run
from tasks._cache import cached_task


def _mlflow_logger(step_offset: int = 0):
    def log(metrics: dict, step: int) -> None:
        mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step + step_offset)

    return log


@cached_task(name="train-tokenizer", modules=("forge.training.tokenizer", "forge.data.pools", "forge.data.corpora"))
def train_tokenizer_task(cfg: TokenizerConfig, corpora_digest: str, seed: int) -> str:
    """Byte-level BPE with the chat template, trained on corpora/ (pre-training text, eval sets excluded)."""
    from forge.atomic import atomic_dir
    from forge.data.pools import iter_pretraining_texts
    from forge.training.tokenizer import train_tokenizer

    ws = Workspace.from_env()
    out = ws.models / f"tokenizer-{value_digest(cfg, corpora_digest, seed)}"
    if not out.exists():
        tok = train_tokenizer(iter_pretraining_texts(ws.corpora, cfg.max_training_chars, seed), cfg)
        with atomic_dir(out) as tmp:
            tok.save_pretrained(tmp)
    return str(out)


@cached_task(name="pretrain-base", modules=("forge.training.base_model", "forge.data.pools", "forge.data.corpora"))
def pretrain_task(
    cfg: BaseModelConfig,
    runtime: TrainingRuntimeConfig,
    tokenizer_dir: str,
    corpora_digest: str,
    parent_run_id: str | None = None,
    lineage: dict | None = None,
) -> dict:
    """Stage 0: build the tiny Llama and pre-train it on the corpora; register it as ``forge-base``."""
    from transformers import AutoTokenizer

    from forge.data.pools import iter_pretraining_texts
    from forge.training.base_model import build_model, pretrain
    from registry.models import register_checkpoint, set_version_metrics

    ws = Workspace.from_env()
    out = ws.models / f"base-{value_digest(cfg, runtime, tokenizer_dir, corpora_digest)}"
    tags = {**(lineage or {}), STAGE_TAG: "base"}
    with start_stage_run("stage0-base", parent_run_id=parent_run_id, tags=tags) as run:
        log_config(cfg)
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        texts = list(iter_pretraining_texts(ws.corpora, cfg.max_corpus_chars, cfg.seed))
        model = build_model(cfg, tokenizer)
        mlflow.log_param("parameters", sum(p.numel() for p in model.parameters()))
        result = pretrain(model, tokenizer, texts, cfg, runtime, out, log_metrics=_mlflow_logger())
        metrics = {
            "heldout_loss_initial": result.initial_heldout_loss,
            "heldout_loss_final": result.final_heldout_loss,
        }
        mlflow.log_metrics(metrics)
        steps = [p[0] for p in result.curve if p[2] is not None]
        log_curve("pretrain_heldout_loss", steps, [p[2] for p in result.curve if p[2] is not None], "held-out loss")
        version = register_checkpoint(out, "forge-base", run_id=run.info.run_id, tags=tags)
        set_version_metrics("forge-base", version, metrics)
    return {"model_dir": str(out), "run_id": run.info.run_id, "version": version, "metrics": metrics}


@cached_task(name="sft-stage", modules=("forge.training.sft", "forge.training.tokenizer", "forge.data.jsonl"))
def sft_stage_task(
    stage: SFTStageConfig,
    index: int,
    sft: SFTConfig,
    runtime: TrainingRuntimeConfig,
    init_model_dir: str,
    mix_dir: str,
    data_md5: str,
    parent_run_id: str | None = None,
    lineage: dict | None = None,
) -> dict:
    """One curriculum stage: SFT at ``stage.max_length`` tokens from the previous stage's weights."""
    from forge.data.jsonl import read_jsonl
    from forge.data.schemas import ChatSample
    from forge.training.sft import run_sft_stage

    ws = Workspace.from_env()
    mix = Path(mix_dir)
    train_rows = [r for shard in sorted(mix.glob("train-*.jsonl")) for r in read_jsonl(shard, ChatSample).rows]
    eval_rows = read_jsonl(mix / "heldout.jsonl", ChatSample).rows
    out = ws.models / f"sft-{index}-{value_digest(stage, sft, runtime, init_model_dir, data_md5)}"
    tags = {**(lineage or {}), STAGE_TAG: f"sft/{stage.name}", DATA_MD5_TAG: data_md5}
    started = time.time()
    with start_stage_run(f"sft-{index + 1}-{stage.name}", parent_run_id=parent_run_id, tags=tags) as run:
        log_config(stage)
        result = run_sft_stage(
            Path(init_model_dir), train_rows, eval_rows, stage, sft, runtime, out, log_metrics=_mlflow_logger()
        )
        metrics = {
            "eval_loss_before": result.eval_loss_before,
            "eval_loss_after": result.eval_loss_after,
            "train_tokens": result.tokens,
            "padding_fraction": result.padding_fraction,
        }
        mlflow.log_metrics(metrics)
        log_curve(
            f"sft_{stage.name}_train_loss", [p[0] for p in result.train_curve], [p[1] for p in result.train_curve], "train loss"
        )
    return {"model_dir": str(out), "run_id": run.info.run_id, "metrics": metrics, "seconds": time.time() - started}


@cached_task(name="register-policy", modules=("registry.models",))
def register_policy_task(
    model_dir: str,
    data_md5: str,
    parent_version: str,
    metrics: dict,
    parent_run_id: str | None = None,
    lineage: dict | None = None,
) -> dict:
    """Register the final SFT checkpoint as a new ``forge-policy`` version with its lineage tags."""
    from registry.models import register_checkpoint, set_version_metrics

    tags = {
        **(lineage or {}),
        STAGE_TAG: "sft",
        PARENT_VERSION_TAG: f"forge-base/{parent_version}",
        DATA_MD5_TAG: data_md5,
    }
    with start_stage_run("register-policy", parent_run_id=parent_run_id, tags=tags) as run:
        version = register_checkpoint(Path(model_dir), "forge-policy", run_id=run.info.run_id, tags=tags)
        set_version_metrics("forge-policy", version, metrics)
    return {"version": version, "run_id": run.info.run_id}
