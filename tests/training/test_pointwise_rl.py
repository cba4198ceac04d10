"""Point-wise RL (§2.1.2): the Bradley–Terry RM beats chance on held-out HH-RLHF pairs, and GRPO with the frozen RM
as reward raises the mean reward (last 20% of steps above the first 20%), logging truncation and repetition."""

from __future__ import annotations

import pytest

from forge.config import BaseModelConfig, PointwiseRLConfig, TrainingRuntimeConfig
from forge.data import corpora as C
from forge.data.pools import hh_chat, hh_preference
from forge.training.base_model import build_model
from forge.training.checkpoints import save_atomically
from forge.training.grpo import (
    PointwiseRMReward,
    build_rl_prompts,
    completion_text,
    grpo_settings,
    is_overlong,
    repetition_fraction,
    run_grpo,
)
from forge.training.reward_model import RewardScorer, split_pairs, train_reward_model

RUNTIME = TrainingRuntimeConfig()
RM_CFG = PointwiseRLConfig(rm_max_steps=100, rm_learning_rate=1e-3, rm_batch_size=16, rm_max_length=256, save_steps=50)
GRPO_CFG = PointwiseRLConfig(
    num_generations=8, max_completion_length=32, learning_rate=3e-3, max_steps=40, per_device_batch_size=16,
    temperature=1.0, save_steps=100,
)


def _valid(make, items):
    out = []
    for i, item in enumerate(items):
        try:
            row = make(item, i)
        except ValueError:  # pydantic: an empty HH turn; pools.py quarantines these
            continue
        if row is not None:
            out.append(row)
    return out


@pytest.fixture(scope="module")
def hh(workspace):
    return C.load_hh(workspace.corpora)


@pytest.fixture(scope="module")
def base_dir(tokenizer, tmp_path_factory):
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128)
    return save_atomically(build_model(cfg, tokenizer), tokenizer, tmp_path_factory.mktemp("rl") / "base")


@pytest.fixture(scope="module")
def rm(hh, base_dir, tmp_path_factory):
    train, heldout = split_pairs(_valid(hh_preference, hh), 200, seed=0)
    out = tmp_path_factory.mktemp("rl") / "rm"
    return train_reward_model(base_dir, train, heldout, RM_CFG, RUNTIME, out)


def test_reward_model_beats_chance_on_heldout_pairs(rm):
    # 200 held-out HH-RLHF harmless pairs; a fresh head is at chance, the trained RM clearly above it.
    assert rm.eval_pairs == 200
    assert abs(rm.accuracy_before - 0.5) < 0.06
    assert rm.accuracy_after >= 0.55, rm
    assert rm.train_curve[-1][1] < rm.train_curve[0][1]  # the Bradley–Terry loss fell
    assert (rm.out_dir / "config.json").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0.0),  # nothing to repeat
        ("a b c d e f g", 0.0),  # all 4-grams distinct
        ("x y z w " * 5, 1 - 4 / 17),  # a loop: 17 4-grams, 4 distinct
    ],
)
def test_repetition_fraction(text, expected):
    assert repetition_fraction(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("ids", "limit", "expected"),
    [
        ([5, 6, 9], 3, False),  # ended with the stop token 9 exactly at the limit
        ([5, 6, 7], 3, True),  # cut at the limit
        ([5, 9], 3, False),  # finished early
    ],
)
def test_is_overlong(ids, limit, expected):
    assert is_overlong(ids, limit, [9]) is expected


def test_completion_text_reads_both_shapes():
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "chat"}]) == "chat"


def test_grpo_with_rm_reward_raises_mean_reward(hh, rm, base_dir, tokenizer, tmp_path):
    prompts = build_rl_prompts(_valid(hh_chat, hh), tokenizer, max_prompts=64, max_prompt_tokens=96, seed=0)
    assert len(prompts) == 64 and all(p["prompt"][-1]["role"] == "user" for p in prompts)
    reward = PointwiseRMReward(RewardScorer(rm.out_dir, max_length=256), GRPO_CFG.max_completion_length,
                               [tokenizer.eos_token_id])
    result = run_grpo(base_dir, prompts, [reward], grpo_settings(GRPO_CFG), RUNTIME, tmp_path / "policy")
    steps, rewards = result.series("reward")
    assert steps == list(range(1, 41))
    assert result.window_mean("reward", 0.8, 1.0) > result.window_mean("reward", 0.0, 0.2), rewards
    for key in ("overlong_rate", "repetition_rate", "completions/clipped_ratio"):
        _, values = result.series(key)
        assert len(values) == 40 and all(0.0 <= v <= 1.0 for v in values), key
    assert (result.out_dir / "model.safetensors").exists()
