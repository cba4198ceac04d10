"""Solution Refinement and CoT Reconstruction (§2.1.1): SFT answers improved before SFT, through any backend.

Solution Refinement: each (question, draft answer) gets up to ``iterations`` critique → revision rounds. A critique
ends with a verdict line, ``VERDICT: OK`` or ``VERDICT: REVISE``; only an answer it flags (``REVISE``) is revised,
and the revision is critiqued in the next round. An answer the critique passes (``OK``) is kept and its rounds
stop; so does one whose critique has no verdict line: a critic that cannot follow the convention is not trusted to
rewrite a reference answer. An empty revision keeps the answer it was meant to improve. CoT Reconstruction: from
the question and the final answer, a reasoning trace that leads to it. The backend is the teacher behind an
OpenAI-compatible endpoint when the profile names one, else the local model (before SFT: the base model).

What comes out, per item whose row changed:
- a refined SFT row (``ChatSample``) that replaces its source row in the mix (``forge.data.mix.write_refined_mix``):
  the same history and domain, the final answer, the rebuilt reasoning; ``parents`` = the source row, ``source`` =
  the source row's plus a marker per step that changed it (``gsm8k/train+solution-refinement+cot-reconstruction``);
- a ``PreferencePair`` per item whose answer changed: refined (chosen) over draft (rejected), which the point-wise
  reward model trains on next to HH-RLHF.

    traces = refine_solutions(backend, items, iterations=3, max_new_tokens=256)
    traces = reconstruct_cot(backend, traces, max_new_tokens=256)
    rows, pairs = refined_outputs(traces)
    refinement_counts(traces, rows)   # {"items", "flagged", "answers_changed", "cot_rebuilt", "rows_refined"}
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from forge.chat import messages_to_hf, parse_assistant_text
from forge.data.schemas import ChatSample, PreferencePair
from forge.generation.base import GenerationBackend

Chat = list[dict[str, Any]]

OK, REVISE = "OK", "REVISE"
VERDICT_LINE = re.compile(r"^[ \t]*VERDICT:[ \t]*(OK|REVISE)\b.*$", re.IGNORECASE | re.MULTILINE)
REFINED_MARK = "+solution-refinement"  # appended to a row's source when its answer was revised
COT_MARK = "+cot-reconstruction"  # appended when its reasoning was rebuilt

CRITIC_SYSTEM = ("You are a strict reviewer. Point out every error, gap and unclear step. Do not rewrite the answer. "
                 f"End with one line: 'VERDICT: {OK}' if the answer needs no change, 'VERDICT: {REVISE}' if it does.")
REVISER_SYSTEM = "You revise answers. Fix every issue the review raises and return only the improved answer."
COT_SYSTEM = "Reconstruct the reasoning. Write the step-by-step thinking that leads to the given final answer."


@dataclass
class RefinementTrace:
    """One item's refinement history: the draft, each round's critique, verdict and revision, the final answer.

    ``critiques[i]`` has verdict ``verdicts[i]`` (``"OK"``, ``"REVISE"`` or None: no verdict line) and, when it
    flagged the answer, revision ``revisions[i]``; the rounds stop at the first critique that does not flag it."""

    source: ChatSample
    history: Chat
    draft: str
    critiques: list[str] = field(default_factory=list)
    verdicts: list[str | None] = field(default_factory=list)
    revisions: list[str] = field(default_factory=list)
    final: str = ""
    reasoning: str = ""

    @property
    def flagged(self) -> bool:
        """Some critique asked for a revision."""
        return REVISE in self.verdicts

    @property
    def answer_changed(self) -> bool:
        return bool(self.final.strip()) and self.final.strip() != self.draft.strip()


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


def critique_verdict(critique: str) -> str | None:
    """``"OK"`` or ``"REVISE"`` from the critique's last ``VERDICT:`` line; None when it has none."""
    found = VERDICT_LINE.findall(critique)
    return found[-1].upper() if found else None


def critique_body(critique: str) -> str:
    """The critique without its verdict lines: what the reviser is told to fix."""
    return VERDICT_LINE.sub("", critique).strip()


def refinement_items(rows: list[ChatSample], prompts: list[dict[str, Any]]) -> list[tuple[ChatSample, Chat, str]]:
    """``(source row, history, draft)`` items for :func:`refine_solutions`: each prompt (``{"prompt", "reference"}``,
    as :func:`forge.training.pairs.build_rl_prompts` makes them from ``rows``) with the row it came from (matched
    on history and answer, so two rows that share an answer keep their own questions)."""
    def key(history: Chat, answer: str) -> str:
        return json.dumps([history, answer], sort_keys=True)

    by_key: dict[str, ChatSample] = {}
    for row in rows:
        by_key.setdefault(key(messages_to_hf(row.messages[:-1]), row.messages[-1].content), row)
    return [(by_key[key(p["prompt"], p["reference"])], p["prompt"], p["reference"]) for p in prompts]


def refine_solutions(
    backend: GenerationBackend,
    items: list[tuple[ChatSample, Chat, str]],
    *,
    iterations: int,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
) -> list[RefinementTrace]:
    """Up to ``iterations`` critique → revision rounds on every ``(source row, history, draft)`` item, batched:
    each round critiques the answers still open and revises only those their critique flags."""
    traces = [RefinementTrace(source=s, history=h, draft=d, final=d) for s, h, d in items]
    sampling = {"max_new_tokens": max_new_tokens, "temperature": temperature}
    open_ = traces
    for round_ in range(iterations):
        if not open_:
            break
        critiques = backend.generate([critique_prompt(t.history, t.final) for t in open_], seed=seed + 2 * round_,
                                     **sampling)
        for trace, critique in zip(open_, critiques, strict=True):
            trace.critiques.append(visible_answer(critique))
            trace.verdicts.append(critique_verdict(trace.critiques[-1]))
        open_ = [t for t in open_ if t.verdicts[-1] == REVISE]  # the rest are kept as they are
        revisions = backend.generate(
            [revision_prompt(t.history, t.final, critique_body(t.critiques[-1])) for t in open_],
            seed=seed + 2 * round_ + 1, **sampling,
        ) if open_ else []
        for trace, revision in zip(open_, revisions, strict=True):
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
    if not traces:  # no call at all: not every engine takes an empty batch
        return traces
    outs = backend.generate([cot_prompt(t.history, t.final) for t in traces], max_new_tokens=max_new_tokens,
                            temperature=temperature, seed=seed)
    for trace, text in zip(traces, outs, strict=True):
        reasoning = visible_answer(text)
        trace.reasoning = "" if looks_degenerate(reasoning) else reasoning  # a loop is no reasoning: keep the row's
    return traces


def looks_degenerate(text: str) -> bool:
    """A generation stuck in a loop ("areareare…", one phrase over and over): it compresses to under a fifth of
    its size, where written text keeps about half. Short texts are not judged."""
    data = text.encode()
    return len(data) >= 40 and len(zlib.compress(data, 9)) < 0.2 * len(data)


def refined_row(trace: RefinementTrace) -> ChatSample | None:
    """The source row with the final answer and the rebuilt reasoning as its last turn, marked by the steps that
    changed it; None when nothing changed (the source row stays in the mix as it is)."""
    last = trace.source.messages[-1]
    changed = trace.answer_changed
    rebuilt = bool(trace.reasoning) and trace.reasoning != last.reasoning
    if not (changed or rebuilt):
        return None
    # Reasoning written for the old answer does not lead to a revised one: without a rebuilt trace it goes.
    reasoning = trace.reasoning or (None if changed else last.reasoning)
    final = last.model_copy(update={"content": trace.final if changed else last.content, "reasoning": reasoning})
    marks = (REFINED_MARK if changed else "") + (COT_MARK if rebuilt else "")
    return ChatSample.build(domain=trace.source.domain, source=trace.source.source + marks,
                            parents=[trace.source.id], tools=trace.source.tools,
                            messages=[*trace.source.messages[:-1], final])


def refined_outputs(traces: list[RefinementTrace]) -> tuple[list[ChatSample], list[PreferencePair]]:
    """Refined SFT rows (one per item whose row changed) and refined-over-draft preference pairs."""
    rows, pairs = [], []
    for t in traces:
        row = refined_row(t)
        if row is not None:
            rows.append(row)
        if t.answer_changed and t.draft.strip():
            pairs.append(PreferencePair.build(domain=t.source.domain, source="solution-refinement",
                                              parents=[t.source.id], prompt=t.source.messages[:-1], chosen=t.final,
                                              rejected=t.draft))
    return rows, pairs


def refinement_counts(traces: list[RefinementTrace]) -> dict[str, int]:
    """What each step changed: items refined, answers a critique flagged, answers changed, reasoning traces
    rebuilt (in rows that changed), and rows that replace their source row in the mix."""
    rows = [r for r in map(refined_row, traces) if r is not None]
    return {"items": len(traces), "flagged": sum(t.flagged for t in traces),
            "answers_changed": sum(t.answer_changed for t in traces),
            "cot_rebuilt": sum(r.source.endswith(COT_MARK) for r in rows), "rows_refined": len(rows)}


def trace_to_dict(trace: RefinementTrace) -> dict[str, Any]:
    """JSON-ready form of a trace (the source row as its schema dump), for the cached task's output file."""
    return {"source": trace.source.model_dump(mode="json"), "history": trace.history, "draft": trace.draft,
            "critiques": trace.critiques, "verdicts": trace.verdicts, "flagged": trace.flagged,
            "revisions": trace.revisions, "final": trace.final, "reasoning": trace.reasoning}


def trace_from_dict(data: dict[str, Any]) -> RefinementTrace:
    return RefinementTrace(source=ChatSample.model_validate(data["source"]), history=data["history"],
                           draft=data["draft"], critiques=data["critiques"], verdicts=data["verdicts"],
                           revisions=data["revisions"], final=data["final"], reasoning=data.get("reasoning", ""))
