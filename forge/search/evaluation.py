"""The deep-search eval suite (§3's deep-search domain; forge/evals/suites.py has the others): held-out questions
answered by the model through the offline search tools, in the loop agentic RL trains with.

    from forge.search.evaluation import evaluate_deep_search, reachable_multihop
    extra = reachable_multihop(tools, load_multihop_eval(corpora), 12)
    rows, metrics = evaluate_deep_search(backend, tools, questions=24, max_tool_calls=4, max_new_tokens=96,
                                         multihop=extra)

Two kinds of question: lookups from heads :func:`forge.search.lookups.is_eval_head` keeps out of agentic RL
(``source`` = hop count), and the 2Wiki/HotpotQA/MuSiQue eval samples in ``corpora/multihop_qa_r1searcher`` (never
trained on: forge/data/corpora.py drops them from the train questions) where the offline wiki holds the evidence,
which :func:`reachable_multihop` decides (``source`` = the set). Rows follow forge/evals/domains.py (``id``,
``source``, ``score``) plus the question, gold, final answer, tool calls and turns; metrics are the accuracy
(overall and per source), tool calls per question and the turns a correct answer took.
"""

from __future__ import annotations

import re
from typing import Any

from forge.data.schemas import SearchQA
from forge.search.agents import ReActAgent
from forge.search.critic import normalize_answer
from forge.search.lookups import build_lookup_qas
from forge.search.tools import SearchTools

MIN_TITLE_CHARS = 5  # shorter page titles ("Iris", "Ra") match inside too many questions to name a page


def _words(text: str) -> str:
    return " " + " ".join(re.findall(r"\w+", text.casefold())) + " "


def reachable_multihop(tools: SearchTools, sets: dict[str, list[dict]], n: int) -> list[tuple[str, SearchQA]]:
    """Up to ``n`` questions of ``sets`` (name → rows with ``idx``, ``question``, ``answer``), taken in turn from
    each set in file order, whose evidence the offline wiki holds: the question names a page (its title, as whole
    words) and the answer is written on that page or on a page it links to; a comparison (a yes/no answer, or one the
    question itself names) needs pages for two things it names. The rest ask about pages this wiki does not have. Each comes back as (set, QA), the set without its ``_500`` suffix, the QA's id ``<file>:<idx>``."""
    titles = {}
    for page in tools.pages:
        if len(page.title) >= MIN_TITLE_CHARS:
            titles.setdefault(_words(page.title), page.mid)
    texts: dict[str, str] = {}

    def text(mid: str) -> str:
        if mid not in texts:
            texts[mid] = _words(tools.page(mid).text)
        return texts[mid]

    def reachable(row: dict) -> bool:
        question, answer = _words(row["question"]), _words(str(row["answer"]))
        if not answer.strip():
            return False
        named = [mid for title, mid in titles.items() if title in question]
        if answer.strip() in ("yes", "no") or answer in question:  # a comparison: the pages of both sides
            return len(set(named) - {tools.graph.resolve(str(row["answer"]))}) >= 2
        near = named + [tail for mid in named for _, tail in tools.graph.out_edges(mid)]
        return any(answer in text(mid) for mid in near)

    picked: dict[str, list[SearchQA]] = {name: [] for name in sets}
    cursors = {name: iter(rows) for name, rows in sets.items()}
    while sum(map(len, picked.values())) < n and cursors:
        for name in list(cursors):
            row = next((r for r in cursors[name] if reachable(r)), None)
            if row is None:
                del cursors[name]
            elif sum(map(len, picked.values())) < n:
                picked[name].append(SearchQA(id=f"{name}:{row['idx']}", source=f"multihop_qa_r1searcher/{name}",
                                             question=row["question"], answer=str(row["answer"])))
    return [(name.removesuffix("_500"), qa) for name, qas in picked.items() for qa in qas]


def evaluate_deep_search(backend: Any, tools: SearchTools, *, questions: int, max_tool_calls: int,
                         max_new_tokens: int, min_hops: int = 1, max_hops: int = 2, seed: int = 0,
                         multihop: list[tuple[str, SearchQA]] = ()) -> tuple[list[dict], dict[str, float]]:
    """``questions`` held-out lookups, then the ``multihop`` questions (from :func:`reachable_multihop`), each an
    episode of the ReAct agent on ``backend`` with at most ``max_tool_calls`` calls."""
    lookups = build_lookup_qas(tools.graph, questions, min_hops=min_hops, max_hops=max_hops, seed=seed, split="eval")
    sources = [f"{len(qa.gold_relations)}-hop" for qa in lookups] + [name for name, _ in multihop]
    qas = lookups + [qa for _, qa in multihop]
    agent = ReActAgent(backend, max_turns=max_tool_calls + 1, max_new_tokens=max_new_tokens)
    rows = []
    for qa, source, traj in zip(qas, sources, agent.run_many(qas, tools), strict=True):
        calls = sum(len(m.tool_calls) for m in traj.messages if m.role == "assistant")
        turns = sum(m.role == "assistant" for m in traj.messages)
        right = traj.final_answer is not None and normalize_answer(traj.final_answer) == normalize_answer(qa.answer)
        reason = None if right else ("no answer" if traj.final_answer is None else "wrong answer")
        rows.append({"id": qa.id, "source": source, "score": float(right), "reason": reason,
                     "question": qa.question, "gold": qa.answer, "final": traj.final_answer, "tool_calls": calls,
                     "turns": turns})
    n = len(rows)
    metrics = {"deep_search_accuracy": sum(r["score"] for r in rows) / n if n else 0.0, "deep_search_n": float(n)}
    for source in sorted({r["source"] for r in rows}):
        mine = [r["score"] for r in rows if r["source"] == source]
        metrics[f"deep_search_{source.replace('-', '_')}_accuracy"] = sum(mine) / len(mine)
    if rows:
        metrics["deep_search_tool_calls"] = sum(r["tool_calls"] for r in rows) / n
        answered = [r["turns"] for r in rows if r["score"] == 1.0]
        metrics["deep_search_turns_to_answer"] = sum(answered) / len(answered) if answered else 0.0
    return rows, metrics
