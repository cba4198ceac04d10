"""SFT samples from judged trajectories carry per-turn masks, and a masked turn adds no loss."""

from __future__ import annotations

import pytest
import torch

from forge.config import BaseModelConfig, SFTConfig, SFTStageConfig, TrainingRuntimeConfig
from forge.data.schemas import Message
from forge.search.agents import PlannerAgent
from forge.search.critic import judge_trajectory
from forge.training.base_model import build_model
from forge.training.checkpoints import save_atomically
from forge.training.sft import build_sft_trainer
from forge.training.tokenizer import encode_chat


@pytest.fixture(scope="module")
def judged(qas, tools):
    """A correct planner trajectory whose final answer is replaced by a wrong one, judged by the critic."""
    qa = next(q for q in qas if len(q.gold_relations) == 2)
    traj = PlannerAgent().run(qa, tools)
    assert traj.correct
    msgs = [*traj.messages[:-1], Message(role="assistant", reasoning="So the answer is Atlantis.", content="Atlantis")]
    wrong = traj.model_copy(update={"messages": msgs, "final_answer": "Atlantis", "correct": False})
    return wrong.model_copy(update={"verdicts": judge_trajectory(wrong, qa, tools.graph)})


def _losses(trainer, samples) -> list[float]:
    """The trainer's own loss on each of its training rows (kept in the order given)."""
    out = []
    for i, sample in enumerate(samples):
        row = trainer.train_dataset[i]
        assert row["input_ids"] == encode_chat(trainer.processing_class, sample, 4096)["input_ids"]
        with torch.no_grad():
            out.append(trainer.compute_loss(trainer.model, dict(trainer.data_collator([row]))).item())
    return out


def test_masked_turn_adds_no_loss(judged, tokenizer, tmp_path_factory):
    sample = judged.to_chat_sample()
    losses = [m.loss for m in sample.messages if m.role == "assistant"]
    assert losses[-1] is False and all(losses[:-1])  # only the wrong final answer is masked
    enc = encode_chat(tokenizer, sample, 4096)
    assert enc["completion_mask"][-1] == 0 and sum(enc["completion_mask"]) > 0
    tail = tokenizer.decode(enc["input_ids"][-8:])
    assert "Atlantis" in tail

    base = tmp_path_factory.mktemp("mask") / "base"
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128)
    save_atomically(build_model(cfg, tokenizer), tokenizer, base)
    # Another wrong answer in the masked turn (it is the last turn, so nothing later sees it either) ...
    other = sample.model_copy(update={"messages": [*sample.messages[:-1], sample.messages[-1].model_copy(
        update={"content": "El Dorado, a lost city of gold", "reasoning": "Surely El Dorado."})]})
    # ... and the same two with every turn trained, to show the check can fail.
    unmasked, unmasked_other = (s.model_copy(update={"messages": [m.model_copy(update={"loss": True})
                                                                  for m in s.messages]}) for s in (sample, other))
    stage = SFTStageConfig(name="s", max_length=4096, max_steps=1, learning_rate=1e-3, per_device_batch_size=1)
    rows = [sample, other, unmasked, unmasked_other]
    trainer = build_sft_trainer(base, rows, rows[:1], stage, SFTConfig(curriculum=[stage]),
                                TrainingRuntimeConfig(), tmp_path_factory.mktemp("work"))
    trainer.model.eval()
    masked_a, masked_b, full_a, full_b = _losses(trainer, rows)
    assert masked_a == pytest.approx(masked_b, rel=1e-6)
    assert abs(full_a - full_b) > 1e-3
