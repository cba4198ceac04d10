"""8 concurrent writers × 300 verdicts lose none, on SQLite and on PostgreSQL; and when all of them edit the same
verdict with optimistic locking, every accepted edit is counted (no lost update), the stale ones are refused."""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback

from sqlalchemy import func, select

from forge.review import StaleVerdictError, add_trajectory, create_user, open_store, record_verdict, session_scope
from forge.review.models import AuditEvent, Reviewer, TurnRecord, Verdict

WRITERS, VERDICTS, SHARED_EDITS = 8, 300, 25


def _writer(url: str, schema: str | None, worker: int, turn_ids: list[int], shared: int, out) -> None:
    code = 0
    try:
        out.put((worker, _write(url, schema, worker, turn_ids, shared)))
    except BaseException:  # noqa: BLE001 - whatever ends a writer is reported to the parent
        out.put((worker, traceback.format_exc()))
        code = 1
    finally:
        out.close()
        out.join_thread()  # the result is sent before the process goes
        # A forked child leaves without the parent's exit hooks: they would wait on threads the parent started
        # (an in-process Prefect server's workers, thread pools), which the child does not have, and hang it.
        os._exit(code)


def _write(url: str, schema: str | None, worker: int, turn_ids: list[int], shared: int) -> int:
    engine = open_store(url, schema=schema)
    for i, turn_id in enumerate(turn_ids):
        with session_scope(engine) as s:
            record_verdict(s, turn_id, f"w{worker}", passed=(i + worker) % 2 == 0, note=f"w{worker}-{i}")
    stale = 0
    done = 0
    while done < SHARED_EDITS:  # read the version, then save against it; someone else may have saved in between
        try:
            with session_scope(engine) as s:
                # The shared reviewer's row: every writer also has a verdict of its own on this turn (version 1),
                # which an unfiltered select returned first on PostgreSQL, so no save ever matched (a livelock).
                current = s.scalar(select(Verdict.version).join(Verdict.reviewer)
                                   .where(Verdict.turn_id == shared, Reviewer.name == "shared"))
                record_verdict(s, shared, "shared", passed=True, note=f"w{worker}", expected_version=current)
            done += 1
        except StaleVerdictError:
            stale += 1
            time.sleep(0.001 * (worker + 1))
    engine.dispose()
    return stale


def test_eight_writers_lose_nothing(store, make_traj):
    url, schema = store
    engine = open_store(url, schema=schema)
    with session_scope(engine) as s:
        for w in range(WRITERS):
            create_user(s, f"w{w}", password="writer password")
        for t in range(VERDICTS // 3):
            add_trajectory(s, make_traj(f"t{t}"))
    with session_scope(engine) as s:
        turn_ids = list(s.scalars(select(TurnRecord.id).order_by(TurnRecord.id)))
        assert len(turn_ids) == VERDICTS
        shared = turn_ids[0]
        record_verdict(s, shared, "shared", passed=True)  # version 1

    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(url, schema, w, turn_ids, shared, out)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    try:
        results = dict(out.get(timeout=300) for _ in procs)
        for p in procs:
            p.join(60)
    finally:  # a writer still going when the test gives up would load the machine under the tests that follow
        for p in procs:
            if p.is_alive():
                p.kill()
    failed = {w: r for w, r in results.items() if isinstance(r, str)}
    assert not failed, "\n".join(failed.values())
    assert all(p.exitcode == 0 for p in procs)

    with session_scope(engine) as s:
        rows = s.execute(select(Verdict.note, Verdict.passed, Verdict.version).join(Verdict.reviewer)
                         .where(Verdict.turn_id != shared)).all()
        assert len(rows) == WRITERS * (VERDICTS - 1)  # every (writer, turn) verdict is there ...
        expected = {(f"w{w}-{i}", (i + w) % 2 == 0) for w in range(WRITERS) for i in range(1, VERDICTS)}
        assert expected <= {(note, passed) for note, passed, _ in rows}  # ... with what that writer wrote
        mine = s.scalars(select(Verdict).where(Verdict.turn_id == shared)).all()
        # the shared turn: one verdict per writer (their own first write) + the "shared" reviewer's
        assert len(mine) == WRITERS + 1
        shared_verdict = next(v for v in mine if v.reviewer.name == "shared")
        assert shared_verdict.version == 1 + WRITERS * SHARED_EDITS  # no edit was lost
        audited = s.scalar(select(func.count(AuditEvent.id)).where(AuditEvent.action == "verdict"))
        assert audited == WRITERS * VERDICTS + 1 + WRITERS * SHARED_EDITS
    engine.dispose()
    print(f"stale saves refused per writer: {results}")
