"""Conditional random walks over the graph and the questions written from them (paper §2.2.1, Figure 2).

A walk starts at a head entity and takes 2–5 hops along outgoing facts:
- no entity twice, no hub (more than ``max_hub_degree`` neighbours: USA, English, male …), no categorical
  relation (gender, profession, genre: their tails are values, not things to find);
- relation diversity: a relation is used at most once per walk, and the next relation is drawn uniformly
  among the node's relations before a tail is drawn, so films with 40 cast members do not dominate;
- *conditional*: when a hop's relation has several tails, a condition on the wanted tail (its description,
  or a year range around one of its dates) is added until exactly one tail satisfies it; a hop that cannot
  be made unique is not taken.
The question names the head (or, obfuscated, describes it: description + year → range, accepted only when
that description picks out one entity) and states the chain with relation labels. :func:`answer_set` re-reads
the constraints against the graph without looking at the walk's path: a QA is kept only if it returns exactly
the answer.

    walk = sample_walk(g, head, hops=3, rng=random.Random(0), params=WalkParams())
    qa = walk_to_qa(g, walk)        # SearchQA with question, answer, gold path and the walk's parameters
"""

from __future__ import annotations

import random
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, field
from typing import Any

from forge.data.schemas import SearchQA
from forge.search.graph import SearchGraph
from forge.search.heads import categorical_relations

SOURCE = "kg_fb15k237:walks"
MAX_SHARED_DESCRIPTION = 5  # an obfuscated head's description may be shared by at most this many entities
DATE_PHRASES = {  # phrases for a year range, one per date attribute (keys as in forge.data.corpora.DATE_ATTRS)
    "people.person.date_of_birth": "born", "people.deceased_person.date_of_death": "died",
    "film.film.initial_release_date": "first released", "organization.organization.date_founded": "founded",
    "location.dated_location.date_founded": "founded", "sports.sports_team.founded": "founded",
}


@dataclass(frozen=True)
class WalkParams:
    hops: int = 3
    max_hub_degree: int = 200
    obfuscate_head_prob: float = 0.5
    max_tries_per_hop: int = 6
    seed: int = 0


@dataclass(frozen=True)
class Condition:
    """A constraint on an entity: its description equals ``description`` and/or a dated fact in [low, high]."""

    description: str | None = None
    date_attr: str | None = None
    low: int | None = None
    high: int | None = None

    def holds(self, g: SearchGraph, mid: str) -> bool:
        if self.description is not None and g.description(mid) != self.description:
            return False
        if self.date_attr is not None:
            year = g.year(mid, self.date_attr)
            if year is None or not self.low <= year <= self.high:
                return False
        return True

    def phrase(self) -> str:
        parts = []
        if self.description:
            parts.append(_with_article(self.description))
        if self.date_attr:
            parts.append(f"{DATE_PHRASES[self.date_attr]} between {self.low} and {self.high}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Hop:
    relation: str
    label: str
    tail: str
    condition: Condition | None = None


@dataclass(frozen=True)
class Walk:
    head: str
    head_condition: Condition | None  # None: the head is named in the question
    hops: tuple[Hop, ...]
    params: WalkParams = field(default_factory=WalkParams)

    @property
    def answer(self) -> str:
        return self.hops[-1].tail

    def entities(self) -> list[str]:
        return [self.head, *(h.tail for h in self.hops)]


def _with_article(description: str) -> str:
    first = description.split()[0].lower()
    if description[:1].isupper() or first in ("a", "an", "the", "one") or first.isdigit():
        return description
    return f"{'an' if first[0] in 'aeiou' else 'a'} {description}"


def _year_condition(g: SearchGraph, mid: str, rng: random.Random) -> Condition | None:
    dated = [(a, y) for a, y in g.years(mid) if a in DATE_PHRASES]
    if not dated:
        return None
    attr, year = rng.choice(dated)
    width = rng.randint(2, 8)
    low = year - rng.randint(0, width)
    return Condition(date_attr=attr, low=low, high=low + width)


def _conditions(g: SearchGraph, mid: str, rng: random.Random) -> list[Condition]:
    """Candidate conditions for ``mid``, weakest first: year range, description, both."""
    out = []
    year = _year_condition(g, mid, rng)
    desc = g.description(mid)
    if year:
        out.append(year)
    if desc:
        out.append(Condition(description=desc))
    if year and desc:
        out.append(Condition(description=desc, date_attr=year.date_attr, low=year.low, high=year.high))
    return out


def sample_walk(g: SearchGraph, head: str, rng: random.Random, params: WalkParams,
                categorical: AbstractSet[str] | None = None) -> Walk | None:
    """One conditional random walk of ``params.hops`` hops from ``head``, or None when it gets stuck."""
    categorical = categorical_relations(g) if categorical is None else categorical
    seen, used = {head}, set()
    node, hops = head, []
    for _ in range(params.hops):
        by_rel: dict[str, list[str]] = {}
        for r, t in g.out_edges(node):
            if r in categorical or r in used or t in seen or g.degree(t) > params.max_hub_degree:
                continue
            by_rel.setdefault(r, []).append(t)
        hop = None
        relations = sorted(by_rel)
        rng.shuffle(relations)
        for r in relations[: params.max_tries_per_hop]:
            tail = rng.choice(sorted(by_rel[r]))
            hop = _unique_hop(g, node, r, tail, rng)
            if hop is not None:
                break
        if hop is None:
            return None
        hops.append(hop)
        seen.add(hop.tail)
        used.add(hop.relation)
        node = hop.tail
    head_condition = None
    if rng.random() < params.obfuscate_head_prob:
        head_condition = _unique_head_condition(g, head, rng)
    return Walk(head=head, head_condition=head_condition, hops=tuple(hops), params=params)


def _unique_hop(g: SearchGraph, node: str, relation: str, tail: str, rng: random.Random) -> Hop | None:
    tails = set(g.tails(node, relation))
    label = g.label(relation)
    if tails == {tail}:
        return Hop(relation, label, tail)
    for cond in _conditions(g, tail, rng):
        if {t for t in tails if cond.holds(g, t)} == {tail}:
            return Hop(relation, label, tail, cond)
    return None


def _unique_head_condition(g: SearchGraph, head: str, rng: random.Random) -> Condition | None:
    """Description + year range that no other entity in the graph matches (None: name the head)."""
    desc = g.description(head)
    year = _year_condition(g, head, rng)
    if not desc or year is None:
        return None
    sharing = g.with_description(desc)
    if len(sharing) > MAX_SHARED_DESCRIPTION:  # "American actor": a searcher could never enumerate them
        return None
    cond = Condition(description=desc, date_attr=year.date_attr, low=year.low, high=year.high)
    same = [m for m in sharing if cond.holds(g, m)]
    return cond if same == [head] else None


def answer_set(g: SearchGraph, spec: dict[str, Any]) -> set[str]:
    """Every entity that satisfies a QA's constraints, read from the graph alone (not from its gold path).

    ``spec`` is ``SearchQA.walk``: the head (by name, or by condition), then per hop the relation label and
    optional condition. A well-formed question gives exactly one entity."""
    if spec.get("head_condition"):
        cond = Condition(**spec["head_condition"])
        current = {m for m in _candidates(g, cond) if cond.holds(g, m)}
    else:
        current = {spec["head"]}
    for hop in spec["hops"]:
        relation = g.relation_of_label[hop["label"]]
        cond = Condition(**hop["condition"]) if hop.get("condition") else None
        current = {t for m in current for t in g.tails(m, relation) if cond is None or cond.holds(g, t)}
    return current


def _candidates(g: SearchGraph, cond: Condition) -> list[str]:
    """Every entity of the graph that may satisfy ``cond``: those dated within its year range when it has one (the
    graph's per-date index, not the description index the walk chose the head with: an independent check), else
    those with its description, else all. A superset; the caller applies ``cond.holds``."""
    if cond.date_attr is not None:
        return g.dated_between(cond.date_attr, cond.low, cond.high)
    if cond.description is not None:
        return g.with_description(cond.description)
    return g.entities


def question_text(g: SearchGraph, walk: Walk) -> str:
    """Template question: the chain from the head, intermediate entities never named."""
    if walk.head_condition is None:
        phrase = g.title(walk.head)
    else:
        phrase = f"the entity that is {walk.head_condition.phrase()}"
    for hop in walk.hops:
        cond = f" ({hop.condition.phrase()})" if hop.condition else ""
        phrase = f"the {hop.label}{cond} of {phrase}"
    return f"What is {phrase}?"


def walk_spec(walk: Walk) -> dict[str, Any]:
    """The JSON kept with the QA: constraints (what the question says), gold tails and the walk parameters."""
    return {
        "head": walk.head,
        "head_condition": asdict(walk.head_condition) if walk.head_condition else None,
        "hops": [{"relation": h.relation, "label": h.label, "tail": h.tail,
                  "condition": asdict(h.condition) if h.condition else None} for h in walk.hops],
        "params": asdict(walk.params),
    }


def walk_to_qa(g: SearchGraph, walk: Walk, question: str | None = None) -> SearchQA:
    return SearchQA.build(
        source=SOURCE, parents=[f"fb15k237:{walk.head}"], question=question or question_text(g, walk),
        answer=g.title(walk.answer), gold_path=[g.title(m) for m in walk.entities()],
        answer_id=walk.answer, gold_relations=[h.label for h in walk.hops], walk=walk_spec(walk))


def rewrite_question(backend: Any, question: str) -> str | None:
    """LLM obfuscation (when a teacher endpoint is configured): a fluent rewrite that keeps every constraint.

    The rewrite is accepted only if every year of the template survives; otherwise the template stays."""
    prompt = [{"role": "user", "content": (
        "Rewrite this question as one fluent, natural question. Keep every constraint and every year exactly; "
        f"do not add facts or names.\n{question}")}]
    text = backend.generate([prompt], max_new_tokens=160, temperature=0.0)[0].strip()
    import re

    years = set(re.findall(r"\b\d{4}\b", question))
    return text if text and years <= set(re.findall(r"\b\d{4}\b", text)) else None


def synthesize_qas(g: SearchGraph, heads: list[str], n: int, *, min_hops: int, max_hops: int,
                   params: WalkParams, max_passes: int = 3) -> list[SearchQA]:
    """Up to ``n`` QAs, one walk per head in the given order (each head's walk seeded by the head itself, so a
    shard of heads gives the same QAs whichever process runs it). Non-unique answers are dropped."""
    categorical = categorical_relations(g)
    out: list[SearchQA] = []
    seen: set[str] = set()
    # Pass 0 walks once from every head; when heads are scarce (a narrow recency window), later passes walk
    # again from the same heads with another seed.
    for attempt, head in ((a, h) for a in range(max_passes) for h in heads):
        if len(out) >= n:
            break
        rng = random.Random(f"{params.seed}:{head}" + (f":{attempt}" if attempt else ""))
        hops = rng.randint(min_hops, max_hops)
        p = WalkParams(hops=hops, max_hub_degree=params.max_hub_degree,
                       obfuscate_head_prob=params.obfuscate_head_prob, seed=params.seed)
        walk = sample_walk(g, head, rng, p, categorical)
        if walk is None:
            continue
        qa = walk_to_qa(g, walk)
        if qa.id not in seen and answer_set(g, qa.walk) == {walk.answer}:
            seen.add(qa.id)
            out.append(qa)
    return out
