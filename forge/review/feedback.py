"""What reviewers' verdicts do to the training data: the store is filled with new trajectories, and the ones
handed back carry each turn's latest human verdict over the critic's, without the trajectories a reviewer rejected.

    kept, effect = apply_reviews(trajs, qas, url=cfg.review_db_url)       # effect: what the reviews changed

Deep-search synthesis (forge/search/synthesize.py) takes this function as its ``review`` step; the task that runs
the merge (tasks/search.py) and ``forge synth search`` hand it in, so neither room imports the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from forge.data.schemas import SearchQA, SearchTrajectory
from forge.review.repository import (
    add_trajectory,
    open_workspace_store,
    review_digest,
    reviewed_trajectory,
    trajectory_rejected,
)


def apply_reviews(
    trajs: list[SearchTrajectory], qas: list[SearchQA] = (), *, url: str | None = None, home: Path | None = None,
    actor: str = "synthesis",
) -> tuple[list[SearchTrajectory], dict[str, Any]]:
    """Store every trajectory with its critic labels (and its question's gold path) in the workspace's review
    store (``url``, else as :func:`open_workspace_store` finds it); return the trajectories reviewers did not
    reject, with human verdicts overriding the critic's, and counts of what the reviews changed
    (``turns_masked``, ``turns_unmasked``, ``trajectories_rejected``, ``items_changed``, and the store's
    ``digest``). ``actor`` is who stored a new trajectory (the reviewer sees it: which synthesis run)."""
    by_qa = {qa.id: qa for qa in qas}
    engine = open_workspace_store(url, home)
    kept = []
    effect: dict[str, Any] = {"turns_masked": 0, "turns_unmasked": 0, "trajectories_rejected": 0, "items_changed": 0}
    try:
        with Session(engine) as session:
            for traj in trajs:
                add_trajectory(session, traj, actor=actor, qa=by_qa.get(traj.qa_id))
            session.commit()
            for traj in trajs:
                reviewed = reviewed_trajectory(session, traj.id)
                critic = {v.message_index: v.passed for v in traj.verdicts}
                human = {v.message_index: v.passed for v in reviewed.verdicts if v.judge == "human"}
                masked = sum(1 for i, ok in human.items() if critic.get(i, True) and not ok)
                unmasked = sum(1 for i, ok in human.items() if ok and not critic.get(i, True))
                rejected = trajectory_rejected(session, traj.id)
                effect["turns_masked"] += masked
                effect["turns_unmasked"] += unmasked
                effect["trajectories_rejected"] += rejected
                effect["items_changed"] += bool(traj.correct and (masked or unmasked or rejected))
                if not rejected:
                    kept.append(reviewed)
            effect["digest"] = review_digest(session)
    finally:
        engine.dispose()
    return kept, effect
