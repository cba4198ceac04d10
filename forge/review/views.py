"""What the review dashboard reads: the queue, one trajectory turn by turn, progress counters, overlap assignment.

Plain frozen dataclasses, built inside a session and safe to use after it closes (Streamlit keeps them in
``st.session_state``); the dashboard never touches ORM rows.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from forge.data.schemas import SearchTrajectory
from forge.review.models import (
    Assignment,
    AuditEvent,
    Reviewer,
    TrajectoryRecord,
    TrajectoryVerdict,
    TurnRecord,
    Verdict,
)
from forge.review.repository import DIMENSIONS, audit, get_reviewer

STATUSES = ("pending", "reviewed", "all")
# The review plan (queue(plan=True)): every trajectory the critic failed or reviewers disagree on, then a random
# sample of the rest large enough to estimate, within MARGIN at CONFIDENCE, the share of critic-passed trajectories
# a person would reject (docs/architecture.md, "The review plan").
MARGIN, CONFIDENCE = 0.05, 0.95


@dataclass(frozen=True)
class QueueItem:
    trajectory_id: str
    question: str
    agent: str
    domain: str
    correct: bool
    turns: int
    critic_failed_turns: int
    my_judged_turns: int
    human_judged_turns: int
    disagreements: int  # turns where a human verdict differs from the critic's or from another human's
    status: str  # "pending" until the reviewer judged every turn, then "reviewed"
    why: str = ""  # why the plan holds it: "critic failed", "disagreement" or "sample"


@dataclass(frozen=True)
class ToolCallView:
    name: str
    arguments: dict


@dataclass(frozen=True)
class TurnVerdictView:
    passed: bool
    dimensions: dict[str, bool]
    note: str
    version: int


@dataclass(frozen=True)
class TrajectoryVerdictView:
    accepted: bool
    note: str
    version: int


@dataclass(frozen=True)
class TurnView:
    turn_id: int
    message_index: int
    reasoning: str
    content: str
    tool_calls: list[ToolCallView]
    observation: str | None
    critic: dict[str, bool]  # logical, tool_call, info_gain, passed
    critic_reasons: list[str]
    critic_judge: str
    my_verdict: TurnVerdictView | None
    other_verdicts: int = 0  # how many other reviewers judged this turn


@dataclass(frozen=True)
class TrajectoryView:
    id: str
    question: str
    agent: str
    domain: str
    gold_answer: str
    gold_path: list[str]
    final_answer: str | None
    correct: bool
    turns: list[TurnView]
    my_verdict: TrajectoryVerdictView | None
    gold_relations: list[str] = field(default_factory=list)
    qa_id: str = ""
    stored: str = ""  # when and by whom it entered the store (the synthesis task, or an import)


@dataclass(frozen=True)
class Progress:
    turns_total: int
    turns_judged_by_me: int
    trajectories_total: int
    trajectories_done_by_me: int
    verdicts_total: int


def _critic(turn: TurnRecord) -> dict[str, bool]:
    return {"logical": turn.critic_logical, "tool_call": turn.critic_tool_call, "info_gain": turn.critic_info_gain,
            "passed": turn.critic_passed}


def sample_size(population: int, margin: float = MARGIN, confidence: float = CONFIDENCE) -> int:
    """How many of ``population`` items to judge at random to estimate a proportion within ``margin`` at
    ``confidence`` (worst case p = 0.5, with the finite-population correction)."""
    if population <= 0:
        return 0
    z = _normal_quantile(0.5 + confidence / 2)
    n0 = z * z * 0.25 / (margin * margin)
    return min(population, math.ceil(n0 / (1 + (n0 - 1) / population)))


def _normal_quantile(p: float) -> float:
    """The standard normal quantile, by bisection on erf (precise to 1e-9; no scipy in the review room)."""
    lo, hi = -10.0, 10.0
    while hi - lo > 1e-9:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p else (lo, mid)
    return (lo + hi) / 2


def _sample_order(trajectory_id: str) -> str:
    """A fixed random order (the same for every reviewer and filter): the sample is the first n of it."""
    return hashlib.sha256(trajectory_id.encode()).hexdigest()


def queue(session: Session, reviewer: str, *, domain: str | None = None, critic: str | None = None,
          disagreement: bool = False, assigned_to_me: bool = False, status: str = "pending", plan: bool = False,
          limit: int = 100) -> list[QueueItem]:
    """Trajectories for ``reviewer`` to judge, filtered; those the critic failed come first (they decide what is
    trained on), then those where reviewers disagree, then the rest in a fixed random order.

    Args:
        critic: ``"failed"`` keeps trajectories with a turn the critic failed, ``"passed"`` those with none.
        disagreement: only trajectories where a human verdict differs from the critic's or from another human's.
        status: ``pending`` (turns left for me), ``reviewed`` (I judged every turn) or ``all``.
        plan: keep, of the trajectories neither failed nor disputed, only the random sample :func:`sample_size`
            asks for (taken before the status filter, so judging one does not pull in another).
    """
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}; one of {', '.join(STATUSES)}")
    if critic not in (None, "passed", "failed"):
        raise ValueError(f"critic filter must be 'passed' or 'failed', not {critic!r}")
    me = get_reviewer(session, reviewer)
    query = select(TrajectoryRecord.id, TrajectoryRecord.question, TrajectoryRecord.agent, TrajectoryRecord.domain,
                   TrajectoryRecord.correct)
    if domain:
        query = query.where(TrajectoryRecord.domain == domain)
    if assigned_to_me:
        query = query.where(TrajectoryRecord.id.in_(
            select(Assignment.trajectory_id).where(Assignment.reviewer_id == me.id)))
    trajectories = session.execute(query).all()
    turns = defaultdict(list)
    for tid, turn_id, critic_passed in session.execute(
            select(TurnRecord.trajectory_id, TurnRecord.id, TurnRecord.critic_passed)):
        turns[tid].append((turn_id, critic_passed))
    verdicts = defaultdict(list)
    for turn_id, reviewer_id, passed in session.execute(select(Verdict.turn_id, Verdict.reviewer_id, Verdict.passed)):
        verdicts[turn_id].append((reviewer_id, passed))
    items = []
    for tid, question, agent, dom, correct in trajectories:
        ts = turns[tid]
        failed = sum(1 for _, ok in ts if not ok)
        mine = sum(1 for turn_id, _ in ts if any(r == me.id for r, _ in verdicts[turn_id]))
        judged = sum(1 for turn_id, _ in ts if verdicts[turn_id])
        split = sum(1 for turn_id, ok in ts if {p for _, p in verdicts[turn_id]} - {ok})
        why = "critic failed" if failed else "disagreement" if split else "sample"
        item = QueueItem(trajectory_id=tid, question=question, agent=agent, domain=dom, correct=correct,
                         turns=len(ts), critic_failed_turns=failed, my_judged_turns=mine, human_judged_turns=judged,
                         disagreements=split, status="reviewed" if ts and mine == len(ts) else "pending", why=why)
        if (critic == "failed" and not failed) or (critic == "passed" and failed) or (disagreement and not split):
            continue
        items.append(item)
    items.sort(key=lambda i: (i.critic_failed_turns == 0, i.disagreements == 0, _sample_order(i.trajectory_id)))
    if plan:
        rest = [i for i in items if i.why == "sample"]
        items = [i for i in items if i.why != "sample"] + rest[:sample_size(len(rest))]
    items = [i for i in items if status == "all" or i.status == status]
    return items[:limit]


def trajectory_view(session: Session, trajectory_id: str, reviewer: str) -> TrajectoryView:
    """One trajectory as a reviewer sees it: each assistant turn with its tool calls, the tool's answer, the critic's
    labels and this reviewer's verdict (with the version the page must send back)."""
    record = session.get(TrajectoryRecord, trajectory_id)
    if record is None:
        raise KeyError(f"no trajectory {trajectory_id}")
    me = get_reviewer(session, reviewer)
    traj = SearchTrajectory.model_validate(record.payload)
    turns = []
    for turn in record.turns:
        m = traj.messages[turn.message_index]
        mine = next((v for v in turn.verdicts if v.reviewer_id == me.id), None)
        turns.append(TurnView(
            turn_id=turn.id, message_index=turn.message_index, reasoning=m.reasoning or "", content=m.content,
            tool_calls=[ToolCallView(c.name, dict(c.arguments)) for c in m.tool_calls], observation=turn.observation,
            critic=_critic(turn), critic_reasons=list(turn.critic_reasons), critic_judge=turn.critic_judge,
            my_verdict=None if mine is None else TurnVerdictView(
                passed=mine.passed, dimensions={d: mine.dimension(d) for d in DIMENSIONS}, note=mine.note,
                version=mine.version),
            other_verdicts=sum(1 for v in turn.verdicts if v.reviewer_id != me.id)))
    tv = session.scalar(select(TrajectoryVerdict).where(TrajectoryVerdict.trajectory_id == trajectory_id,
                                                        TrajectoryVerdict.reviewer_id == me.id))
    gold = record.gold or {}
    created = session.scalar(select(AuditEvent).where(AuditEvent.action == "create", AuditEvent.entity == "trajectory",
                                                      AuditEvent.entity_id == trajectory_id))
    stored = f"{record.created_at:%Y-%m-%d %H:%M} UTC by {created.actor if created else 'an import'}"
    return TrajectoryView(
        id=record.id, question=record.question, agent=record.agent, domain=record.domain,
        gold_answer=record.gold_answer, gold_path=list(gold.get("path", [])),
        gold_relations=list(gold.get("relations", [])), final_answer=record.final_answer, correct=record.correct,
        turns=turns, my_verdict=None if tv is None else TrajectoryVerdictView(tv.accepted, tv.note, tv.version),
        qa_id=record.qa_id, stored=stored)


def progress(session: Session, reviewer: str) -> Progress:
    me = get_reviewer(session, reviewer)
    items = queue(session, reviewer, status="all", limit=10**9)
    return Progress(turns_total=sum(i.turns for i in items), turns_judged_by_me=sum(i.my_judged_turns for i in items),
                    trajectories_total=len(items), trajectories_done_by_me=sum(i.status == "reviewed" for i in items),
                    verdicts_total=session.query(Verdict).filter(Verdict.reviewer_id == me.id).count())


def assign_overlap(session: Session, reviewers: list[str], *, overlap: float = 0.2, seed: int = 0,
                   actor: str = "admin") -> int:
    """Spread the trajectories nobody is assigned yet over ``reviewers``, round robin; a share ``overlap`` of
    them goes to a second reviewer too, so human-vs-human agreement has items to be measured on. Returns how many
    assignments were made."""
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap must be within [0, 1], not {overlap}")
    names = sorted(set(reviewers))
    if not names:
        raise ValueError("assign_overlap needs at least one reviewer")
    people = [get_reviewer(session, n) for n in names]
    taken = set(session.scalars(select(Assignment.trajectory_id)))
    todo = sorted(t for t in session.scalars(select(TrajectoryRecord.id)) if t not in taken)
    rng = random.Random(f"{seed}:overlap")
    rng.shuffle(todo)
    doubled = set(todo[: round(overlap * len(todo))]) if len(people) > 1 else set()
    made = 0
    for i, tid in enumerate(todo):
        first = people[i % len(people)]
        chosen = [first] + ([people[(i + 1) % len(people)]] if tid in doubled else [])
        for person in chosen:
            session.add(Assignment(trajectory_id=tid, reviewer_id=person.id))
            made += 1
    session.flush()
    audit(session, actor, "assign", "trajectories", str(len(todo)), reviewers=names, overlap=overlap, made=made)
    return made


def reviewer_names(session: Session) -> list[Reviewer]:
    """Everyone who can log in (for the admin's assignment control)."""
    return list(session.scalars(select(Reviewer).where(Reviewer.active).order_by(Reviewer.name)))
