"""The GPU profile's RL stages build valid TRL configs on a CPU machine (no GPU, no vLLM, no DeepSpeed imported):
bf16, gradient checkpointing, 8 rollouts per prompt, vLLM colocate rollouts; and the tiny profile's per-stage GRPO
choices reach TRL."""

from __future__ import annotations

import sys

import pytest

from forge.config import ConfigError, load_profile
from forge.training.grpo import build_grpo_config
from forge.training.pairwise_rm import pairwise_rm_args
from forge.training.reward_model import reward_config


@pytest.fixture
def gpu_capable(monkeypatch):
    """transformers refuses bf16 where no bf16 GPU is found; tell it one is (only the capability probe changes)."""
    import transformers.training_args as ta

    monkeypatch.setattr(ta, "is_torch_bf16_gpu_available", lambda: True)


def test_gpu_profile_builds_trl_configs(gpu_capable, tmp_path):
    cfg = load_profile("nanbeige-4.1-3b")
    assert cfg.base.hub_id == "Nanbeige/Nanbeige4-3B-Base"
    for stage in (cfg.pointwise_rl, cfg.pairwise_rl):
        args = build_grpo_config(stage.grpo, cfg.runtime, tmp_path / "grpo", cfg.generation, cfg.seed)
        assert args.bf16 and args.gradient_checkpointing
        assert args.num_generations == 8  # §2.1.2
        assert args.use_vllm and args.vllm_mode == "colocate"
        assert args.vllm_gpu_memory_utilization == cfg.generation.vllm.gpu_memory_utilization
        assert (args.per_device_train_batch_size * args.steps_per_generation) % args.num_generations == 0
        assert args.max_completion_length == stage.grpo.max_completion_length
    rm_args = reward_config(cfg.pointwise_rl.rm, cfg.runtime, tmp_path / "rm")
    pw_args = pairwise_rm_args(cfg.pairwise_rl.rm, cfg.runtime, tmp_path / "prm")
    assert rm_args.bf16 and rm_args.gradient_checkpointing and pw_args.bf16 and not pw_args.remove_unused_columns
    assert "vllm" not in sys.modules and "deepspeed" not in sys.modules


def test_grpo_batch_must_divide_into_groups():
    # TRL scores one prompt's rollouts as a group: 12 completions cannot hold groups of 8. Refused when the profile
    # is loaded, naming the field, not deep inside a training stage.
    with pytest.raises(ConfigError, match=r"pointwise_rl\.grpo.*divisible by num_generations"):
        load_profile("tiny", {"pointwise_rl.grpo.per_device_batch_size": 12})


def test_tiny_code_rl_stage2_reaches_trl_with_unscaled_advantages(tmp_path):
    # Stage 2 of the tiny profile takes Dr. GRPO's unscaled advantages (configs/tiny.yaml says why), stage 1 TRL's
    # per-group scaling: each stage's settings are what its TRL config carries (tasks/code.py trains with them).
    from tasks.code import stage_config

    cfg = load_profile("tiny")
    scales = [build_grpo_config(stage_config(cfg.code_rl, n).settings, cfg.runtime, tmp_path / str(n)).scale_rewards
              for n in (1, 2)]
    assert scales == ["group", "none"]
