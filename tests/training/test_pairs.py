"""Both reward models' pairs come from one builder (forge/training/pairs.py): every side of every pair, the
reference answers included, is held to the budget the weak answers were generated with, so length alone cannot
separate a pair; the checklist then labels them. Real tiny models generate the answers."""

from __future__ import annotations

import pytest

from forge.config import BaseModelConfig
from forge.generation import get_backend
from forge.training.base_model import build_model
from forge.training.checkpoints import save_atomically
from forge.training.pairs import build_rl_prompts, cut_to_budget, pairwise_pairs, reference_pairs, split_pairs

BUDGET = 16
SLACK = 3  # decoding a cut and encoding it again may merge a few byte-level tokens differently


@pytest.fixture(scope="module")
def prompts(hh_chats, tokenizer):
    return build_rl_prompts(hh_chats, tokenizer, max_prompts=60, max_prompt_tokens=128, seed=0)


@pytest.fixture(scope="module")
def answers(prompts, tokenizer, tmp_path_factory):
    """Answers of two different untrained checkpoints ("strong" and "weak"), each generated within the budget."""
    root = tmp_path_factory.mktemp("pairs")
    out = {}
    for name, seed in (("strong", 1), ("weak", 2)):
        cfg = BaseModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=64,
                              seed=seed)
        model_dir = save_atomically(build_model(cfg, tokenizer), tokenizer, root / name)
        backend = get_backend("transformers", model=model_dir, batch_size=32, device="cpu")
        out[name] = backend.generate([p["prompt"] for p in prompts], max_new_tokens=BUDGET, temperature=1.0, seed=0)
    return out


def _tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_reference_is_cut_to_the_budget_and_kept_whole_when_it_fits(tokenizer):
    long = "Volcanoes form where plumes of hot mantle rock melt through the plate above them. " * 5
    assert _tokens(tokenizer, long) > BUDGET
    assert _tokens(tokenizer, cut_to_budget(tokenizer, long, BUDGET)) <= BUDGET + SLACK
    assert long.startswith(cut_to_budget(tokenizer, long, BUDGET)[:20])
    assert cut_to_budget(tokenizer, "Short.", BUDGET) == "Short."


def test_both_reward_models_pairs_share_one_budget(prompts, answers, tokenizer):
    assert sum(_tokens(tokenizer, p["reference"]) > BUDGET for p in prompts) > 30  # most references are longer
    cut = {cut_to_budget(tokenizer, p["reference"], BUDGET) for p in prompts}
    assert all(_tokens(tokenizer, c) <= BUDGET + SLACK for c in cut)
    strong, weak = set(answers["strong"]), set(answers["weak"])  # generated with max_new_tokens=BUDGET
    pointwise = reference_pairs(prompts, answers["weak"], tokenizer, budget=BUDGET, eval_pairs=10, seed=0)
    pairwise = pairwise_pairs(prompts, answers["strong"], answers["weak"], tokenizer, budget=BUDGET, eval_pairs=10,
                              min_pairs=8, seed=0)
    point = pointwise.train + pointwise.heldout
    assert point and all(p.chosen in cut and p.rejected in weak for p in point)  # never a whole long reference
    pair = pairwise.train + pairwise.heldout
    assert pair and all(p.strong in strong | cut and p.weak in weak for p in pair)
    from_references = [p for p in pair if p.strong in cut]
    assert from_references and any(p.strong != p.reference for p in from_references)  # cut, as the point-wise RM's
    counts = pairwise.counts
    assert counts["kept_reference"] == len(from_references) and counts["train"] + counts["heldout"] == len(pair)
    assert sum(counts[f"{k}_policy"] for k in ("kept", "disagree", "tie")) == len(prompts)


def test_too_few_kept_pairs_is_refused(prompts, answers, tokenizer):
    with pytest.raises(ValueError, match="min_pairs"):
        pairwise_pairs(prompts[:3], answers["strong"][:3], answers["weak"][:3], tokenizer, budget=BUDGET,
                       eval_pairs=1, min_pairs=100, seed=0)


def test_split_holds_out_at_most_a_third_in_a_seeded_order():
    train, heldout = split_pairs(list(range(30)), eval_pairs=50, seed=0)
    assert len(heldout) == 10 and sorted(train + heldout) == list(range(30))
    assert split_pairs(list(range(30)), 50, seed=0) == (train, heldout)
    assert split_pairs(list(range(30)), 50, seed=1) != (train, heldout)


def test_prompts_drawn_from_the_mix_on_demand_are_those_of_its_rows_in_memory(hh_chats, tokenizer, tmp_path):
    """The RL stages draw prompts from ``MixRows`` (rows read by offset when drawn, never all held): the same
    prompts, in the same order, as from the rows read whole; a row by position is the row at that position, and
    a pickled MixRows (what a launched stage's ranks get) reads the same."""
    import pickle

    from forge.data.jsonl import write_jsonl
    from forge.data.mix import MixRows

    half = len(hh_chats) // 2
    for shard, part in enumerate((hh_chats[:half], hh_chats[half:])):
        write_jsonl(tmp_path / f"train-{shard:04d}-of-0002.jsonl", part)
    on_demand = MixRows(tmp_path)
    assert len(on_demand) == len(hh_chats)
    assert [on_demand[i] for i in (0, half - 1, half, len(hh_chats) - 1)] == [
        hh_chats[i] for i in (0, half - 1, half, len(hh_chats) - 1)
    ]
    for seed in (0, "1:grpo-pointwise"):
        whole = build_rl_prompts(hh_chats, tokenizer, max_prompts=40, max_prompt_tokens=128, seed=seed)
        drawn = build_rl_prompts(on_demand, tokenizer, max_prompts=40, max_prompt_tokens=128, seed=seed)
        assert drawn == whole and len(drawn) == 40
    again = pickle.loads(pickle.dumps(on_demand))
    assert again[half] == hh_chats[half] and list(again) == hh_chats
