"""Tool-call conversations built from real corpus data: deep-search trajectories and tool-use episodes.

Deep search (tools ``search(query, k)`` and ``visit(page)``):
- MuSiQue: one search per question-decomposition step (``#1`` replaced by the previous hop's answer); the
  results list the supporting paragraph among distractor paragraphs of the same item; the agent visits the
  supporting page and states the hop's answer; the final answer is the gold answer.
- HotpotQA: search the question, visit the first supporting page, follow the bridge to the second one; the
  reasoning quotes the gold supporting sentences.
- FB15k-237: a 2–3 hop walk over functional edges (one tail for the head and relation) that avoids hub
  entities; pages are the entity's description and facts as sentences.
Tool use (tools ``calculator(expression)`` and ``kg_lookup(entity, relation)``):
- GSM8K: every ``<<expr=result>>`` annotation becomes a calculator call answered by :mod:`forge.data.calc`.
- FB15k-237: the same walks answered with one ``kg_lookup`` per hop.

Every function here is pure given its inputs and a ``random.Random``; :mod:`forge.data.pools` drives them.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from forge.data.calc import CalcError, evaluate, format_number, parse_number
from forge.data.corpora import CALC_RE, KnowledgeGraph, relation_label
from forge.data.schemas import Message, ToolCall, ToolFunction, ToolSpec

SNIPPET_CHARS = 160
PAGE_CHARS = 700
MAX_HUB_DEGREE = 200  # shared/data/README.md: hubs (USA, "Official Website", male, ...) make walks meaningless


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
KG_LOOKUP_TOOL = _tool(
    "kg_lookup", "Look up the values of one relation of an entity in the knowledge graph.",
    {"entity": {"type": "string", "description": "Entity name."},
     "relation": {"type": "string", "description": "Relation, e.g. 'place of birth'."}},
    ["entity", "relation"],
)
DEEP_SEARCH_TOOLS = [SEARCH_TOOL, VISIT_TOOL]
TOOL_USE_TOOLS = [CALCULATOR_TOOL, KG_LOOKUP_TOOL]


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


# --- FB15k-237 walks --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Walk:
    start: str
    steps: tuple[tuple[str, str], ...]  # (relation, tail mid) per hop

    def entities(self) -> list[str]:
        return [self.start, *(t for _, t in self.steps)]

    def question(self, kg: KnowledgeGraph) -> str:
        phrase = kg.name(self.start)
        for relation, _ in self.steps:
            phrase = f"the {relation_label(relation)} of {phrase}"
        return f"What is {phrase}?"

    @property
    def answer_mid(self) -> str:
        return self.steps[-1][1]


def eligible_starts(kg: KnowledgeGraph) -> list[str]:
    return sorted(m for m in kg.out_edges if kg.has_name(m) and m in kg.descriptions
                  and kg.degree.get(m, 0) <= MAX_HUB_DEGREE)


def sample_walk(kg: KnowledgeGraph, start: str, hops: int, rng: random.Random) -> Walk | None:
    """A walk of ``hops`` functional edges (the head has exactly one tail for that relation) from ``start``.

    Intermediate entities must be named, described and not hubs; no entity repeats. None when stuck.
    """
    seen = {start}
    node, steps = start, []
    for hop in range(hops):
        by_rel: dict[str, list[str]] = {}
        for r, t in kg.out_edges.get(node, []):
            by_rel.setdefault(r, []).append(t)
        last = hop == hops - 1
        options = [
            (r, ts[0]) for r, ts in sorted(by_rel.items())
            if len(ts) == 1 and ts[0] not in seen and kg.has_name(ts[0])
            and (last or (ts[0] in kg.descriptions and kg.degree.get(ts[0], 0) <= MAX_HUB_DEGREE))
        ]
        if not options:
            return None
        r, t = rng.choice(options)
        steps.append((r, t))
        seen.add(t)
        node = t
    return Walk(start, tuple(steps))


def kg_search_results(kg: KnowledgeGraph, mid: str, rng: random.Random, k: int = 4) -> list[tuple[str, str]]:
    """The entity's own entry among neighbours of it (the distractors a name search would also surface)."""
    neighbours = sorted({t for _, t in kg.out_edges.get(mid, []) if t in kg.descriptions and kg.has_name(t)})
    picked = rng.sample(neighbours, min(k - 1, len(neighbours))) + [mid]
    rng.shuffle(picked)
    return [(kg.name(m), kg.descriptions.get(m, "")) for m in picked]


def kg_page(kg: KnowledgeGraph, mid: str, needed: tuple[str, str] | None, rng: random.Random, limit: int = 10) -> str:
    """A page: description, years and up to ``limit`` fact sentences, the needed fact at a random place."""
    lines = kg.facts(mid)
    head, facts = lines[: 1 + len(kg.years.get(mid, []))], lines[1 + len(kg.years.get(mid, [])):]
    needed_line = kg.fact_sentence(mid, *needed) if needed else None
    others = [f for f in facts if f != needed_line]
    chosen = rng.sample(others, min(limit, len(others)))
    if needed_line:
        chosen.insert(rng.randrange(len(chosen) + 1), needed_line)
    return f"{kg.name(mid)}\n" + " ".join(head + chosen)


def kg_search_trajectory(kg: KnowledgeGraph, walk: Walk, rng: random.Random, k: int = 4) -> list[Message]:
    """search the start entity, then visit each entity on the walk and read the next fact off its page."""
    msgs = [Message(role="user", content=walk.question(kg))]
    start = kg.name(walk.start)
    msgs.append(_assistant(f"The question starts from {start}; I will search for it.",
                           _call("search", query=start, k=k)))
    msgs.append(_tool_msg("search", render_results(kg_search_results(kg, walk.start, rng, k))))
    node, carried = walk.start, ""
    for relation, tail in walk.steps:
        intent = f"I need the {relation_label(relation)} of {kg.name(node)}; its page should list it."
        msgs.append(_assistant(f"{carried} {intent}".strip(), _call("visit", page=kg.name(node))))
        msgs.append(_tool_msg("visit", kg_page(kg, node, (relation, tail), rng)))
        carried = f"The page says: {kg.fact_sentence(node, relation, tail)}"
        node = tail
    answer = kg.name(walk.answer_mid)
    msgs.append(_assistant(f"{carried} So the answer is {answer}.", content=answer))
    return msgs


def kg_lookup_trajectory(kg: KnowledgeGraph, walk: Walk) -> list[Message]:
    """One ``kg_lookup`` per hop; the response is the graph's values for that entity and relation."""
    msgs = [Message(role="user", content=walk.question(kg))]
    node, carried = walk.start, ""
    for relation, tail in walk.steps:
        label = relation_label(relation)
        intent = f"I need the {label} of {kg.name(node)}."
        msgs.append(_assistant(f"{carried} {intent}".strip(), _call("kg_lookup", entity=kg.name(node), relation=label)))
        values = [kg.name(t) for t in kg.tails(node, relation)]
        msgs.append(_tool_msg("kg_lookup", json.dumps({"entity": kg.name(node), "relation": label, "values": values},
                                                      ensure_ascii=False)))
        carried = f"The {label} of {kg.name(node)} is {kg.name(tail)}."
        node = tail
    answer = kg.name(walk.answer_mid)
    msgs.append(_assistant(f"{carried} So the answer is {answer}.", content=answer))
    return msgs


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
