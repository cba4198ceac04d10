"""PostgreSQL dropping the review store's connection loses no verdict: a connection dropped while idle in the pool
is replaced at checkout (pre-ping), one dropped mid-transaction is rolled back and the write runs once more on a
fresh connection (:func:`forge.review.write_once`). The drops are real: ``pg_terminate_backend`` on the store's
own server process. SQLite has no server connection to lose, so these run on PostgreSQL only."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.exc import DBAPIError

from forge.review import add_trajectory, list_pending, open_store, record_verdict, session_scope, write_once
from forge.review.models import Verdict

PG_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"  # as tests/conftest.py's pg_schema


@pytest.fixture
def pg(pg_schema, make_traj):
    """(engine, turn id, terminate) on a fresh schema: ``terminate(pid)`` ends that server process."""
    engine = open_store(PG_URL, schema=pg_schema)
    with session_scope(engine) as s:
        add_trajectory(s, make_traj("reconnect"))
        turn_id = list_pending(s, "dora")[0].id
    admin = create_engine(PG_URL)

    def terminate(pid: int) -> None:
        with admin.begin() as conn:
            assert conn.scalar(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})

    yield engine, turn_id, terminate
    engine.dispose()
    admin.dispose()


def _verdicts(engine, turn_id: int) -> list[bool]:
    with session_scope(engine) as s:
        return list(s.scalars(select(Verdict.passed).where(Verdict.turn_id == turn_id)))


def test_connection_dropped_while_idle_is_replaced_at_checkout(pg):
    engine, turn_id, terminate = pg
    with session_scope(engine) as s:
        before = s.scalar(select(func.pg_backend_pid()))
    terminate(before)  # the pooled connection is now dead

    with session_scope(engine) as s:  # no retry here: pre-ping alone makes this work
        record_verdict(s, turn_id, "dora", passed=True)
        after = s.scalar(select(func.pg_backend_pid()))
    assert after != before
    assert _verdicts(engine, turn_id) == [True]


def test_connection_dropped_mid_transaction_is_written_once_on_retry(pg):
    engine, turn_id, terminate = pg
    calls = []

    def judge(s):
        calls.append(s.scalar(select(func.pg_backend_pid())))
        if len(calls) == 1:
            terminate(calls[0])  # the server goes away between the read and the write
        return record_verdict(s, turn_id, "dora", passed=False, note="wrong page", expected_version=0).version

    assert write_once(engine, judge) == 1
    assert len(calls) == 2 and calls[0] != calls[1]
    assert _verdicts(engine, turn_id) == [False]  # one verdict: the first attempt rolled back

    # Without write_once the same drop reaches the caller, and the verdict stays as it was.
    with pytest.raises(DBAPIError) as err, session_scope(engine) as s:
        terminate(s.scalar(select(func.pg_backend_pid())))
        record_verdict(s, turn_id, "dora", passed=True, expected_version=1)
    assert err.value.connection_invalidated
    assert _verdicts(engine, turn_id) == [False]
