"""Review store on SQLite and PostgreSQL: trajectories with critic labels in, human verdicts override the critic,
optimistic locking refuses stale saves, every write is audited, concurrent SQLite writers lose nothing."""

from __future__ import annotations

import multiprocessing
import uuid

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from forge.data.schemas import Message, ToolCall
from forge.review import (
    StaleVerdictError,
    add_trajectory,
    effective_verdicts,
    list_pending,
    open_store,
    record_verdict,
    reviewed_trajectory,
)
from forge.review.models import AuditEvent, Verdict
from forge.search.trajectory import SearchTrajectory, TurnVerdict, to_chat_sample

PG_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"


def _trajectory(tag: str = "a") -> SearchTrajectory:
    msgs = [
        Message(role="user", content=f"What is the music of The Holiday? ({tag})"),
        Message(role="assistant", reasoning="Search first.", tool_calls=[ToolCall(name="search",
                                                                                 arguments={"query": "The Holiday"})]),
        Message(role="tool", name="search", content="[1] The Holiday\n    The Holiday is a 2006 film."),
        Message(role="assistant", reasoning="Open it.", tool_calls=[ToolCall(name="visit",
                                                                             arguments={"page": "The Holiday"})]),
        Message(role="tool", name="visit", content="The Holiday\nThe music of The Holiday is Hans Zimmer."),
        Message(role="assistant", reasoning="So the answer is Hans Zimmer.", content="Hans Zimmer"),
    ]
    traj = SearchTrajectory.build(source="test", qa_id=f"qa-{tag}", agent="planner", question=msgs[0].content,
                                  gold_answer="Hans Zimmer", messages=msgs, final_answer="Hans Zimmer", correct=True)
    verdicts = [TurnVerdict(message_index=1, logical=True, tool_call=True, info_gain=True),
                TurnVerdict(message_index=3, logical=True, tool_call=True, info_gain=False, reasons=["no gain"]),
                TurnVerdict(message_index=5, logical=True, tool_call=True, info_gain=True)]
    return traj.model_copy(update={"verdicts": verdicts})


def _postgres_engine():
    try:
        import psycopg2

        psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="test", connect_timeout=2).close()
    except Exception as err:  # noqa: BLE001 - any failure to connect means: no server to test against
        pytest.skip(f"no PostgreSQL answering on 127.0.0.1:5432 db 'test' ({type(err).__name__}: {err})")
    from sqlalchemy import create_engine

    schema = f"review_{uuid.uuid4().hex[:12]}"  # parallel runs never share tables
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    return open_store(PG_URL, schema=schema), admin, schema


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request, tmp_path):
    if request.param == "sqlite":
        yield open_store(home=tmp_path)
        return
    eng, admin, schema = _postgres_engine()
    yield eng
    eng.dispose()
    with admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


def test_human_verdict_overrides_critic_and_reaches_the_sft_mask(engine):
    traj = _trajectory()
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
    assert [m.loss for m in to_chat_sample(traj).messages if m.role == "assistant"] == [True, False, True]
    assert all(m.loss for m in to_chat_sample(reviewed).messages if m.role == "assistant")


def test_optimistic_locking_and_audit(engine):
    traj = _trajectory("b")
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


def _writer(db: str, worker: int, n: int) -> None:
    engine = open_store(f"sqlite:///{db}")
    for i in range(n):
        with Session(engine) as s:
            add_trajectory(s, _trajectory(f"w{worker}-{i}"))
            s.commit()


def test_concurrent_sqlite_writers_lose_nothing(tmp_path):
    db = tmp_path / "review.db"
    open_store(f"sqlite:///{db}")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(db), w, 15)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    engine = open_store(f"sqlite:///{db}")
    with Session(engine) as s:
        assert s.execute(text("select count(*) from trajectories")).scalar() == 45
        assert s.execute(text("select count(*) from turns")).scalar() == 135
        assert s.execute(text("PRAGMA journal_mode")).scalar() == "wal"
