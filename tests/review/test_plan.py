"""The review plan and the batch accept, on SQLite and PostgreSQL: critic failures first, then disagreements, then
a fixed random sample of the rest sized for ±5% at 95%; "accept remaining" judges exactly the turns left."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from forge.review import accept_remaining, add_trajectory, queue, record_verdict, sample_size, trajectory_view
from forge.review.models import AuditEvent


def test_sample_size_is_the_textbook_one():
    # n0 = 1.96² · 0.25 / 0.05² = 384.1; with the finite-population correction n = n0 / (1 + (n0 - 1) / N).
    assert sample_size(10**9) == 385
    assert sample_size(600) == 235
    assert sample_size(60) == 53
    assert sample_size(10) == 10 and sample_size(0) == 0
    assert sample_size(10**9, margin=0.1) == 97  # a looser margin asks for fewer


def _clean(traj):
    return traj.model_copy(update={"verdicts": [v.model_copy(update={"info_gain": True, "reasons": []})
                                                for v in traj.verdicts]})


def test_plan_orders_failures_then_disagreements_then_a_fixed_sample(engine, make_traj):
    failed = [make_traj(f"failed-{i}") for i in range(2)]
    disputed = _clean(make_traj("disputed"))
    clean = [_clean(make_traj(f"clean-{i}")) for i in range(60)]
    with Session(engine) as s:
        for traj in [*clean, disputed, *failed]:
            add_trajectory(s, traj)
        s.commit()
        # Another reviewer rejects a turn the critic passed: a disagreement.
        turn = trajectory_view(s, disputed.id, "bob").turns[0]
        record_verdict(s, turn.turn_id, "bob", passed=False)
        s.commit()
        everything = queue(s, "alice", plan=False, limit=1000)
        planned = queue(s, "alice", plan=True, limit=1000)
        assert len(everything) == 63
        assert [i.why for i in planned[:3]] == ["critic failed", "critic failed", "disagreement"]
        assert {i.trajectory_id for i in planned[:2]} == {t.id for t in failed}
        assert planned[2].trajectory_id == disputed.id
        sample = planned[3:]
        assert len(sample) == sample_size(60) == 53 and {i.why for i in sample} == {"sample"}
        # The same sample for everyone and every filter, and judging one does not pull another in.
        assert [i.trajectory_id for i in queue(s, "carol", plan=True, limit=1000)] == [
            i.trajectory_id for i in planned]
        first = sample[0].trajectory_id
        accept_remaining(s, first, "alice")
        s.commit()
        pending = queue(s, "alice", plan=True, limit=1000)
        assert first not in {i.trajectory_id for i in pending} and len(pending) == len(planned) - 1
        reviewed = queue(s, "alice", plan=True, status="reviewed")
        assert [i.trajectory_id for i in reviewed] == [first]


def test_accept_remaining_judges_only_the_turns_left(engine, make_traj):
    traj = make_traj("batch")
    with Session(engine) as s:
        add_trajectory(s, traj)
        s.commit()
        turns = trajectory_view(s, traj.id, "alice").turns
        record_verdict(s, turns[1].turn_id, "alice", passed=False, note="no gain indeed")
        s.commit()
        accepted = accept_remaining(s, traj.id, "alice")
        s.commit()
        assert accepted == [turns[0].turn_id, turns[2].turn_id]
        view = trajectory_view(s, traj.id, "alice")
        assert [t.my_verdict.passed for t in view.turns] == [True, False, True]
        assert view.turns[1].my_verdict.note == "no gain indeed"  # the one judged before is left as it was
        assert accept_remaining(s, traj.id, "alice") == []
        verdicts = s.scalars(select(AuditEvent).where(AuditEvent.actor == "alice", AuditEvent.action == "verdict"))
        assert len(list(verdicts)) == 3


def test_view_says_where_a_trajectory_came_from(engine, make_traj):
    traj = make_traj("provenance")
    with Session(engine) as s:
        add_trajectory(s, traj, actor="synthesis in run 1a2b3c4d (tiny)")
        s.commit()
        view = trajectory_view(s, traj.id, "alice")
        assert view.qa_id == "qa-provenance" and view.agent == "planner"
        assert view.stored.endswith(" UTC by synthesis in run 1a2b3c4d (tiny)")
