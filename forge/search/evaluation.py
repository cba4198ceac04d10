"""The deep-search eval suite (§3's deep-search domain; forge/evals/suites.py has the others): held-out lookup
questions answered by the model through the offline search tools, in the loop agentic RL trains with.

    from forge.search.evaluation import evaluate_deep_search
    rows, metrics = evaluate_deep_search(backend, tools, questions=24, max_tool_calls=4, max_new_tokens=96)

Questions come from heads :func:`forge.search.lookups.is_eval_head` keeps out of agentic RL. Rows follow
forge/evals/domains.py (``id``, ``source`` = hop count, ``score``) plus the question, gold, final answer, tool
calls and turns; metrics are the accuracy (overall and per hop count), tool calls per question and the turns a
correct answer took.
"""

from __future__ import annotations

from typing import Any

from forge.search.agents import ReActAgent
from forge.search.critic import normalize_answer
from forge.search.lookups import build_lookup_qas
from forge.search.tools import SearchTools


def evaluate_deep_search(backend: Any, tools: SearchTools, *, questions: int, max_tool_calls: int,
                         max_new_tokens: int, min_hops: int = 1, max_hops: int = 2, seed: int = 0
                         ) -> tuple[list[dict], dict[str, float]]:
    qas = build_lookup_qas(tools.graph, questions, min_hops=min_hops, max_hops=max_hops, seed=seed, split="eval")
    agent = ReActAgent(backend, max_turns=max_tool_calls + 1, max_new_tokens=max_new_tokens)
    rows = []
    for qa, traj in zip(qas, agent.run_many(qas, tools), strict=True):
        calls = sum(len(m.tool_calls) for m in traj.messages if m.role == "assistant")
        turns = sum(m.role == "assistant" for m in traj.messages)
        right = traj.final_answer is not None and normalize_answer(traj.final_answer) == normalize_answer(qa.answer)
        reason = None if right else ("no answer" if traj.final_answer is None else "wrong answer")
        rows.append({"id": qa.id, "source": f"{len(qa.gold_relations)}-hop", "score": float(right), "reason": reason,
                     "question": qa.question, "gold": qa.answer, "final": traj.final_answer, "tool_calls": calls,
                     "turns": turns})
    n = len(rows)
    metrics = {"deep_search_accuracy": sum(r["score"] for r in rows) / n if n else 0.0, "deep_search_n": float(n)}
    for hops in sorted({r["source"] for r in rows}):
        mine = [r["score"] for r in rows if r["source"] == hops]
        metrics[f"deep_search_{hops.replace('-', '_')}_accuracy"] = sum(mine) / len(mine)
    if rows:
        metrics["deep_search_tool_calls"] = sum(r["tool_calls"] for r in rows) / n
        answered = [r["turns"] for r in rows if r["score"] == 1.0]
        metrics["deep_search_turns_to_answer"] = sum(answered) / len(answered) if answered else 0.0
    return rows, metrics
