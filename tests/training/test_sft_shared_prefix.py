"""A batch whose rows open with the same untrained tokens runs them once (forge/training/sft.py
``shared_prefix_inputs``): the loss and every gradient those of the rows run whole, and a stage of such rows learns."""

import pytest
import torch

from forge.config import BaseModelConfig, SFTConfig, SFTStageConfig, TrainingRuntimeConfig
from forge.data.schemas import ChatSample, Message
from forge.search.tools import FOLLOW_SPEC
from forge.training.base_model import build_model
from forge.training.checkpoints import save_atomically
from forge.training.sft import SHARED_PREFIX_MIN_TOKENS, PackedRowsCollator, run_sft_stage, shared_prefix_inputs
from forge.training.tokenizer import encode_chat

RUNTIME = TrainingRuntimeConfig(fused_lm_head=False)  # as the tiny profile trains: the loss from the logits


def link_rows(docs: list[dict]) -> list[ChatSample]:
    """The agentic warm-up's shape on real text: the same tool schema opens every row, then a question about a page,
    the page, and a trained answer."""
    return [ChatSample.build(domain="deep_search", source="wiki2", tools=[FOLLOW_SPEC], messages=[
        Message(role="user", content=f"You are on the page of {d['title']}. What is it?"),
        Message(role="tool", name="follow", content=d["text"][:160]),
        Message(role="assistant", content=d["text"].split(". ")[0][:80]),
    ]) for d in docs]


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    return build_model(BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2,
                                       intermediate_size=128), tokenizer).train()


def batch(tokenizer, samples: list[ChatSample], per_row: int = 1, packed: bool = True) -> dict[str, torch.Tensor]:
    """Samples through the packed-rows collator, ``per_row`` of them in each row (the shorter rows' pad tails
    included); or, ``packed=False``, one a row right-padded with an attention mask, as TRL's padding collator
    gives them."""
    encoded = [encode_chat(tokenizer, s, 1024) for s in samples]
    if not packed:
        width = max(len(e["input_ids"]) for e in encoded)
        ids = torch.full((len(encoded), width), tokenizer.pad_token_id)
        labels, mask = torch.full_like(ids, -100), torch.zeros_like(ids)
        for row, e in enumerate(encoded):
            n = len(e["input_ids"])
            ids[row, :n], mask[row, :n] = torch.tensor(e["input_ids"]), 1
            labels[row, :n] = torch.tensor([t if m else -100 for t, m in zip(e["input_ids"], e["completion_mask"])])
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}
    examples = []
    for i in range(0, len(encoded), per_row):
        group = encoded[i:i + per_row]
        ids = [t for e in group for t in e["input_ids"]]
        labels = [t if m else -100 for e in group for t, m in zip(e["input_ids"], e["completion_mask"])]
        examples.append({"input_ids": ids, "labels": labels, "seq_lengths": [len(e["input_ids"]) for e in group]})
    return PackedRowsCollator(tokenizer.pad_token_id)(examples)


def loss_and_grads(model, inputs: dict, items: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    loss = model(**inputs, num_items_in_batch=items).loss
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
def test_the_prefix_run_once_gives_the_loss_and_gradients_of_the_whole_rows(tokenizer, model, wiki_docs, packed):
    inputs = batch(tokenizer, link_rows(wiki_docs[:6]), packed=packed)
    items = (inputs["labels"][:, 1:] != -100).sum()
    whole_loss, whole_grads = loss_and_grads(model, {**inputs, "use_cache": False}, items)
    split = shared_prefix_inputs(model, inputs)
    assert split is not None
    shared = inputs["input_ids"].shape[1] - split["input_ids"].shape[1]
    assert shared >= SHARED_PREFIX_MIN_TOKENS  # the tool schema's tokens, and the chat template's around them
    assert (split["attention_mask"] == 0).any()  # the shorter rows' pad tails are kept out
    split_loss, split_grads = loss_and_grads(model, split, items)
    torch.testing.assert_close(split_loss, whole_loss, rtol=1e-5, atol=0)
    for (name, _), a, b in zip(model.named_parameters(), whole_grads, split_grads):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=name)
    assert any(g.abs().sum() > 0 for g in split_grads)


def test_rows_that_do_not_allow_it_are_run_whole(tokenizer, model, wiki_docs):
    rows = link_rows(wiki_docs[:6])
    assert shared_prefix_inputs(model, batch(tokenizer, rows, per_row=2)) is None  # a second sample in a row
    trained_prefix = batch(tokenizer, rows)
    trained_prefix["labels"][:, 5] = trained_prefix["input_ids"][:, 5]
    assert shared_prefix_inputs(model, trained_prefix) is None  # a trained token inside the shared tokens
    no_tools = [r.model_copy(update={"tools": []}) for r in rows]
    assert shared_prefix_inputs(model, batch(tokenizer, no_tools)) is None  # too few tokens in common
    assert shared_prefix_inputs(model, batch(tokenizer, rows[:1])) is None  # one row


@pytest.mark.parametrize("packing", [True, False], ids=["packed", "padded"])
def test_a_stage_of_rows_with_a_common_schema_runs_it_once_a_step_and_learns_as_whole_rows_do(
        tokenizer, wiki_docs, tmp_path, packing, monkeypatch):
    base = save_atomically(build_model(BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2,
                                                       intermediate_size=128), tokenizer), tokenizer, tmp_path / "base")
    rows = link_rows(wiki_docs[:160])
    longest = max(len(encode_chat(tokenizer, r, 4096)["input_ids"]) for r in rows)  # one sample a packed row
    stage = SFTStageConfig(name="links", max_length=longest, max_steps=20, learning_rate=5e-3, per_device_batch_size=4)
    sft = SFTConfig(curriculum=[stage], save_steps=10, packing=packing)
    shared = run_sft_stage(base, rows[:140], rows[140:], stage, sft, RUNTIME, tmp_path / "shared")
    monkeypatch.setattr("forge.training.sft.SHARED_PREFIX_MIN_TOKENS", 10**9)  # every row run whole
    whole = run_sft_stage(base, rows[:140], rows[140:], stage, sft, RUNTIME, tmp_path / "whole")
    assert shared.steps == 20 and shared.shared_prefix_steps == 20 and whole.shared_prefix_steps == 0, shared
    assert shared.eval_loss_after < 0.92 * shared.eval_loss_before, shared
    assert shared.eval_loss_after == pytest.approx(whole.eval_loss_after, rel=1e-3), (shared, whole)
