"""Solution Refinement and CoT Reconstruction: critique → revision rounds in which only an answer the critique
flags is revised, a reasoning trace rebuilt, refined rows that keep their source's history and say what changed
them, refined-over-draft preference pairs — through a real tiny model taught its critiques (tests/data/conftest.py)
and through a real local OpenAI-compatible endpoint serving it (same greedy outputs both ways)."""

from __future__ import annotations

import pytest

from forge.config import BaseModelConfig
from forge.data.refinement import (
    COT_MARK,
    OK,
    REFINED_MARK,
    REVISE,
    RefinementTrace,
    critique_verdict,
    reconstruct_cot,
    refine_solutions,
    refined_outputs,
    refinement_counts,
    visible_answer,
)
from forge.data.schemas import ChatSample, Message
from forge.generation import get_backend
from forge.generation.openai_server import make_server, start_in_thread
from forge.generation.transformers_backend import TransformersBackend
from forge.training.base_model import build_model
from tests.data.conftest import taught_rows

BUDGET = 48  # new tokens: room for every taught critique and revision


def _items() -> list[tuple[ChatSample, list[dict], str]]:
    return [(row, [{"role": "user", "content": row.messages[0].content}], row.messages[-1].content)
            for row in taught_rows()]


class Recording(TransformersBackend):
    """The real transformers backend, keeping every conversation it was asked to complete, batch by batch."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[list[list[dict]]] = []

    def generate(self, prompts, **kwargs):
        self.batches.append(prompts)
        return super().generate(prompts, **kwargs)


def test_a_flagged_answer_is_revised_and_a_passed_one_kept(taught_model, tokenizer):
    backend = Recording(taught_model, tokenizer, device="cpu")
    traces = refine_solutions(backend, _items(), iterations=1, max_new_tokens=BUDGET)
    assert [t.verdicts for t in traces] == [[REVISE], [REVISE], [OK], [OK], [REVISE]]
    assert [t.flagged for t in traces] == [True, True, False, False, True]
    # One batch of critiques, then revisions for the flagged answers only, told the critique without its verdict.
    critiques, revisions = backend.batches
    assert len(critiques) == 5 and len(revisions) == 3
    assert "Review:\nSix times seven is 42.\n\nImproved answer:" in revisions[0][-1]["content"]
    assert "VERDICT" not in revisions[0][-1]["content"]
    assert [t.revisions for t in traces] == [["It is 42."], ["13"], [], [], [""]]
    # A revised answer replaces the draft; a passed one is kept; an empty revision keeps the answer it was to fix.
    assert [t.final for t in traces] == ["It is 42.", "13", "Blue.", "Eight.", "tac."]
    assert [t.answer_changed for t in traces] == [True, True, False, False, False]


def test_rounds_stop_at_the_first_critique_that_does_not_flag(taught_model, tokenizer):
    backend = Recording(taught_model, tokenizer, device="cpu")
    traces = refine_solutions(backend, _items(), iterations=3, max_new_tokens=BUDGET)
    # Round 2 critiques only the revised answers: the passed ones are done, the empty revision's item too.
    round2 = backend.batches[2]
    assert [p[-1]["content"].split("Answer to review:\n")[1] for p in round2] == ["It is 42.", "13", "tac."]
    for trace in traces:
        assert len(trace.revisions) == trace.verdicts.count(REVISE)  # a revision only after a flag
        assert all(v == REVISE for v in trace.verdicts[:-1])  # every round but the last flagged the answer
        assert len(trace.critiques) == len(trace.verdicts) <= 3
    assert [len(t.critiques) for t in traces][2:4] == [1, 1]


@pytest.mark.parametrize(
    ("critique", "verdict"),
    [
        ("Fine as it is.\nVERDICT: OK", OK),
        ("Step 2 is wrong.\nverdict: revise", REVISE),  # case does not matter
        ("VERDICT: OK.", OK),  # trailing punctuation
        ("VERDICT: REVISE\nVERDICT: OK", OK),  # the last verdict line counts
        ("Looks wrong to me.", None),  # no verdict line: not flagged
        ("Six times seven is 42.\nVERDICT: REV", None),  # cut off by the token budget
        ("My VERDICT: REVISE", None),  # not a line of its own
        ("VERDICT: OKAY", None),  # not one of the two words
    ],
)
def test_verdict_convention(critique, verdict):
    assert critique_verdict(critique) == verdict


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


def test_refined_rows_keep_their_source_and_say_what_changed_them():
    source = ChatSample.build(domain="stem", source="gsm8k/train", messages=[
        Message(role="system", content="Be brief."), Message(role="user", content="2 + 2?"),
        Message(role="assistant", content="5", reasoning="Two and two.")])
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]

    def trace(final: str, reasoning: str) -> RefinementTrace:
        return RefinementTrace(source=source, history=history, draft="5", final=final, reasoning=reasoning)

    traces = [trace("4", "2 + 2 = 4."),  # revised, reasoning rebuilt
              trace("4", ""),  # revised, no reasoning came back: the old one led to "5", so it goes
              trace("5", "Count two, then two more."),  # kept, reasoning rebuilt
              trace("5", "")]  # nothing changed: no row, the source stays in the mix
    rows, pairs = refined_outputs(traces)
    assert [r.source for r in rows] == [f"gsm8k/train{REFINED_MARK}{COT_MARK}", f"gsm8k/train{REFINED_MARK}",
                                        f"gsm8k/train{COT_MARK}"]
    assert [(r.messages[-1].content, r.messages[-1].reasoning) for r in rows] == [
        ("4", "2 + 2 = 4."), ("4", None), ("5", "Count two, then two more.")]
    assert all(r.parents == [source.id] and r.messages[:-1] == source.messages[:-1] and r.domain == "stem"
               for r in rows)
    assert [(p.chosen, p.rejected, p.parents) for p in pairs] == [("4", "5", [source.id])] * 2
    assert refinement_counts(traces) == {"items": 4, "flagged": 0, "answers_changed": 2, "cot_rebuilt": 2,
                                         "rows_refined": 3}


def test_a_critique_without_a_verdict_keeps_the_answer(tokenizer):
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128, seed=4)
    model = build_model(cfg, tokenizer)
    # A real model that can only end its turn: every critique comes back empty, so none flags its answer.
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.generation_config.suppress_tokens = [i for i in range(len(tokenizer)) if i != im_end]
    backend = Recording(model, tokenizer, batch_size=8, device="cpu")
    traces = refine_solutions(backend, _items(), iterations=2, max_new_tokens=6, temperature=1.0)
    assert len(backend.batches) == 1  # one batch of critiques, no revision, no second round
    assert all(t.verdicts == [None] and t.revisions == [] and t.final == t.draft for t in traces)
    assert refined_outputs(traces) == ([], [])


def test_refinement_through_local_model_and_teacher_endpoint(taught_model, tokenizer):
    local = TransformersBackend(taught_model, tokenizer, device="cpu")
    server = make_server(local, host="127.0.0.1", port=0)
    start_in_thread(server)
    try:
        host, port = server.server_address
        teacher = get_backend("openai", base_url=f"http://{host}:{port}/v1", model="forge")
        results = {}
        for name, backend in (("local", local), ("endpoint", teacher)):
            traces = refine_solutions(backend, _items(), iterations=1, max_new_tokens=BUDGET)
            reconstruct_cot(backend, traces, max_new_tokens=12)
            results[name] = [(t.critiques, t.revisions, t.final, t.reasoning) for t in traces]
            assert [t.final for t in traces] == ["It is 42.", "13", "Blue.", "Eight.", "tac."]
    finally:
        server.shutdown()

    # Greedy decoding: the HTTP path returns what the local model generates (modulo whitespace the server trims).
    def norm(r):
        return [tuple(" ".join(str(x).split()) for x in item) for item in r]
    assert norm(results["endpoint"]) == norm(results["local"])


def test_a_reasoning_loop_is_not_taken_as_reconstructed_reasoning():
    """A small model's CoT output that loops ("areareare…") is dropped: the row keeps what it had."""
    from forge.data.refinement import looks_degenerate

    assert looks_degenerate("are" * 60) and looks_degenerate("the cat sat on the mat " * 8)
    assert not looks_degenerate("First add the numbers, then divide the sum by how many there are to get the mean.")
    assert not looks_degenerate("ok ok ok")  # too short to judge
