"""Point-wise RL (§2.1.2): the Bradley–Terry RM beats chance on held-out HH-RLHF pairs and on Forge's
reference-over-weak pairs, GRPO with the frozen RM as reward raises the mean reward (last 20% of steps above the
first 20%) while logging truncation and repetition, and a truncated rollout pays the overlong penalty."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import AttentionInterface, AutoModelForCausalLM
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from trl import GRPOTrainer

from forge.config import BaseModelConfig, GRPOSettings, RewardModelSettings, TrainingRuntimeConfig
from forge.generation.transformers_backend import TransformersBackend
from forge.training.base_model import build_model
from forge.training.checkpoints import save_atomically
from forge.training.grpo import (
    LogitsGRPOTrainer,
    MixedSamplingGRPOTrainer,
    PointwiseRMReward,
    build_grpo_config,
    is_overlong,
    run_grpo,
)
from forge.training.pairs import (
    FORGE_PAIR_SOURCE,
    build_rl_prompts,
    filter_pairs,
    reference_over_weak,
    repetition_fraction,
    split_pairs,
    to_preference_pairs,
)
from forge.training.reward_model import RewardScorer, train_reward_model

RUNTIME = TrainingRuntimeConfig()
RM_CFG = RewardModelSettings(max_steps=100, learning_rate=1e-3, batch_size=16, max_length=256, save_steps=50)
GRPO_CFG = GRPOSettings(
    num_generations=8, max_completion_length=32, learning_rate=3e-3, max_steps=40, per_device_batch_size=16,
    temperature=1.0, save_steps=100,
)


@pytest.fixture(scope="module")
def base_dir(tokenizer, tmp_path_factory):
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128)
    return save_atomically(build_model(cfg, tokenizer), tokenizer, tmp_path_factory.mktemp("rl") / "base")


@pytest.fixture(scope="module")
def hh_split(hh_preferences):
    return split_pairs(hh_preferences, 200, seed=0)


@pytest.fixture(scope="module")
def forge_pairs(hh_chats, hh_split, base_dir, tokenizer):
    """Reference-over-weak pairs: HH-RLHF's chosen answer (cut to 24 tokens) over the untrained base model's, on
    conversations outside the HH held-out set (their chosen answers must not leak into training)."""
    heldout = {p.parents[0] for p in hh_split[1]}
    chats = [c for c in hh_chats if c.parents[0] not in heldout]
    prompts = build_rl_prompts(chats, tokenizer, max_prompts=300, max_prompt_tokens=96, seed=1)
    weak = TransformersBackend(base_dir, batch_size=32).generate([p["prompt"] for p in prompts], max_new_tokens=24,
                                                                 temperature=1.0, seed=0)
    raw = reference_over_weak(prompts, weak, tokenizer, budget=24)
    kept, counts = filter_pairs(raw)
    return raw, kept, counts


@pytest.fixture(scope="module")
def rm(hh_split, base_dir, forge_pairs, tmp_path_factory):
    train, heldout = hh_split
    forge_train, forge_heldout = split_pairs(to_preference_pairs(forge_pairs[1]), 60, seed=0)
    out = tmp_path_factory.mktemp("rl") / "rm"
    return train_reward_model(base_dir, train + forge_train, heldout + forge_heldout, RM_CFG, RUNTIME, out)


def test_reference_over_weak_pairs(forge_pairs, tokenizer):
    raw, kept, counts = forge_pairs
    assert len(raw) == 300 and counts["kept"] == len(kept) and sum(counts.values()) == 300
    assert counts["kept"] > 200  # an untrained model's text loses to the reference on the checklist
    for pair in raw:  # cut to the budget (re-encoding the decoded cut may merge a few tokens differently)
        assert len(tokenizer(pair.strong, add_special_tokens=False)["input_ids"]) <= 24 + 4
        assert pair.reference.startswith(pair.strong[:20])
    assert sum(p.strong != p.reference for p in raw) > 100  # most HH answers are longer than 24 tokens
    rows = to_preference_pairs(kept)
    assert {r.source for r in rows} == {FORGE_PAIR_SOURCE}
    assert all(r.chosen == p.strong and r.rejected == p.weak for r, p in zip(rows, kept, strict=True))
    assert [m.content for m in rows[0].prompt] == [m["content"] for m in kept[0].history]


def test_reward_model_beats_chance_on_heldout_pairs(rm):
    # 200 held-out HH-RLHF harmless pairs + 60 reference-over-weak pairs; a fresh head is at chance on HH, the
    # trained RM clearly above it, and near-perfect on telling the reference from an untrained model's text.
    hh_key = "hh_rlhf_harmless/harmless-base-test.jsonl.gz"
    assert rm.eval_pairs == 260 and set(rm.by_source_after) == {"all", hh_key, FORGE_PAIR_SOURCE}
    assert abs(rm.by_source_before[hh_key] - 0.5) < 0.06
    assert rm.by_source_after[hh_key] >= 0.55, rm
    assert rm.by_source_after[FORGE_PAIR_SOURCE] >= 0.9, rm
    overall = (200 * rm.by_source_after[hh_key] + 60 * rm.by_source_after[FORGE_PAIR_SOURCE]) / 260
    assert rm.accuracy_after == pytest.approx(overall)
    assert rm.train_curve[-1][1] < rm.train_curve[0][1]  # the Bradley–Terry loss fell
    assert (rm.out_dir / "config.json").exists()


def test_truncated_rollouts_pay_the_overlong_penalty(rm, tokenizer):
    scorer = RewardScorer(rm.out_dir, max_length=256)
    eos = tokenizer.eos_token_id
    history = [{"role": "user", "content": "How do I bake bread?"}]
    texts = ["Mix flour, water and yeast, then bake.", "Mix flour, water and yeast, then bake."]
    ids = [[5, 6, 7, eos], [5, 6, 7, 8]]  # same text; the second was cut at the 4-token limit
    logged: dict[str, float] = {}
    reward = PointwiseRMReward(scorer, 4, [eos], overlong_penalty=1.5)
    got = reward([history, history], [[{"role": "assistant", "content": t}] for t in texts], completion_ids=ids,
                 log_metric=logged.__setitem__)
    raw = scorer.score([history, history], texts)
    assert got == pytest.approx([raw[0], raw[1] - 1.5])
    assert logged["overlong_rate"] == 0.5 and logged["rm_score"] == pytest.approx(sum(raw) / 2)
    plain = PointwiseRMReward(scorer, 4, [eos])(  # no penalty: the RM score as it is
        [history, history], texts, completion_ids=ids)
    assert plain == pytest.approx(raw)


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


def test_grpo_with_rm_reward_raises_mean_reward(hh_chats, rm, base_dir, tokenizer, tmp_path):
    prompts = build_rl_prompts(hh_chats, tokenizer, max_prompts=64, max_prompt_tokens=96, seed=0)
    assert len(prompts) == 64 and all(p["prompt"][-1]["role"] == "user" for p in prompts)
    reward = PointwiseRMReward(RewardScorer(rm.out_dir, max_length=256), GRPO_CFG.max_completion_length,
                               [tokenizer.eos_token_id])
    result = run_grpo(base_dir, prompts, [reward], GRPO_CFG, RUNTIME, tmp_path / "policy")
    steps, rewards = result.series("reward")
    assert steps == list(range(1, 41))
    assert result.window_mean("reward", 0.8, 1.0) > result.window_mean("reward", 0.0, 0.2), rewards
    for key in ("overlong_rate", "repetition_rate", "completions/clipped_ratio"):
        _, values = result.series(key)
        assert len(values) == 40 and all(0.0 <= v <= 1.0 for v in values), key
    assert (result.out_dir / "model.safetensors").exists()


def test_logits_path_scores_completions_as_trls_fused_head(hh_chats, base_dir, tokenizer, tmp_path):
    """runtime.fused_lm_head=false (LogitsGRPOTrainer) gives GRPO the same per-token log-probabilities and entropies
    as TRL's fused LM head: at a sampling temperature other than 1, with left-padded prompts and right-padded
    completions, in chunks smaller than the batch."""
    prompts = build_rl_prompts(hh_chats, tokenizer, max_prompts=4, max_prompt_tokens=48, seed=0)
    settings = GRPO_CFG.model_copy(update={"temperature": 0.7})
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(base_dir),
                          reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
                          args=build_grpo_config(settings, RUNTIME, tmp_path / "work"),
                          train_dataset=Dataset.from_list(prompts), processing_class=tokenizer)
    ids = torch.randint(10, len(tokenizer), (4, 40), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :7] = 0  # a shorter prompt, padded on the left
    mask[2, -5:] = 0  # a completion that ended early, padded on the right
    kept = 16
    with torch.no_grad():
        fused = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, kept, batch_size=3,
                                                           compute_entropy=True)
        logits = LogitsGRPOTrainer._get_per_token_logps_and_entropies(trainer, trainer.model, ids, mask, kept,
                                                                      batch_size=3, compute_entropy=True)
    valid = mask[:, -kept:].bool()
    assert logits[0].shape == fused[0].shape == (4, kept)
    torch.testing.assert_close(logits[0][valid], fused[0][valid], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits[1][valid], fused[1][valid], atol=1e-4, rtol=1e-4)
    assert not logits[0][~valid].any()
    # The temperature matters: at 1.0 the same completions score differently.
    trainer.temperature = 1.0
    with torch.no_grad():
        at_one = LogitsGRPOTrainer._get_per_token_logps_and_entropies(trainer, trainer.model, ids, mask, kept)[0]
    assert not torch.allclose(at_one[valid], logits[0][valid], atol=1e-3)


@pytest.mark.parametrize("bf16", [True, False])
def test_rollouts_are_sampled_under_the_training_autocast(bf16, hh_chats, base_dir, tokenizer, tmp_path):
    """Forge's GRPO trainers sample under the autocast their training forwards use (TRL 1.16 samples outside it):
    with runtime.bf16 every sampled token's attention runs under bf16 autocast, without it in fp32; TRL's own
    trainer samples in fp32 either way."""
    prompts = build_rl_prompts(hh_chats, tokenizer, max_prompts=2, max_prompt_tokens=32, seed=0)
    runtime = TrainingRuntimeConfig(bf16=bf16)
    seen: list[torch.dtype] = []  # per attention call: autocast's dtype where it is on, else the query's
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def recording(module, query, *args, **kwargs):
        on = torch.is_autocast_enabled(query.device.type)
        seen.append(torch.get_autocast_dtype(query.device.type) if on else query.dtype)
        return sdpa(module, query, *args, **kwargs)

    ids = [tokenizer(tokenizer.apply_chat_template(p["prompt"], add_generation_prompt=True, tokenize=False),
                     add_special_tokens=False)["input_ids"] for p in prompts]
    dtypes = {}
    try:
        AttentionInterface.register("sdpa", recording)
        for cls in (MixedSamplingGRPOTrainer, GRPOTrainer):
            trainer = cls(model=AutoModelForCausalLM.from_pretrained(base_dir),
                          reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
                          args=build_grpo_config(GRPO_CFG.model_copy(update={"max_completion_length": 4}), runtime,
                                                 tmp_path / cls.__name__),
                          train_dataset=Dataset.from_list(prompts), processing_class=tokenizer)
            seen.clear()
            completions, _ = trainer._generate_single_turn(ids, None, {}, 1)
            assert len(completions) == 2 and seen
            dtypes[cls] = set(seen)
    finally:
        AttentionInterface.register("sdpa", sdpa)
    assert dtypes[MixedSamplingGRPOTrainer] == {torch.bfloat16 if bf16 else torch.float32}
    assert dtypes[GRPOTrainer] == {torch.float32}
