"""The code suite on Forge's judge: pass@1 per source from one greedy answer per problem.

.venv/bin/pytest tests/evals/test_code_suite.py -q
"""

import pytest

from forge.code.judge import fence
from forge.code.problems import load_problems
from forge.code.sandbox import isolation_report
from forge.config import CodeSuiteConfig
from forge.evals.code import evaluate_code_suite
from tests.code.candidates import CandidatePoolBackend

pytestmark = pytest.mark.skipif(not isolation_report().strong, reason="the sandbox refuses on this host")


def test_pass_at_1_per_source_counts_exactly_the_right_answers():
    cfg = CodeSuiteConfig(sources=["humaneval", "mbpp", "forge"], limit=4, batch_size=3)
    problems = load_problems(cfg.sources, limit=cfg.limit)
    # The first problem of each source gets a wrong answer, the others their reference, fenced.
    firsts = {p.id for i, p in enumerate(problems) if i % 4 == 0}
    backend = CandidatePoolBackend(
        {p.prompt(): ["```python\nprint('no idea')\n```" if p.id in firsts else fence(p.reference)] for p in problems}
    )
    report = evaluate_code_suite(backend, cfg)
    metrics = report.metrics()
    assert metrics["code_n"] == 12.0
    for source in ("humaneval", "mbpp", "forge"):
        assert metrics[f"{source}_pass_at_1"] == pytest.approx(0.75), (source, report.table())
    assert metrics["code_pass_at_1"] == pytest.approx(0.75)
    assert {r["problem_id"] for r in report.table() if not r["solved"]} == firsts


def test_the_real_generation_path_runs_the_suite(tokenizer):
    """A (random, tiny) Llama behind TransformersBackend answers; the judge scores it (it solves nothing)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from forge.generation.transformers_backend import TransformersBackend

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    backend = TransformersBackend(LlamaForCausalLM(config), tokenizer, batch_size=4)
    report = evaluate_code_suite(backend, CodeSuiteConfig(sources=["mbpp", "forge"], limit=2, max_new_tokens=8))
    metrics = report.metrics()
    assert metrics["code_n"] == 4.0 and metrics["code_pass_at_1"] == 0.0
    assert {"mbpp_pass_at_1", "forge_pass_at_1"} <= set(metrics)
