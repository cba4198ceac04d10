"""SFT packing (TRL best-fit-decreasing, position_ids restarting per sample): almost no padding in the batches, the same per-turn loss
masks, and no attention across packed samples (the packed loss equals the per-sample losses on the same rows)."""

from __future__ import annotations

import itertools

import pytest
import torch

from forge.config import BaseModelConfig, SFTConfig, SFTStageConfig, TrainingRuntimeConfig
from forge.data.schemas import ChatSample, Message
from forge.training.base_model import build_model
from forge.training.checkpoints import save_atomically
from forge.training.sft import build_sft_trainer, run_sft_stage

RUNTIME = TrainingRuntimeConfig()
STAGE = SFTStageConfig(name="s", max_length=256, max_steps=6, learning_rate=1e-3, per_device_batch_size=4)


def rows_of(docs: list[dict]) -> list[ChatSample]:
    """Conversations of very different lengths (what makes padding expensive), with a context-only turn."""
    out = []
    for doc in docs:
        text = doc["text"][: 40 + (len(doc["text"]) * 7) % 600]
        out.append(ChatSample.build(domain="general", source="wiki2", messages=[
            Message(role="user", content=f"About {doc['title']}?"),
            Message(role="assistant", content="Let me think.", loss=False),
            Message(role="user", content="Go on."),
            Message(role="assistant", content=text),
        ]))
    return out


@pytest.fixture(scope="module")
def base_dir(tokenizer, tmp_path_factory):
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128)
    return save_atomically(build_model(cfg, tokenizer), tokenizer, tmp_path_factory.mktemp("pack") / "base")


@pytest.fixture(scope="module")
def rows(wiki_docs):
    return rows_of(wiki_docs[:64]), rows_of(wiki_docs[-8:])


def _first_batch(trainer):
    return next(iter(trainer.get_train_dataloader()))


def test_packed_loss_equals_per_sample_loss(base_dir, rows, tmp_path):
    packed = build_sft_trainer(base_dir, rows[0], rows[1], STAGE, SFTConfig(curriculum=[STAGE], packing=True), RUNTIME,
                               tmp_path / "p")
    batch = _first_batch(packed)
    assert "attention_mask" not in batch and batch["position_ids"].shape == batch["input_ids"].shape
    model = packed.model.eval()
    packed_nll, separate_nll, n, samples = 0.0, 0.0, 0, 0
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
        for row in range(batch["input_ids"].shape[0]):
            labels, pos = batch["labels"][row], batch["position_ids"][row]
            starts = [*(pos == 0).nonzero().flatten().tolist(), len(pos)]
            for a, b in itertools.pairwise(starts):
                keep = labels[a + 1 : b] != -100
                if not keep.any():
                    continue
                samples += 1
                alone = model(input_ids=batch["input_ids"][row : row + 1, a:b]).logits[0]
                target = labels[a + 1 : b][keep]
                lp_packed = torch.log_softmax(logits[row, a : b - 1], -1)[keep]
                lp_alone = torch.log_softmax(alone[:-1], -1)[keep]
                packed_nll -= lp_packed.gather(1, target[:, None]).sum().item()
                separate_nll -= lp_alone.gather(1, target[:, None]).sum().item()
                n += int(keep.sum())
    assert samples > batch["input_ids"].shape[0]  # rows hold several samples each
    assert packed_nll / n == pytest.approx(separate_nll / n, rel=1e-4)


def test_packing_removes_padding_and_trains(base_dir, rows, tmp_path):
    results = {}
    for packing in (False, True):
        sft = SFTConfig(curriculum=[STAGE], packing=packing, save_steps=100)
        results[packing] = run_sft_stage(base_dir, rows[0], rows[1], STAGE, sft, RUNTIME, tmp_path / f"out-{packing}")
    assert results[False].padding_fraction > 0.2  # lengths 40–640 characters padded to the longest in a batch
    assert results[True].padding_fraction < 0.1  # best-fit rows are nearly full
    assert results[True].tokens > results[False].tokens  # same steps, more real tokens per step
    assert results[True].eval_loss_after < results[True].eval_loss_before
