"""Pair-wise RL (§2.1.3): checklist-filtered strong-vs-weak pairs, the swap-consistency term lowers the position-bias
rate on the same held-out pairs, and pair-wise GRPO runs with the binary "beats the reference" reward."""

from __future__ import annotations

import pytest

from forge.config import BaseModelConfig, GRPOSettings, PairwiseRLConfig, RewardModelSettings, TrainingRuntimeConfig
from forge.generation import get_backend
from forge.training.base_model import build_model
from forge.training.checkpoints import save_atomically
from forge.training.grpo import run_grpo
from forge.training.pairs import StrongWeakPair, build_rl_prompts, checklist, filter_pairs, reference_over_weak
from forge.training.pairwise_rm import BeatsReferenceReward, PairwiseScorer, pairwise_loss, train_pairwise_rm

RUNTIME = TrainingRuntimeConfig()
ASK = [{"role": "user", "content": "How do volcanoes form over hotspots?"}]


def rm_cfg(weight: float) -> PairwiseRLConfig:
    rm = RewardModelSettings(max_steps=60, learning_rate=1e-3, batch_size=8, max_length=192, save_steps=100)
    return PairwiseRLConfig(swap_consistency_weight=weight, rm=rm)


@pytest.fixture(scope="module")
def dirs(tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("pairwise")
    small = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128)
    return {"base": save_atomically(build_model(small, tokenizer), tokenizer, root / "base"), "root": root}


@pytest.fixture(scope="module")
def prompts(hh_chats, tokenizer):
    return build_rl_prompts(hh_chats, tokenizer, max_prompts=300, max_prompt_tokens=128, seed=0)


@pytest.fixture(scope="module")
def pairs(prompts, dirs, tokenizer):
    """Strong = the dataset's reference answer cut to the weak side's 32-token budget, weak = the untrained
    checkpoint's sampled answer."""
    weak = get_backend("transformers", model=dirs["base"], batch_size=32, device="cpu")
    answers = weak.generate([p["prompt"] for p in prompts], max_new_tokens=32, temperature=1.0, seed=0)
    raw = reference_over_weak(prompts, answers, tokenizer, budget=32)
    kept, counts = filter_pairs(raw)
    assert counts["kept"] == len(kept) and sum(counts.values()) == len(raw)
    return kept


@pytest.mark.parametrize(
    ("answer", "reference", "item", "expected"),
    [
        ("Magma rises from a plume under the plate.", "", "nonempty", 1.0),  # words present
        ("", "", "nonempty", 0.0),  # empty answer
        ("Volcanoes <|im_start|> form", "", "clean", 0.0),  # a leaked control token
        ("loop " * 40, "", "not_repetitive", 0.0),  # a degenerate loop
        ("Mantle plumes melt rock.", "", "on_topic", 0.0),  # no word of the question ("volcanoes", "hotspots", ...)
        ("Volcanoes grow above plumes.", "", "on_topic", 1.0),  # shares "volcanoes"
        ("```python\ndef f(:\n```", "```python\nx = 1\n```", "code_parses", 0.0),  # broken code
        ("```python\nx = 2\n```", "```python\nx = 1\n```", "code_parses", 1.0),  # parses
    ],
)
def test_checklist_items(answer, reference, item, expected):
    assert checklist(ASK, answer, reference)[item] == expected


def test_filter_keeps_only_pairs_the_checklist_agrees_with():
    good = "Volcanoes form where a mantle plume melts the plate above it."
    kept, counts = filter_pairs([
        StrongWeakPair(ASK, good, "volcano " * 30),  # strong wins the checklist: kept
        StrongWeakPair(ASK, "", good),  # checklist prefers the weak answer: dropped
        StrongWeakPair(ASK, good, good),  # identical: no label
    ])
    assert [p.weak for p in kept] == ["volcano " * 30]
    assert counts == {"kept": 1, "disagree": 1, "tie": 1}


def test_swap_term_is_zero_for_antisymmetric_scores():
    import torch

    d_ab, labels = torch.tensor([2.0, -1.0]), torch.tensor([1.0, 0.0])
    assert pairwise_loss(d_ab, -d_ab, labels, 5.0) == pytest.approx(pairwise_loss(d_ab, -d_ab, labels, 0.0))
    assert pairwise_loss(d_ab, d_ab, labels, 5.0) > pairwise_loss(d_ab, d_ab, labels, 0.0)


@pytest.fixture(scope="module")
def trained(pairs, dirs):
    train, heldout = pairs[:-100], pairs[-100:]
    return {w: train_pairwise_rm(dirs["base"], train, heldout, rm_cfg(w), RUNTIME, dirs["root"] / f"rm-{w}")
            for w in (0.0, 1.0)}


def test_swap_consistency_lowers_position_bias(trained):
    without, with_term = trained[0.0].after, trained[1.0].after
    assert without.pairs == with_term.pairs == 100  # the same held-out pairs
    assert with_term.position_bias_rate < without.position_bias_rate, (with_term, without)
    assert with_term.accuracy > 0.7  # still a useful judge, not a constant


def test_pairwise_grpo_reward_is_binary(trained, prompts, dirs, tokenizer):
    scorer = PairwiseScorer(trained[1.0].out_dir, max_length=192)
    reward = BeatsReferenceReward(scorer, win=1.0, loss=0.0, max_completion_length=16,
                                  stop_ids=(tokenizer.eos_token_id,))
    refs = [p["reference"] for p in prompts[:4]]
    # The reference against itself cannot beat itself (margin exactly 0), garbage loses to it.
    same = reward([p["prompt"] for p in prompts[:4]], refs, reference=refs)
    assert same == [0.0] * 4
    grpo = GRPOSettings(num_generations=4, max_completion_length=16, learning_rate=1e-3, max_steps=3,
                        per_device_batch_size=8, save_steps=100)
    result = run_grpo(dirs["base"], prompts[:16], [reward], grpo, RUNTIME, dirs["root"] / "policy-pw",
                      stage="grpo-pairwise")
    _, rewards = result.series("reward")
    assert len(rewards) == 3 and all(0.0 <= r <= 1.0 for r in rewards)
