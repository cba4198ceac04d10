"""Base model: seeded tiny Llama, held-out loss falls on real text, a killed run resumes from its checkpoint."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from forge.config import BaseModelConfig, TrainingRuntimeConfig
from forge.training.base_model import build_model, pack_texts, pretrain
from forge.training.checkpoints import work_dir_for

TINY = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2, "intermediate_size": 128, "seq_len": 64}
RUNTIME = TrainingRuntimeConfig()


class Killed(Exception):
    """Stands in for a SIGKILL in the middle of training."""


def test_build_model_is_seeded_and_tied(tokenizer):
    cfg = BaseModelConfig(**TINY)
    a, b = build_model(cfg, tokenizer), build_model(cfg, tokenizer)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert a.lm_head.weight.data_ptr() == a.model.embed_tokens.weight.data_ptr()
    assert a.config.vocab_size == len(tokenizer)
    assert a.config.pad_token_id == tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert a.config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    c = build_model(BaseModelConfig(**TINY, seed=1), tokenizer)
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


def test_pack_texts_separates_documents(tokenizer):
    blocks = pack_texts(tokenizer, ["alpha beta", "gamma"] * 20, seq_len=16)
    assert blocks.dim() == 2 and blocks.shape[1] == 16
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert (blocks == eot).sum() >= blocks.numel() // 8  # one separator after every short document


def test_pretraining_lowers_heldout_loss(tokenizer, wiki_texts, tmp_path):
    cfg = BaseModelConfig(
        **TINY,
        batch_size=16,
        max_steps=120,
        learning_rate=1e-2,
        warmup_steps=10,
        eval_every=40,
        max_corpus_chars=400_000,
    )
    logged: list[tuple[dict, int]] = []
    out = tmp_path / "base"
    result = pretrain(
        build_model(cfg, tokenizer),
        tokenizer,
        wiki_texts,
        cfg,
        RUNTIME,
        out,
        log_metrics=lambda m, s: logged.append((m, s)),
    )
    # From ln(V) at initialisation to below the corpus' unigram plateau (~6.0 nats at V=1024, reached by ~40 steps).
    assert result.final_heldout_loss < 0.88 * result.initial_heldout_loss, result
    assert result.curve[-1][2] < result.curve[0][2]  # still falling after the plateau
    assert [step for step, _, _ in result.curve] == [40, 80, 120]
    assert result.steps == 120 and result.tokens_seen == 120 * 16 * 64 and result.resumed_from_step is None
    assert any("pretrain/loss" in m for m, _ in logged) and any("pretrain/eval_loss" in m for m, _ in logged)
    # The output is a complete, loadable model; no work or temp dir is left next to it.
    model = AutoModelForCausalLM.from_pretrained(out)
    assert AutoTokenizer.from_pretrained(out).chat_template == tokenizer.chat_template
    assert model.config.num_hidden_layers == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base"]


def test_killed_pretraining_resumes_from_checkpoint(tokenizer, wiki_texts, tmp_path):
    cfg = BaseModelConfig(**TINY, batch_size=4, max_steps=12, warmup_steps=2, eval_every=4, max_corpus_chars=100_000)
    out = tmp_path / "base"

    def crash_after_step_5(metrics, step):
        if step >= 6:
            raise Killed(step)

    with pytest.raises(Killed):
        pretrain(build_model(cfg, tokenizer), tokenizer, wiki_texts, cfg, RUNTIME, out, crash_after_step_5)
    assert not out.exists()  # nothing half-written at the destination
    checkpoints = sorted(p.name for p in work_dir_for(out).glob("checkpoint-*"))
    assert checkpoints == ["checkpoint-4"]

    steps_seen: list[int] = []
    # A fresh process would rebuild the model from scratch: the checkpoint, not this object, must win.
    result = pretrain(
        build_model(cfg, tokenizer), tokenizer, wiki_texts, cfg, RUNTIME, out, lambda m, s: steps_seen.append(s)
    )
    assert result.resumed_from_step == 4
    assert result.steps == 12
    assert min(steps_seen) > 4  # training continued after the checkpoint instead of restarting at step 1
    # The curve spans both runs (log history comes back with the checkpoint).
    assert [step for step, _, _ in result.curve] == [4, 8, 12]
    assert out.is_dir() and not work_dir_for(out).exists()
