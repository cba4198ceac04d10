"""SFT stage: held-out chat loss falls, labels are -100 outside trained assistant turns, loss=False turns add no loss."""

import pytest
import torch
import torch.nn.functional as F

from forge.config import BaseModelConfig, SFTConfig, SFTStageConfig, TrainingRuntimeConfig
from forge.data.schemas import ChatSample, Message, ToolCall, ToolFunction, ToolSpec
from forge.training.base_model import build_model
from forge.training.checkpoints import save_atomically, work_dir_for
from forge.training.sft import build_sft_trainer, run_sft_stage
from forge.training.tokenizer import encode_chat

RUNTIME = TrainingRuntimeConfig()
SEARCH = ToolSpec(function=ToolFunction(name="search", description="Search the wiki."))


def chat_rows(docs: list[dict]) -> list[ChatSample]:
    """Real Wikipedia paragraphs as two conversation shapes: a direct answer, and search → answer."""
    rows = []
    for i, doc in enumerate(docs):
        first = doc["text"].split(". ")[0][:200]
        if i % 2:
            messages = [
                Message(role="user", content=f"Who or what is {doc['title']}?"),
                Message(role="assistant", content=first),
            ]
            rows.append(ChatSample.build(domain="general", source="wiki2", messages=messages))
        else:
            messages = [
                Message(role="user", content=f"Tell me about {doc['title']}."),
                Message(role="assistant", tool_calls=[ToolCall(name="search", arguments={"query": doc["title"]})]),
                Message(role="tool", name="search", content=doc["text"][:300]),
                Message(role="assistant", content=first),
            ]
            rows.append(ChatSample.build(domain="deep_search", source="wiki2", tools=[SEARCH], messages=messages))
    return rows


@pytest.fixture(scope="module")
def base_dir(tokenizer, tmp_path_factory):
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128)
    return save_atomically(build_model(cfg, tokenizer), tokenizer, tmp_path_factory.mktemp("sft") / "base")


@pytest.fixture(scope="module")
def rows(wiki_docs):
    return chat_rows(wiki_docs[:240]), chat_rows(wiki_docs[-24:])


def mixed_sample() -> ChatSample:
    """A rejected first answer (loss=False) followed by a trained second answer."""
    return ChatSample.build(
        domain="general",
        source="test",
        messages=[
            Message(role="user", content="Capital of Lotharingia?"),
            Message(role="assistant", content="Paris, surely.", loss=False),
            Message(role="user", content="Are you sure?"),
            Message(role="assistant", content="No: Aachen."),
        ],
    )


def test_labels_are_ignored_outside_trained_turns(tokenizer, base_dir, rows, tmp_path):
    stage = SFTStageConfig(name="s", max_length=128, max_steps=1, learning_rate=1e-3, per_device_batch_size=4)
    train = [mixed_sample(), *rows[0][:3]]
    trainer = build_sft_trainer(
        base_dir, train, rows[1][:2], stage, SFTConfig(curriculum=[stage]), RUNTIME, tmp_path / "work"
    )
    examples = [trainer.train_dataset[i] for i in range(len(trainer.train_dataset))]
    batch = trainer.data_collator(examples)
    assert batch["labels"].shape == batch["input_ids"].shape
    by_ids = {tuple(e["input_ids"]): e for e in examples}
    for sample in train:
        enc = encode_chat(tokenizer, sample, 128)
        row = [i for i, e in enumerate(examples) if tuple(e["input_ids"]) == tuple(enc["input_ids"])]
        if not any(enc["completion_mask"]):  # truncation left it without a trained token: TRL drops it
            assert not row
            continue
        assert row, "every row with trained tokens reaches the trainer"
        labels = batch["labels"][row[0]]
        n = len(enc["input_ids"])
        expected = torch.tensor(
            [t if m else -100 for t, m in zip(enc["input_ids"], enc["completion_mask"], strict=True)]
        )
        assert torch.equal(labels[:n], expected)
        assert (labels[n:] == -100).all()  # padding
    assert tuple(encode_chat(tokenizer, mixed_sample(), 128)["input_ids"]) in by_ids
    assert len(examples) >= 2
    first = batch["labels"][0]
    assert tokenizer.decode(first[first != -100]) == "No: Aachen.<|im_end|>"


@pytest.mark.parametrize("fused_lm_head", [True, False], ids=["trl-fused-head", "logits"])
def test_masked_turn_contributes_no_loss(tokenizer, base_dir, tmp_path, fused_lm_head):
    """Either way of computing the loss (runtime.fused_lm_head) is the same NLL over exactly the trained turn."""
    stage = SFTStageConfig(name="s", max_length=128, max_steps=1, learning_rate=1e-3, per_device_batch_size=1)
    runtime = TrainingRuntimeConfig(fused_lm_head=fused_lm_head)
    trainer = build_sft_trainer(
        base_dir, [mixed_sample()], [mixed_sample()], stage, SFTConfig(curriculum=[stage]), runtime, tmp_path / "work"
    )
    batch = trainer.data_collator([trainer.train_dataset[0]])
    trainer.model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, dict(batch))
        logits = trainer.model(input_ids=batch["input_ids"]).logits[0]  # (seq, vocab)
    enc = encode_chat(tokenizer, mixed_sample(), 128)
    ids = torch.tensor(enc["input_ids"])
    # Mean next-token NLL over exactly the loss=True turn's tokens, computed by hand.
    positions = [i for i, m in enumerate(enc["completion_mask"]) if m]
    manual = F.cross_entropy(logits[[p - 1 for p in positions]], ids[positions])
    assert loss.item() == pytest.approx(manual.item(), rel=1e-5)
    # And it differs from the loss over both assistant turns: the rejected one really is excluded.
    both = encode_chat(
        tokenizer,
        mixed_sample().model_copy(
            update={"messages": [m.model_copy(update={"loss": True}) for m in mixed_sample().messages]}
        ),
        128,
    )
    both_pos = [i for i, m in enumerate(both["completion_mask"]) if m]
    assert len(both_pos) > len(positions)
    assert F.cross_entropy(logits[[p - 1 for p in both_pos]], ids[both_pos]).item() != pytest.approx(manual.item())


def test_sft_curriculum_lowers_heldout_chat_loss(base_dir, rows, tmp_path):
    sft = SFTConfig(
        curriculum=[
            SFTStageConfig(name="ctx-128", max_length=128, max_steps=30, learning_rate=5e-3, per_device_batch_size=8),
            SFTStageConfig(name="ctx-256", max_length=256, max_steps=6, learning_rate=2e-3, per_device_batch_size=4),
        ],
        save_steps=10,
    )
    logged = []
    results, model_dir = [], base_dir
    for stage in sft.curriculum:  # as flows/sft.py runs it: each stage from the previous stage's weights
        results.append(run_sft_stage(model_dir, rows[0], rows[1], stage, sft, RUNTIME, tmp_path / "sft" / stage.name,
                                     lambda m, s: logged.append((m, s))))
        model_dir = results[-1].out_dir
    first, second = results
    assert first.eval_loss_after < 0.9 * first.eval_loss_before, first
    assert first.steps == 30 and first.tokens > 0 and 0 <= first.padding_fraction < 1
    # The second stage starts from the first stage's weights, not from the base model.
    assert second.eval_loss_before < 0.95 * first.eval_loss_before, second
    assert second.eval_loss_after <= second.eval_loss_before * 1.02
    assert (tmp_path / "sft" / "ctx-256" / "config.json").exists()
    assert not work_dir_for(tmp_path / "sft" / "ctx-128").exists()
    # Both stages log under one key (tasks/training.py offsets their steps so MLflow draws one curve).
    assert sum("sft/loss" in m for m, _ in logged) >= 2 and not any("ctx-" in k for m, _ in logged for k in m)


def test_killed_sft_stage_resumes(base_dir, rows, tmp_path):
    stage = SFTStageConfig(name="s", max_length=128, max_steps=6, learning_rate=1e-3, per_device_batch_size=4)
    sft = SFTConfig(curriculum=[stage], save_steps=2)
    out = tmp_path / "s"

    class Killed(Exception):
        pass

    def crash(metrics, step):
        if step >= 3:
            raise Killed

    with pytest.raises(Killed):
        run_sft_stage(base_dir, rows[0][:40], rows[1][:4], stage, sft, RUNTIME, out, crash)
    assert not out.exists()
    result = run_sft_stage(base_dir, rows[0][:40], rows[1][:4], stage, sft, RUNTIME, out)
    assert result.resumed_from_step == 2 and result.steps == 6 and out.is_dir()


def test_a_streamed_mix_tokenizes_in_memory_bounded_by_a_batch_not_the_mix(tokenizer, tmp_path, wiki_texts):
    """The SFT task hands the trainer the mix as a stream (MixRows): rows are read, encoded and written to an Arrow
    file a batch at a time, and the dataset is that file memory-mapped. Holding the rows and their tokens (as a list
    of rows did) took 18x the shards' size here; the stream stays under half of it, whatever the mix's size."""
    import random
    import tracemalloc

    from forge.data.jsonl import write_jsonl
    from forge.data.mix import MixRows
    from forge.training.sft import tokenize_rows

    words = " ".join(wiki_texts).split()
    rng = random.Random(0)
    mix = tmp_path / "mix"
    mix.mkdir()
    for shard in range(2):
        write_jsonl(mix / f"train-{shard:04d}-of-0002.jsonl", (ChatSample.build(domain="general", source="test", messages=[
            Message(role="user", content=" ".join(rng.choices(words, k=20))),
            Message(role="assistant", content=" ".join(rng.choices(words, k=500)))]) for _ in range(500)))
    mix_bytes = sum(p.stat().st_size for p in mix.glob("train-*.jsonl"))
    tracemalloc.start()
    try:
        dataset = tokenize_rows(tokenizer, MixRows(mix), 2048, tmp_path / "tokens" / "train.arrow")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert mix_bytes > 3 * 2**20 and len(dataset) == 1000
    for i in (0, 555, 999):  # the file holds what encode_chat gives for that row, in the mix's order
        row = next(r for j, r in enumerate(MixRows(mix)) if j == i)
        assert dataset[i] == encode_chat(tokenizer, row, 2048)
    assert peak < mix_bytes / 2, f"peak {peak / 2**20:.1f} MB for {mix_bytes / 2**20:.1f} MB of shards"


def test_heldout_rows_without_a_trained_token_leave_the_heldout_loss_finite(base_dir, rows, tmp_path):
    """A held-out row whose trained turns fall past ``max_length`` keeps no loss token; with packing TRL keeps it, and
    an evaluation batch of such rows alone has a loss of 0/0. Those rows leave the held-out set: the loss is the one
    over the rows that keep a trained token (found with 2 ranks x 4 rows at 512 tokens in the tiny mix, whose 64
    held-out rows include 10 such; one row a batch, as the GPU profile's stages evaluate, makes one enough)."""
    stage = SFTStageConfig(name="s", max_length=64, max_steps=1, learning_rate=1e-3, per_device_batch_size=1)
    long_prompt = ChatSample.build(domain="general", source="test", messages=[
        Message(role="user", content=" ".join(["Lotharingia"] * 200)), Message(role="assistant", content="Aachen.")])
    good = rows[1][:2]
    losses = {}
    for name, heldout in {"with": [long_prompt, *good, long_prompt], "without": good}.items():
        trainer = build_sft_trainer(base_dir, rows[0][:4], heldout, stage, SFTConfig(curriculum=[stage], packing=True),
                                    RUNTIME, tmp_path / name)
        losses[name] = trainer.evaluate()["eval_loss"]
    assert losses["with"] == pytest.approx(losses["without"], rel=1e-6)
    assert losses["with"] == losses["with"]  # not nan
    with pytest.raises(ValueError, match="none of the 2 held-out rows keeps an assistant token within max_length 64"):
        build_sft_trainer(base_dir, rows[0][:4], [long_prompt, long_prompt], stage,
                          SFTConfig(curriculum=[stage], packing=True), RUNTIME, tmp_path / "none")
