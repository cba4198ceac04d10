"""Lookup questions: the agentic RL task family a small policy can learn (1–2 hops, one visit per hop).

The synthesis questions of §2.2.1 (forge/search/walks.py: 2–5 hops, obfuscated heads, conditions on the tails)
take a scripted planner a dozen calls; a 4-layer policy never finishes one, so RL on them has no reward to follow.
A lookup is a walk of 1–2 hops from a *named* head whose every hop has exactly one tail (no condition to check):
``What is the county of the place of birth of Hans Zimmer?`` is answered by visiting "Hans Zimmer" with the goal
``place of birth``, then its birthplace with the goal ``county``, and answering — two tool calls.

Held out from SFT: :func:`sft_seen` collects what the SFT mix's rows ask and visit; :func:`build_lookup_qas` skips
every head whose page an SFT row opened and every question an SFT row asks, so RL trains on questions the policy
was never shown solved (tests/search/test_agentic_env.py checks it on a synthesized mix).

    seen = sft_seen(train_rows + heldout_rows)
    qas = build_lookup_qas(tools.graph, 400, min_hops=1, max_hops=2, seen=seen, seed=0)
    traj = LookupAgent().run(qas[0], tools)        # the scripted solution (SFT data for a bench policy)
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import zip_longest

from forge.config import AgenticRLConfig
from forge.data.schemas import ChatSample, SearchQA, SearchTrajectory
from forge.search.agents import Episode, fact_tails
from forge.search.critic import normalize_answer
from forge.search.graph import SearchGraph
from forge.search.heads import categorical_relations
from forge.search.tools import FOLLOW_SPEC, SearchTools
from forge.search.walks import Hop, Walk, WalkParams, answer_set, sample_walk, walk_to_qa

SOURCE = "kg_fb15k237:lookups"
WALK_TRIES = 4  # walks tried per head and hop count before the head is passed over
EVAL_HEAD_EVERY = 10  # one head in ten (by a stable hash of its id) is kept for the deep-search eval suite


def is_eval_head(mid: str) -> bool:
    """Whether lookups from head ``mid`` belong to the deep-search eval suite (forge/evals/suites.py) and so are
    never trained on: a stable hash, the same on every machine and in every profile."""
    return int(hashlib.sha256(mid.encode()).hexdigest()[:8], 16) % EVAL_HEAD_EVERY == 0


@dataclass(frozen=True)
class SftSeen:
    """What the SFT rows showed the policy: the pages their tool calls opened and the questions they ask."""

    pages: frozenset[str] = field(default_factory=frozenset)
    questions: frozenset[str] = field(default_factory=frozenset)


def sft_seen(rows: list[ChatSample]) -> SftSeen:
    """Pages visited (``visit`` calls) and first user questions of every row with tool calls."""
    pages, questions = set(), set()
    for row in rows:
        calls = [c for m in row.messages for c in m.tool_calls]
        if not calls:
            continue
        pages |= {c.arguments["page"].casefold() for c in calls
                  if c.name == "visit" and isinstance(c.arguments.get("page"), str)}
        questions |= {m.content.strip() for m in row.messages[:2] if m.role == "user"}
    return SftSeen(frozenset(pages), frozenset(questions))


def build_lookup_qas(g: SearchGraph, n: int, *, min_hops: int = 1, max_hops: int = 2, seen: SftSeen = SftSeen(),
                     seed: int = 0, max_hub_degree: int = 200, split: str = "train",
                     relations: AbstractSet[str] | None = None, exclude_heads: AbstractSet[str] = frozenset()
                     ) -> list[SearchQA]:
    """Up to ``n`` lookup QAs, heads taken in a seeded order, hop counts cycling from ``min_hops`` to ``max_hops``;
    ``split="train"`` draws from heads :func:`is_eval_head` leaves to training, ``"eval"`` from the others.
    ``relations``: the only relations a hop may take (all but the categorical ones when None); ``exclude_heads``:
    heads (graph ids) never used.

    A QA is kept when every hop has a single tail (no condition), the graph gives exactly its answer
    (:func:`forge.search.walks.answer_set`), the answer is not the head, and neither its head's page nor its
    question is in ``seen``."""
    categorical = categorical_relations(g)
    if relations is not None:
        categorical = categorical | (g.labels.keys() - relations)  # what sample_walk skips
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    heads = [m for m in g.entities if m not in exclude_heads
             and g.title(m).casefold() not in seen.pages and is_eval_head(m) == (split == "eval")]
    random.Random(f"{seed}:lookups").shuffle(heads)
    out: list[SearchQA] = []
    ids: set[str] = set()
    span = max_hops - min_hops + 1
    for i, head in enumerate(heads):
        if len(out) >= n:
            break
        hops = min_hops + i % span
        for attempt in range(WALK_TRIES):
            rng = random.Random(f"{seed}:{head}:{hops}:{attempt}")
            walk = sample_walk(g, head, rng, WalkParams(hops=hops, max_hub_degree=max_hub_degree,
                                                        obfuscate_head_prob=0.0, seed=seed), categorical)
            if walk is None or any(h.condition is not None for h in walk.hops):
                continue
            qa = walk_to_qa(g, walk).model_copy(update={"source": SOURCE})
            if (qa.id in ids or qa.question in seen.questions or answer_set(g, qa.walk) != {walk.answer}
                    or normalize_answer(qa.answer) == normalize_answer(g.title(head))):
                continue
            ids.add(qa.id)
            out.append(qa)
            break
    return out


class LookupAgent:
    """The scripted solution of a lookup: visit the head with the hop's relation as the goal, then the tail it
    names, and so on; answer with the last tail. One call per hop, no search (the head is named)."""

    name = "lookup"

    def run(self, qa: SearchQA, tools: SearchTools) -> SearchTrajectory:
        ep = Episode(tools, qa.question)
        current = tools.graph.title(qa.walk["head"])
        for hop in qa.walk["hops"]:
            label = hop["label"]
            page = ep.act(f"I need the {label} of \"{current}\".", "visit", {"page": current, "goal": label})
            tails = fact_tails(page, current, label)
            if not tails:
                ep.answer(f"The page of \"{current}\" does not give its {label}.", "unknown")
                return ep.finish(qa, self.name, "unknown")
            current = tails[0]
        ep.answer(f"The {qa.walk['hops'][-1]['label']} is \"{current}\".", current)
        return ep.finish(qa, self.name, current)


# --- links: lookups answered by following the pages' links --------------------------------------------------------

LINKS_SOURCE = "kg_fb15k237:links"
LINK_SAMPLE = 2000  # lookups drawn (seed 0, training heads) to rank the relations they take


def link_relations(g: SearchGraph, k: int) -> frozenset[str]:
    """The ``k`` relations lookups take most often (in a fixed sample of them): the links a small policy learns to
    tell apart within the tiny profile's budget."""
    def build() -> list[str]:
        sample = build_lookup_qas(g, LINK_SAMPLE, min_hops=1, max_hops=2, seed=0)
        counts = Counter(h["relation"] for qa in sample for h in qa.walk["hops"])
        return [r for r, _ in sorted(counts.items(), key=lambda rc: (-rc[1], rc[0]))]

    return frozenset(g.cached("link_relations", build)[:k])


def link_question(g: SearchGraph, qa: SearchQA) -> str:
    """The lookup asked from its head's page: ``You are on the page of Hans Zimmer. What is the county of its place
    of birth?`` (the first hop's relation last, where the question ends)."""
    hops = [h["label"] for h in qa.walk["hops"]]
    asked = f"its {hops[0]}"
    for label in hops[1:]:
        asked = f"the {label} of {asked}"
    return f"You are on the page of {g.title(qa.walk['head'])}. What is {asked}?"


def build_link_qas(g: SearchGraph, n: int, *, relations: int, min_hops: int = 1, max_hops: int = 2,
                   seen: SftSeen = SftSeen(), seed: int = 0, exclude_heads: AbstractSet[str] = frozenset()
                   ) -> list[SearchQA]:
    """Up to ``n`` link questions: lookups (:func:`build_lookup_qas`, training heads) over the ``relations`` most
    common relations (:func:`link_relations`), asked from the head's page. Each is answered by following one link
    per hop from there (``follow``) and citing the page reached (``[k]``, forge/search/critic.py): no name to
    copy, which a tiny policy cannot learn to do in its budget (README, "Agentic RL"). The episode starts on the
    head's page (forge/search/rollout.py, task ``links``)."""
    qas = build_lookup_qas(g, n, min_hops=min_hops, max_hops=max_hops, seen=seen, seed=seed,
                           relations=link_relations(g, relations), exclude_heads=exclude_heads)
    return [SearchQA.build(**{**qa.model_dump(exclude={"id"}), "source": LINKS_SOURCE,
                              "question": link_question(g, qa)}) for qa in qas]


class LinkAgent:
    """The scripted solution of a link question: from the head's page, follow each hop's link, then cite the page
    reached. SFT data for the tiny profile's agentic warm-up (tasks/agentic.py)."""

    name = "links"

    def run(self, qa: SearchQA, tools: SearchTools) -> SearchTrajectory:
        ep = Episode(tools, qa.question, start_page=tools.graph.title(qa.walk["head"]), specs=[FOLLOW_SPEC])
        for hop in qa.walk["hops"]:
            ep.act(f"I follow {hop['label']}.", "follow", {"link": hop["label"]})
        ep.answer("I am on the page that answers it.", f"[{len(qa.walk['hops'])}]")
        return ep.finish(qa, self.name, ep.messages[-1].content)


def _task_qas(g: SearchGraph, cfg: AgenticRLConfig, n: int, seed: int, *, seen: SftSeen = SftSeen(),
              exclude_heads: AbstractSet[str] = frozenset()) -> list[SearchQA]:
    """``n`` questions of ``cfg.task`` (lookups or link questions) at ``cfg``'s hop counts."""
    if cfg.task == "links":
        return build_link_qas(g, n, relations=cfg.link_relations, min_hops=cfg.min_hops, max_hops=cfg.max_hops,
                              seen=seen, seed=seed, exclude_heads=exclude_heads)
    return build_lookup_qas(g, n, min_hops=cfg.min_hops, max_hops=cfg.max_hops, seen=seen, seed=seed,
                            exclude_heads=exclude_heads)


def task_questions(g: SearchGraph, cfg: AgenticRLConfig, seen: SftSeen, seed: int) -> list[SearchQA]:
    """Agentic RL's questions for ``cfg.task``: lookups or link questions whose heads no SFT row opened."""
    return _task_qas(g, cfg, cfg.questions, seed, seen=seen)


def relation_sequence(qa: SearchQA) -> tuple[str, ...]:
    """The relations a question's walk follows, hop by hop: what balancing and turn-taking group questions by."""
    return tuple(h["relation"] for h in qa.walk["hops"])


def relation_turns(qas: list[SearchQA]) -> list[SearchQA]:
    """``qas`` with their relation sequences taking turns: the first question of every sequence, then the second of
    every sequence that has one, and so on (each sequence's questions in their order in ``qas``, the sequences in
    the order they first appear there)."""
    groups: dict[tuple[str, ...], list[SearchQA]] = {}
    for qa in qas:
        groups.setdefault(relation_sequence(qa), []).append(qa)
    return [qa for turn in zip_longest(*groups.values()) for qa in turn if qa is not None]


def balanced_by_relations(qas: list[SearchQA], n: int, seed: int) -> list[SearchQA]:
    """Up to ``n`` of ``qas``, one of each relation sequence in turn (:func:`relation_turns`) until a sequence runs
    out, then among the rest; shuffled (seeded), so every slice of the result mixes them too."""
    out = relation_turns(qas)[:n]
    random.Random(seed).shuffle(out)
    return out


BALANCE_POOL = 4  # a balanced warm-up draws from this many times its questions, so the rare relations have enough


def contrast_link_qas(g: SearchGraph, n: int, *, relations: int, seed: int = 0, max_hub_degree: int = 200,
                      exclude_heads: AbstractSet[str] = frozenset()) -> list[SearchQA]:
    """Up to ``n`` 1-hop link questions asked in sets: every training head (seeded order, none of
    ``exclude_heads``) is asked about each link its page has of the ``relations`` most common relations, so within
    a set the head is the same and only the question's words tell which link to follow. The natural draw asks each
    head once, and there the kind of head alone nearly decides the link (a person: ``place of birth``), which a
    small policy learns instead of the question (docs/architecture.md)."""
    wanted = link_relations(g, relations)
    categorical = categorical_relations(g)
    heads = [m for m in g.entities if m not in exclude_heads and not is_eval_head(m)]
    random.Random(f"{seed}:contrast").shuffle(heads)
    params = WalkParams(hops=1, max_hub_degree=max_hub_degree, obfuscate_head_prob=0.0, seed=seed)
    out: list[SearchQA] = []
    for head in heads:
        if len(out) >= n:
            break
        asked = []
        for r in sorted({r for r, _ in g.out_edges(head)} & wanted - categorical):
            tails = set(g.tails(head, r))
            tail = next(iter(tails))
            if len(tails) != 1 or tail == head or g.degree(tail) > max_hub_degree:
                continue
            qa = walk_to_qa(g, Walk(head, None, (Hop(r, g.label(r), tail),), params))
            if answer_set(g, qa.walk) == {tail} and normalize_answer(qa.answer) != normalize_answer(g.title(head)):
                asked.append(qa)
        out += [SearchQA.build(**{**qa.model_dump(exclude={"id"}), "source": LINKS_SOURCE,
                                  "question": link_question(g, qa)}) for qa in asked[: n - len(out)]]
    return out


def warmup_questions(g: SearchGraph, cfg: AgenticRLConfig, rl_qas: list[SearchQA], seed: int) -> list[SearchQA]:
    """The warm-up's link questions (a warm-up needs task ``links``: forge/config.py): other heads than every RL
    question's (and than the eval suite's), so RL trains on questions the warm-up never showed solved; with
    ``cfg.warmup_mix`` 'balanced', as many of each relation as the graph gives (:func:`balanced_by_relations`)."""
    heads = {qa.walk["head"] for qa in rl_qas}
    if cfg.warmup_mix == "contrast":
        qas = contrast_link_qas(g, cfg.warmup_questions, relations=cfg.link_relations, seed=seed + 1,
                                exclude_heads=heads)
        random.Random(seed + 1).shuffle(qas)  # sets apart, so the warm-up's every-20th held-out slice mixes heads
        return qas
    if cfg.warmup_mix == "natural":
        return _task_qas(g, cfg, cfg.warmup_questions, seed + 1, exclude_heads=heads)
    pool = _task_qas(g, cfg, cfg.warmup_questions * BALANCE_POOL, seed + 1, exclude_heads=heads)
    return balanced_by_relations(pool, cfg.warmup_questions, seed + 1)


def check_questions(g: SearchGraph, cfg: AgenticRLConfig, rl_qas: list[SearchQA], seed: int) -> list[SearchQA]:
    """``cfg.check_questions`` questions of the task for the stage's held-out check: heads none of RL's and none of
    the warm-up's (nor the eval suite's)."""
    used = {qa.walk["head"] for qa in rl_qas}
    if cfg.warmup:
        used |= {qa.walk["head"] for qa in warmup_questions(g, cfg, rl_qas, seed)}
    return _task_qas(g, cfg, cfg.check_questions, seed + 2, exclude_heads=used)
