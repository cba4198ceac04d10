"""Review store on SQLite and PostgreSQL: trajectories with critic labels in, human verdicts override the critic,
optimistic locking refuses stale saves, every write is audited."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from forge.review import (
    StaleVerdictError,
    add_trajectory,
    effective_verdicts,
    list_pending,
    record_verdict,
    reviewed_trajectory,
)
from forge.review.models import AuditEvent, Verdict


def test_human_verdict_overrides_critic_and_reaches_the_sft_mask(engine, make_traj):
    traj = make_traj()
    with Session(engine) as s:
        add_trajectory(s, traj)
        add_trajectory(s, traj)  # idempotent
        s.commit()
    with Session(engine) as s:
        pending = list_pending(s, "alice")
        assert pending[0].message_index == 3  # the critic's failure comes first
        assert len(pending) == 3
        critic = effective_verdicts(s, traj.id)
        assert [v.passed for v in critic] == [True, False, True] and {v.judge for v in critic} == {"rule"}
        record_verdict(s, pending[0].id, "alice", passed=True, note="the page was needed")
        s.commit()
    with Session(engine) as s:
        reviewed = reviewed_trajectory(s, traj.id)
        assert [v.passed for v in reviewed.verdicts] == [True, True, True]
        assert reviewed.verdicts[1].judge == "human"
        assert len(list_pending(s, "alice")) == 2 and len(list_pending(s, "bob")) == 3
    # The SFT sample follows the effective verdicts: with the critic alone turn 3 is masked, after review not.
    assert [m.loss for m in traj.to_chat_sample().messages if m.role == "assistant"] == [True, False, True]
    assert all(m.loss for m in reviewed.to_chat_sample().messages if m.role == "assistant")


def test_optimistic_locking_and_audit(engine, make_traj):
    traj = make_traj("b")
    with Session(engine) as s:
        add_trajectory(s, traj)
        turn = list_pending(s, "carol")[0]
        v1 = record_verdict(s, turn.id, "carol", passed=False, expected_version=0)
        assert v1.version == 1
        v2 = record_verdict(s, turn.id, "carol", passed=True, expected_version=1)
        assert v2.version == 2
        with pytest.raises(StaleVerdictError):
            record_verdict(s, turn.id, "carol", passed=False, expected_version=1)  # a stale read
        s.commit()
        assert s.scalar(select(Verdict).where(Verdict.turn_id == turn.id)).passed is True
        actions = [(e.actor, e.action) for e in s.scalars(select(AuditEvent).order_by(AuditEvent.id))]
        assert ("synthesis", "create") in actions and actions.count(("carol", "verdict")) == 2
        with pytest.raises(KeyError):
            record_verdict(s, 10**9, "carol", passed=True)
