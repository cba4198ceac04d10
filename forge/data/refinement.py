"""Solution Refinement and CoT Reconstruction (§2.1.1), through any generation backend.

Solution Refinement: for each (question, draft answer), ``iterations`` rounds of critique → revision; the last
non-empty revision is the final answer (a revision that comes back empty keeps the answer it was meant to
improve). CoT Reconstruction: from the question and the refined final answer, a reasoning trace that leads to
it. The backend is the tiny policy (transformers) on CPU, or a teacher behind an OpenAI-compatible endpoint
(``forge.generation.openai_backend``; a vLLM server in the full profile). Every call is batched across items.

What comes out:
- a refined SFT row per item (``ChatSample``: reasoning = reconstructed trace, content = refined answer,
  parents = the source row), and
- a ``PreferencePair`` per item whose final answer changed: refined (chosen) over unrefined draft (rejected),
  which the point-wise reward model trains on next to HH-RLHF.

    traces = refine_solutions(backend, items, iterations=3, max_new_tokens=256)
    traces = reconstruct_cot(backend, traces, max_new_tokens=256)
    rows, pairs = refined_outputs(traces)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forge.chat import messages_from_hf, parse_assistant_text
from forge.data.schemas import ChatSample, Message, PreferencePair
from forge.generation.base import GenerationBackend

Chat = list[dict[str, Any]]

CRITIC_SYSTEM = "You are a strict reviewer. Point out every error, gap and unclear step. Do not rewrite the answer."
REVISER_SYSTEM = "You revise answers. Fix every issue the review raises and return only the improved answer."
COT_SYSTEM = "Reconstruct the reasoning. Write the step-by-step thinking that leads to the given final answer."


@dataclass
class RefinementTrace:
    """One item's refinement history: the draft, each round's critique and revision, the final answer."""

    source: ChatSample
    history: Chat
    draft: str
    critiques: list[str] = field(default_factory=list)
    revisions: list[str] = field(default_factory=list)
    final: str = ""
    reasoning: str = ""


def _question(history: Chat) -> str:
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in history)


def critique_prompt(history: Chat, answer: str) -> Chat:
    return [
        {"role": "system", "content": CRITIC_SYSTEM},
        {"role": "user", "content": f"Conversation:\n{_question(history)}\n\nAnswer to review:\n{answer}"},
    ]


def revision_prompt(history: Chat, answer: str, critique: str) -> Chat:
    return [
        {"role": "system", "content": REVISER_SYSTEM},
        {"role": "user", "content": f"Conversation:\n{_question(history)}\n\nDraft answer:\n{answer}\n\n"
                                    f"Review:\n{critique}\n\nImproved answer:"},
    ]


def cot_prompt(history: Chat, final: str) -> Chat:
    return [
        {"role": "system", "content": COT_SYSTEM},
        {"role": "user", "content": f"Conversation:\n{_question(history)}\n\nFinal answer:\n{final}"},
    ]


def visible_answer(text: str) -> str:
    """The content of a generated turn, its reasoning dropped: only the visible answer is refined. The prompts
    here offer no tools, so a ``<tool_call>`` block the model writes anyway stays part of the text."""
    return parse_assistant_text(text, tool_names=()).content


def refinement_items(rows: list[ChatSample], prompts: list[dict[str, Any]]) -> list[tuple[ChatSample, Chat, str]]:
    """``(source row, history, draft)`` items for :func:`refine_solutions`: each prompt (``{"prompt", "reference"}``,
    as :func:`forge.training.pairs.build_rl_prompts` makes them from ``rows``) with the row its reference came from."""
    by_answer: dict[str, ChatSample] = {}
    for row in rows:
        by_answer.setdefault(row.messages[-1].content or "", row)
    return [(by_answer[p["reference"]], p["prompt"], p["reference"]) for p in prompts]


def refine_solutions(
    backend: GenerationBackend,
    items: list[tuple[ChatSample, Chat, str]],
    *,
    iterations: int,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
) -> list[RefinementTrace]:
    """Run ``iterations`` critique → revision rounds on every ``(source row, history, draft)`` item, batched."""
    traces = [RefinementTrace(source=s, history=h, draft=d, final=d) for s, h, d in items]
    sampling = {"max_new_tokens": max_new_tokens, "temperature": temperature}
    for round_ in range(iterations):
        critiques = backend.generate([critique_prompt(t.history, t.final) for t in traces], seed=seed + 2 * round_,
                                     **sampling)
        revisions = backend.generate(
            [revision_prompt(t.history, t.final, visible_answer(c)) for t, c in zip(traces, critiques, strict=True)],
            seed=seed + 2 * round_ + 1, **sampling,
        )
        for trace, critique, revision in zip(traces, critiques, revisions, strict=True):
            trace.critiques.append(visible_answer(critique))
            revision = visible_answer(revision)
            trace.revisions.append(revision)
            if revision:  # an empty revision keeps the answer it was meant to improve
                trace.final = revision
    return traces


def reconstruct_cot(
    backend: GenerationBackend, traces: list[RefinementTrace], *, max_new_tokens: int, temperature: float = 0.0,
    seed: int = 0,
) -> list[RefinementTrace]:
    """Fill each trace's ``reasoning`` with a trace that leads to its final answer."""
    outs = backend.generate([cot_prompt(t.history, t.final) for t in traces], max_new_tokens=max_new_tokens,
                            temperature=temperature, seed=seed)
    for trace, text in zip(traces, outs, strict=True):
        trace.reasoning = visible_answer(text)
    return traces


def refined_outputs(traces: list[RefinementTrace]) -> tuple[list[ChatSample], list[PreferencePair]]:
    """Refined SFT rows (reasoning + refined answer) and refined-over-draft preference pairs."""
    rows, pairs = [], []
    for t in traces:
        if not t.final.strip():
            continue
        history = messages_from_hf(t.history)
        rows.append(ChatSample.build(
            domain=t.source.domain, source="solution-refinement", parents=[t.source.id],
            messages=[*history, Message(role="assistant", content=t.final, reasoning=t.reasoning or None)],
        ))
        if t.final.strip() != t.draft.strip() and t.draft.strip():
            pairs.append(PreferencePair.build(domain=t.source.domain, source="solution-refinement",
                                              parents=[t.source.id], prompt=history, chosen=t.final,
                                              rejected=t.draft))
    return rows, pairs


def trace_to_dict(trace: RefinementTrace) -> dict[str, Any]:
    """JSON-ready form of a trace (the source row as its schema dump), for the cached task's output file."""
    return {"source": trace.source.model_dump(mode="json"), "history": trace.history, "draft": trace.draft,
            "critiques": trace.critiques, "revisions": trace.revisions, "final": trace.final,
            "reasoning": trace.reasoning}


def trace_from_dict(data: dict[str, Any]) -> RefinementTrace:
    return RefinementTrace(source=ChatSample.model_validate(data["source"]), history=data["history"],
                           draft=data["draft"], critiques=data["critiques"], revisions=data["revisions"],
                           final=data["final"], reasoning=data.get("reasoning", ""))
