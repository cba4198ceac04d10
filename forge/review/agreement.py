"""How often people and the critic agree, and people with each other: raw agreement and Cohen's kappa.

    critic_agreement(s)   # {"logical": AgreementStat(n, agreement, kappa), ..., "passed": ...}
    human_agreement(s)    # kappa over every pair of reviewers who judged the same turn

Kappa corrects raw agreement for what two raters with the same label rates would reach by chance:
κ = (p_o − p_e) / (1 − p_e). It is undefined (None) when chance agreement is already 1, i.e. both raters gave one
label only.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations

from sqlalchemy import select
from sqlalchemy.orm import Session

from forge.review.models import Reviewer, TurnRecord, Verdict
from forge.review.repository import DIMENSIONS


@dataclass(frozen=True)
class AgreementStat:
    n: int
    agreement: float
    kappa: float | None


def cohen_kappa(a: list[bool], b: list[bool]) -> AgreementStat:
    """Agreement of two raters over the same items (binary labels)."""
    if len(a) != len(b):
        raise ValueError(f"raters judged different numbers of items ({len(a)} vs {len(b)})")
    n = len(a)
    if n == 0:
        return AgreementStat(0, float("nan"), None)
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    pa, pb = sum(a) / n, sum(b) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    kappa = None if chance >= 1.0 else (observed - chance) / (1 - chance)
    return AgreementStat(n, observed, kappa)


def critic_agreement(session: Session) -> dict[str, AgreementStat]:
    """Every human verdict against the critic's label on the same turn, per dimension and overall (``passed``)."""
    rows = session.execute(select(Verdict, TurnRecord).join(TurnRecord, Verdict.turn_id == TurnRecord.id)).all()
    out = {}
    for dim in (*DIMENSIONS, "passed"):
        human = [v.passed if dim == "passed" else v.dimension(dim) for v, _ in rows]
        critic = [getattr(t, f"critic_{dim}") for _, t in rows]
        out[dim] = cohen_kappa(human, critic)
    return out


def _pairs(session: Session) -> dict[tuple[str, str], tuple[list[bool], list[bool]]]:
    by_turn: dict[int, dict[str, bool]] = defaultdict(dict)
    for turn_id, name, passed in session.execute(
            select(Verdict.turn_id, Reviewer.name, Verdict.passed).join(Reviewer, Verdict.reviewer_id == Reviewer.id)):
        by_turn[turn_id][name] = passed
    pairs: dict[tuple[str, str], tuple[list[bool], list[bool]]] = defaultdict(lambda: ([], []))
    for labels in by_turn.values():
        for x, y in combinations(sorted(labels), 2):
            pairs[(x, y)][0].append(labels[x])
            pairs[(x, y)][1].append(labels[y])
    return dict(pairs)


def human_pair_agreement(session: Session) -> dict[tuple[str, str], AgreementStat]:
    """Cohen's kappa of each pair of reviewers on the turns both judged."""
    return {pair: cohen_kappa(a, b) for pair, (a, b) in sorted(_pairs(session).items())}


def human_agreement(session: Session) -> AgreementStat:
    """Human-vs-human agreement pooled over every pair of reviewers on every turn judged by two or more."""
    a, b = [], []
    for xs, ys in _pairs(session).values():
        a += xs
        b += ys
    return cohen_kappa(a, b)
