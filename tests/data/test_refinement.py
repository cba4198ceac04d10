"""Solution Refinement and CoT Reconstruction: N critique → revision rounds per item, the final answer kept, a
reasoning trace rebuilt, refined-over-draft preference pairs — through the tiny policy and through a real local
OpenAI-compatible endpoint serving it (same greedy outputs both ways)."""

from __future__ import annotations

import pytest

from forge.config import BaseModelConfig
from forge.data.refinement import (
    RefinementTrace,
    reconstruct_cot,
    refine_solutions,
    refined_outputs,
    visible_answer,
)
from forge.data.schemas import ChatSample, Message
from forge.generation import get_backend
from forge.generation.openai_server import make_server, start_in_thread
from forge.generation.transformers_backend import TransformersBackend
from forge.training.base_model import build_model


def _items() -> list[tuple[ChatSample, list[dict], str]]:
    out = []
    for q, a in (("What is 6 times 7?", "It is 41."), ("Name a prime above 10.", "12")):
        row = ChatSample.build(domain="stem", source="test", messages=[
            Message(role="user", content=q), Message(role="assistant", content=a)])
        out.append((row, [{"role": "user", "content": q}], a))
    return out


class Recording(TransformersBackend):
    """The real transformers backend, keeping every conversation it was asked to complete."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.prompts: list[list[dict]] = []

    def generate(self, prompts, **kwargs):
        self.prompts.extend(prompts)
        return super().generate(prompts, **kwargs)


def _tiny_model(tokenizer, seed: int):
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128, seed=seed)
    return build_model(cfg, tokenizer)


def test_each_round_revises_the_previous_final_answer(tokenizer):
    items = _items()
    backend = Recording(_tiny_model(tokenizer, 3), tokenizer, batch_size=8, device="cpu")
    traces = refine_solutions(backend, items, iterations=2, max_new_tokens=8, temperature=1.0, seed=1)
    # Four batches of two: critiques and revisions of round 1, then of round 2.
    assert len(backend.prompts) == 8
    crit1, rev1, crit2, rev2 = (backend.prompts[i : i + 2] for i in range(0, 8, 2))
    for i, (trace, (_, _, draft)) in enumerate(zip(traces, items, strict=True)):
        assert len(trace.critiques) == len(trace.revisions) == 2
        assert draft in crit1[i][-1]["content"] and draft in rev1[i][-1]["content"]
        assert trace.critiques[0] in rev1[i][-1]["content"]
        after_round1 = trace.revisions[0] or draft  # an empty revision keeps the answer it was meant to improve
        assert f"Answer to review:\n{after_round1}" in crit2[i][-1]["content"]
        assert f"Draft answer:\n{after_round1}" in rev2[i][-1]["content"]
        assert trace.final == (trace.revisions[1] or after_round1)
    assert any(t.final != d for t, (_, _, d) in zip(traces, items, strict=True))  # a sampled model says something
    reconstruct_cot(backend, traces, max_new_tokens=8, temperature=1.0)
    assert all(f"Final answer:\n{t.final}" in p[-1]["content"] for t, p in zip(traces, backend.prompts[8:], strict=True))
    rows, pairs = refined_outputs(traces)
    assert [r.messages[-1].content for r in rows] == [t.final for t in traces]
    assert [r.parents for r in rows] == [[row.id] for row, _, _ in items]
    changed = [t for t in traces if t.final.strip() != t.draft.strip()]
    assert [(p.chosen, p.rejected) for p in pairs] == [(t.final, t.draft) for t in changed]


def test_an_empty_revision_keeps_the_answer_it_was_meant_to_improve(tokenizer):
    model = _tiny_model(tokenizer, 4)
    # A real model that can only end its turn: every critique and revision comes back empty.
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.generation_config.suppress_tokens = [i for i in range(len(tokenizer)) if i != im_end]
    backend = TransformersBackend(model, tokenizer, batch_size=8, device="cpu")
    traces = refine_solutions(backend, _items(), iterations=2, max_new_tokens=6, temperature=1.0)
    assert all(t.revisions == ["", ""] and t.final == t.draft for t in traces)
    rows, pairs = refined_outputs(traces)
    assert [r.messages[-1].content for r in rows] == [t.draft for t in traces] and pairs == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>why</think> The answer.", "The answer."),
        ("  plain  ", "plain"),
        ("<think>only</think>", ""),
        ("thinking the prompt opened</think>\n\nThe answer.", "The answer."),
        # No tools are offered here, so a call block is part of the answer, not an action.
        ('<think>x</think>Use <tool_call>{"name": "search", "arguments": {}}</tool_call>',
         'Use <tool_call>{"name": "search", "arguments": {}}</tool_call>'),
    ],
)
def test_only_the_visible_answer_is_refined(text, expected):
    assert visible_answer(text) == expected


def test_unchanged_answer_makes_no_pair():
    row, history, draft = _items()[0]
    rows, pairs = refined_outputs([RefinementTrace(source=row, history=history, draft=draft, final=draft)])
    assert len(rows) == 1 and pairs == []


@pytest.fixture(scope="module")
def local(tokenizer):
    return TransformersBackend(_tiny_model(tokenizer, 5), tokenizer, batch_size=8, device="cpu")


def test_refinement_through_policy_and_teacher_endpoint(local):
    server = make_server(local, host="127.0.0.1", port=0)
    start_in_thread(server)
    try:
        host, port = server.server_address
        teacher = get_backend("openai", base_url=f"http://{host}:{port}/v1", model="forge")
        results = {}
        for name, backend in (("policy", local), ("endpoint", teacher)):
            traces = refine_solutions(backend, _items(), iterations=2, max_new_tokens=12)
            reconstruct_cot(backend, traces, max_new_tokens=12)
            results[name] = [(t.critiques, t.revisions, t.final, t.reasoning) for t in traces]
            assert all(len(t.critiques) == len(t.revisions) == 2 for t in traces)
    finally:
        server.shutdown()
    # Greedy decoding: the HTTP path returns what the local model generates (modulo whitespace the server trims).
    def norm(r):
        return [tuple(" ".join(str(x).split()) for x in item) for item in r]
    assert norm(results["endpoint"]) == norm(results["policy"])
