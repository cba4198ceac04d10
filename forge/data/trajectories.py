"""Tool-call conversations built from real corpus data: deep-search trajectories and tool-use episodes.

Deep search (tools ``search(query, k)`` and ``visit(page)``):
- MuSiQue: one search per question-decomposition step (``#1`` replaced by the previous hop's answer); the
  results list the supporting paragraph among distractor paragraphs of the same item; the agent visits the
  supporting page and states the hop's answer; the final answer is the gold answer.
- HotpotQA: search the question, visit the first supporting page, follow the bridge to the second one; the
  reasoning quotes the gold supporting sentences.
Tool use (tool ``calculator(expression)``):
- GSM8K: every ``<<expr=result>>`` annotation becomes a calculator call answered by :mod:`forge.data.calc`.

Every function here is pure given its inputs and a ``random.Random``; :mod:`forge.data.pools` drives them.
Graph-walk questions over FB15k-237 and the agents that answer them with ``search``/``visit``/``python`` are
deep-search synthesis (forge/search/walks.py, forge/search/agents.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from forge.data.calc import CalcError, evaluate, format_number, parse_number
from forge.data.corpora import CALC_RE
from forge.data.schemas import Message, ToolCall, ToolFunction, ToolSpec

SNIPPET_CHARS = 160
PAGE_CHARS = 700


def _tool(name: str, description: str, properties: dict, required: list[str]) -> ToolSpec:
    return ToolSpec(function=ToolFunction(
        name=name, description=description,
        parameters={"type": "object", "properties": properties, "required": required},
    ))


SEARCH_TOOL = _tool(
    "search", "Search the offline Wikipedia index; returns the top-k page titles with snippets.",
    {"query": {"type": "string", "description": "Search query."},
     "k": {"type": "integer", "description": "Number of results.", "default": 4}},
    ["query"],
)
VISIT_TOOL = _tool(
    "visit", "Open a page by its exact title and return its text.",
    {"page": {"type": "string", "description": "Page title as returned by search."}}, ["page"],
)
CALCULATOR_TOOL = _tool(
    "calculator", "Evaluate an arithmetic expression (+ - * / // % ** and parentheses).",
    {"expression": {"type": "string", "description": "e.g. '48/2'"}}, ["expression"],
)
DEEP_SEARCH_TOOLS = [SEARCH_TOOL, VISIT_TOOL]
TOOL_USE_TOOLS = [CALCULATOR_TOOL]


def snippet(text: str, n: int = SNIPPET_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n].rsplit(" ", 1)[0] + " …"


def render_results(results: list[tuple[str, str]]) -> str:
    return "\n".join(f"[{i}] {title}: {snippet(text)}" for i, (title, text) in enumerate(results, start=1))


def _call(name: str, **arguments) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


def _assistant(reasoning: str, call: ToolCall | None = None, content: str = "") -> Message:
    return Message(role="assistant", reasoning=reasoning or None, content=content,
                   tool_calls=[call] if call else [])


def _tool_msg(name: str, content: str) -> Message:
    return Message(role="tool", name=name, content=content)


def _results_with(target: tuple[str, str], pool: list[tuple[str, str]], rng: random.Random, k: int):
    distractors = [p for p in pool if p[0] != target[0]]
    picked = rng.sample(distractors, min(k - 1, len(distractors))) + [target]
    rng.shuffle(picked)
    return picked


# --- MuSiQue / HotpotQA ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hop:
    intent: str  # why the agent searches now
    query: str
    title: str  # the supporting page
    text: str
    finding: str  # what the page established


def hop_trajectory(question: str, hops: list[Hop], pool: list[tuple[str, str]], answer: str,
                   rng: random.Random, k: int = 4) -> list[Message]:
    """search → visit per hop; each finding opens the next turn's reasoning, so every turn has content."""
    msgs = [Message(role="user", content=question)]
    carried = ""
    for hop in hops:
        reasoning = f"{carried} {hop.intent}".strip()
        msgs.append(_assistant(reasoning, _call("search", query=hop.query, k=k)))
        msgs.append(_tool_msg("search", render_results(_results_with((hop.title, hop.text), pool, rng, k))))
        msgs.append(_assistant(f"\"{hop.title}\" looks relevant; I will open it.", _call("visit", page=hop.title)))
        msgs.append(_tool_msg("visit", f"{hop.title}\n{hop.text[:PAGE_CHARS]}"))
        carried = hop.finding
    msgs.append(_assistant(f"{carried} So the answer is {answer}.", content=answer))
    return msgs


def musique_trajectory(item: dict, rng: random.Random, k: int = 4) -> list[Message] | None:
    """Messages for one MuSiQue item, or None when a decomposition step names no supporting paragraph."""
    paras = {p["idx"]: (p["title"], p["paragraph_text"]) for p in item["paragraphs"]}
    hops, answers = [], []
    for step_no, step in enumerate(item["question_decomposition"], start=1):
        if step.get("paragraph_support_idx") not in paras:
            return None
        subq = step["question"]
        for j, prev in enumerate(answers, start=1):
            subq = subq.replace(f"#{j}", prev)
        title, text = paras[step["paragraph_support_idx"]]
        lead = "First I need to find out" if step_no == 1 else "Next I need to find out"
        finding = f"According to \"{title}\", the answer to \"{subq}\" is {step['answer']}."
        hops.append(Hop(f"{lead}: {subq}", subq, title, text, finding))
        answers.append(step["answer"])
    return hop_trajectory(item["question"], hops, list(paras.values()), item["answer"], rng, k)


def hotpot_trajectory(item: dict, rng: random.Random, k: int = 4) -> list[Message] | None:
    """Messages for one HotpotQA item: one hop per supporting page, in the order of its supporting facts."""
    context = {title: sents for title, sents in item["context"]}
    order: list[str] = []
    for title, _ in item["supporting_facts"]:
        if title not in order:
            order.append(title)
    if not order or any(t not in context for t in order):
        return None
    hops = []
    for n, title in enumerate(order):
        sents = context[title]
        evidence = " ".join(sents[i].strip() for t, i in item["supporting_facts"] if t == title and i < len(sents))
        if n == 0:
            intent, query = "I will search for the main subject of the question.", item["question"]
        else:
            intent, query = f"I also need the page about {title}.", title
        hops.append(Hop(intent, query, title, "".join(sents).strip(), f"\"{title}\" says: {evidence}"))
    pool = [(t, "".join(s).strip()) for t, s in item["context"]]
    return hop_trajectory(item["question"], hops, pool, item["answer"], rng, k)


# --- GSM8K calculator episodes ----------------------------------------------------------------------------


def calculator_trajectory(question: str, solution: str, final: str) -> list[Message] | None:
    """Split the worked solution at each ``<<expr=result>>``: the text before it is the turn's reasoning,
    the expression the call, the evaluated value the tool's answer. None if any value disagrees with the
    annotated result (the annotation would then teach a wrong tool response)."""
    msgs = [Message(role="user", content=question)]
    pos = 0
    for m in CALC_RE.finditer(solution):
        expr, annotated = m.group(1), m.group(2)
        try:
            value = evaluate(expr)
        except CalcError:
            return None
        expected = parse_number(annotated)
        if expected is None or abs(value - expected) > 1e-6 * max(1.0, abs(expected)) + 0.01:
            return None
        msgs.append(_assistant(solution[pos : m.start()].strip(), _call("calculator", expression=expr.strip())))
        msgs.append(_tool_msg("calculator", format_number(value)))
        pos = m.end()
    if len(msgs) == 1:
        return None
    msgs.append(_assistant(f"{solution[pos:].strip()}\nThe final answer is {final}.".strip(), content=final))
    return msgs
