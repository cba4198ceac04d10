"""Functions the launch tests run on every rank of an `accelerate launch` (forge/training/launch.py pickles a call by
module and name, so they live in an importable module rather than in a test file)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from forge.config import AgenticRLConfig, TrainingRuntimeConfig
from forge.training.agentic import update_policy
from forge.training.launch import join_process_group, rank


def agentic_update(*, model_dir: Path, shards: list[list], cfg: AgenticRLConfig, pad_id: int, lr: float,
                   runtime: TrainingRuntimeConfig, out_dir: Path, log_metrics=None) -> dict:
    """One agentic RL update by plain SGD on this rank's shard of the episodes; returns the stats and the weights."""
    join_process_group()
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    stats = update_policy(model, None, shards[rank()], cfg, torch.optim.SGD(model.parameters(), lr=lr), pad_id)
    return {"stats": stats, "weights": {k: v.detach().clone() for k, v in model.state_dict().items()}}
