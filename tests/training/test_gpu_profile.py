"""The GPU profile's RL stages build valid TRL configs on a CPU machine (no GPU, no vLLM, no DeepSpeed imported):
bf16, gradient checkpointing, 8 rollouts per prompt, vLLM colocate rollouts, an accelerate config that exists."""

from __future__ import annotations

import sys

import pytest
import yaml

from forge.config import load_profile
from forge.training.grpo import build_grpo_config, grpo_settings
from forge.training.pairwise_rm import pairwise_rm_args
from forge.training.reward_model import reward_config
from forge.workspace import REPO_ROOT


@pytest.fixture
def gpu_capable(monkeypatch):
    """transformers refuses bf16 where no bf16 GPU is found; tell it one is (only the capability probe changes)."""
    import transformers.training_args as ta

    monkeypatch.setattr(ta, "is_torch_bf16_gpu_available", lambda: True)


def test_gpu_profile_builds_trl_configs(gpu_capable, tmp_path):
    cfg = load_profile("nanbeige-4.1-3b")
    assert cfg.base.hub_id == "Nanbeige/Nanbeige4-3B-Base"
    for stage in (cfg.pointwise_rl, cfg.pairwise_rl):
        args = build_grpo_config(grpo_settings(stage, cfg.seed), cfg.runtime, tmp_path / "grpo", cfg.generation)
        assert args.bf16 and args.gradient_checkpointing
        assert args.num_generations == 8  # §2.1.2
        assert args.use_vllm and args.vllm_mode == "colocate"
        assert args.vllm_gpu_memory_utilization == cfg.generation.vllm.gpu_memory_utilization
        assert (args.per_device_train_batch_size * args.steps_per_generation) % args.num_generations == 0
        assert args.max_completion_length == stage.max_completion_length
    rm_args = reward_config(cfg.pointwise_rl, cfg.runtime, tmp_path / "rm")
    pw_args = pairwise_rm_args(cfg.pairwise_rl, cfg.runtime, tmp_path / "prm")
    assert rm_args.bf16 and rm_args.gradient_checkpointing and pw_args.bf16 and not pw_args.remove_unused_columns
    assert "vllm" not in sys.modules and "deepspeed" not in sys.modules


def test_gpu_profile_accelerate_configs_exist():
    cfg = load_profile("nanbeige-4.1-3b")
    path = REPO_ROOT / cfg.runtime.accelerate_config
    assert yaml.safe_load(path.read_text())["mixed_precision"] == "bf16"
    zero3 = yaml.safe_load((REPO_ROOT / "infra" / "accelerate" / "zero3.yaml").read_text())
    assert zero3["distributed_type"] == "DEEPSPEED"


def test_grpo_batch_must_divide_into_groups(tmp_path):
    cfg = load_profile("tiny").pointwise_rl.model_copy(update={"per_device_batch_size": 12})
    with pytest.raises(ValueError, match="divisible by num_generations"):
        build_grpo_config(grpo_settings(cfg), load_profile("tiny").runtime, tmp_path)
