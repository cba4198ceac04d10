"""Actions that change shared state, each re-checking the actor's role in the review store first.

The pages hide admin controls from reviewers, but hiding is not authorisation: Streamlit sends widget events
from the browser, so these handlers are the gate. They re-read the actor from the store (a role taken away, or
an account disabled, since login counts at once) and call ``forge.review.require_admin``. Promotion and rollback
call ``registry.promotion`` — the same functions ``forge promote`` / ``forge rollback`` call — and every action,
refusals included, is written to the store's audit trail.

    decision = promote_candidate(engine, "alice", client, "forge-policy", load_profile("tiny").promotion)
"""

from __future__ import annotations

from mlflow import MlflowClient
from sqlalchemy import Engine, select

from forge.config import PromotionConfig
from forge.review import assign_overlap, require_admin, session_scope
from forge.review.models import Reviewer
from forge.review.repository import audit
from registry.promotion import Decision, promote, rollback


class NotAllowed(PermissionError):
    """The actor is not an admin (or no longer exists, or is disabled) in the review store."""


def check_admin(engine: Engine, actor: str, action: str) -> None:
    """Raise :class:`NotAllowed` unless ``actor`` is an active admin *now*; a refusal is audited."""
    with session_scope(engine) as s:
        try:
            require_admin(s.scalar(select(Reviewer).where(Reviewer.name == actor)))
            return
        except PermissionError:
            audit(s, actor, "refused", "action", action[:64], reason="not an admin")
    raise NotAllowed(f"{actor} may not {action}: only admins can")


def promote_candidate(
    engine: Engine, actor: str, client: MlflowClient, model: str, policy: PromotionConfig
) -> Decision:
    """``candidate`` → ``champion`` through the promotion gate (as ``forge promote``)."""
    check_admin(engine, actor, f"promote {model}")
    decision = promote(client, model, policy)
    with session_scope(engine) as s:
        audit(s, actor, "promote", "model", model, promoted=decision.promote, unchanged=decision.unchanged,
              reasons=decision.reasons)
    return decision


def rollback_champion(engine: Engine, actor: str, client: MlflowClient, model: str) -> str:
    """The champion before the current one becomes the champion again (as ``forge rollback``)."""
    check_admin(engine, actor, f"roll back {model}")
    restored = rollback(client, model)
    with session_scope(engine) as s:
        audit(s, actor, "rollback", "model", model, restored=restored)
    return restored


def assign_overlap_as(engine: Engine, actor: str, reviewers: list[str], overlap: float, seed: int) -> int:
    """Assign unassigned trajectories to ``reviewers``; a share ``overlap`` of them to two reviewers."""
    check_admin(engine, actor, "assign overlap")
    with session_scope(engine) as s:
        return assign_overlap(s, reviewers, overlap=overlap, seed=seed, actor=actor)
