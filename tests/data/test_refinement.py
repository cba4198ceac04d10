"""Solution Refinement and CoT Reconstruction: N critique → revision rounds per item, the final answer kept, a
reasoning trace rebuilt, refined-over-draft preference pairs — through the tiny policy and through a real local
OpenAI-compatible endpoint serving it (same greedy outputs both ways)."""

from __future__ import annotations

import pytest

from forge.config import BaseModelConfig
from forge.data.refinement import RefinementTrace, reconstruct_cot, refine_solutions, refined_outputs
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


class Scripted:
    """A generation backend that answers from a script (to pin down the loop's bookkeeping exactly)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.prompts = list(replies), []

    def generate(self, prompts, **kwargs):
        self.prompts.extend(prompts)
        return [self.replies.pop(0) for _ in prompts]


def test_rounds_keep_the_last_nonempty_revision():
    items = _items()[:1]
    backend = Scripted(["too low", "It is 42.", "<think>hm</think>fine", "", "<think>x</think>6*7 = 42"])
    traces = refine_solutions(backend, items, iterations=2, max_new_tokens=8)
    trace = traces[0]
    assert trace.critiques == ["too low", "fine"] and trace.revisions == ["It is 42.", ""]
    assert trace.final == "It is 42."  # round 2's empty revision keeps round 1's answer
    assert "It is 41." in backend.prompts[1][-1]["content"] and "too low" in backend.prompts[1][-1]["content"]
    reconstruct_cot(backend, traces, max_new_tokens=8)
    assert trace.reasoning == "6*7 = 42"
    rows, pairs = refined_outputs(traces)
    assert rows[0].messages[-1].content == "It is 42." and rows[0].messages[-1].reasoning == "6*7 = 42"
    assert rows[0].parents == [items[0][0].id]
    assert (pairs[0].chosen, pairs[0].rejected) == ("It is 42.", "It is 41.")


def test_unchanged_answer_makes_no_pair():
    row, history, draft = _items()[0]
    rows, pairs = refined_outputs([RefinementTrace(source=row, history=history, draft=draft, final=draft)])
    assert len(rows) == 1 and pairs == []


@pytest.fixture(scope="module")
def local(tokenizer):
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128, seed=5)
    return TransformersBackend(build_model(cfg, tokenizer), tokenizer, batch_size=8, device="cpu")


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
