"""Repository functions over the review store — the only way synthesis, filtering and the dashboard touch it.

    engine = open_store(url=None, home=ws.home)          # SQLite <home>/review/review.db (WAL, busy timeout)
    with Session(engine) as s:
        add_trajectory(s, traj)                          # idempotent: same trajectory id → critic labels refreshed
        turns = list_pending(s, "alice", limit=20)       # turns alice has not judged, critic failures first
        v = record_verdict(s, turns[0].id, "alice", passed=True, note="fine")
        record_verdict(s, turns[0].id, "alice", passed=False, expected_version=v.version)   # optimistic lock
        traj = reviewed_trajectory(s, traj.id)           # critic verdicts, overridden by human ones
        s.commit()

SQLite with several writers loses transactions unless it runs in WAL mode with a busy timeout and takes the
write lock at BEGIN (STACK.md: 0 of 1,200 lost that way); :func:`open_store` sets all three. A PostgreSQL URL
(``postgresql+psycopg2://…``) is used as is; ``schema`` places the tables in a named schema.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, create_engine, event, func, select
from sqlalchemy.orm import Session

from forge.review.models import AuditEvent, Base, Reviewer, TrajectoryRecord, TurnRecord, Verdict, utcnow
from forge.search.trajectory import SearchTrajectory, TurnVerdict

SQLITE_BUSY_TIMEOUT_MS = 5000


class StaleVerdictError(RuntimeError):
    """The verdict changed since the caller read it (its version is not the expected one)."""


def open_store(url: str | None = None, home: Path | None = None, *, schema: str | None = None) -> Engine:
    """An engine with the tables created. Default: SQLite at ``<home>/review/review.db``."""
    if url is None:
        if home is None:
            raise ValueError("open_store needs a database URL or the workspace home")
        path = Path(home) / "review" / "review.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{path}"
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        _sqlite_pragmas(engine)
    if schema:
        engine = engine.execution_options(schema_translate_map={None: schema})
    Base.metadata.create_all(engine)
    return engine


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # let SQLAlchemy's BEGIN below be the only one
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _audit(session: Session, actor: str, action: str, entity: str, entity_id: str, **detail) -> None:
    session.add(AuditEvent(actor=actor, action=action, entity=entity, entity_id=str(entity_id), detail=detail))


def get_reviewer(session: Session, name: str) -> Reviewer:
    """The reviewer called ``name``, created on first use."""
    reviewer = session.scalar(select(Reviewer).where(Reviewer.name == name))
    if reviewer is None:
        reviewer = Reviewer(name=name)
        session.add(reviewer)
        session.flush()
        _audit(session, name, "create", "reviewer", str(reviewer.id))
    return reviewer


def _turn_text(traj: SearchTrajectory, index: int) -> tuple[str, str | None]:
    m = traj.messages[index]
    parts = [f"<think>{m.reasoning}</think>" if m.reasoning else "", m.content]
    parts += [f"{c.name}({c.arguments})" for c in m.tool_calls]
    nxt = traj.messages[index + 1] if index + 1 < len(traj.messages) else None
    return "\n".join(p for p in parts if p), (nxt.content if nxt is not None and nxt.role == "tool" else None)


def add_trajectory(session: Session, traj: SearchTrajectory, actor: str = "synthesis") -> TrajectoryRecord:
    """Insert a trajectory and its turns with the critic's labels; a known id gets its critic labels refreshed
    (human verdicts are kept)."""
    record = session.get(TrajectoryRecord, traj.id)
    if record is None:
        record = TrajectoryRecord(id=traj.id, qa_id=traj.qa_id, agent=traj.agent, question=traj.question,
                                  gold_answer=traj.gold_answer, final_answer=traj.final_answer, correct=traj.correct,
                                  payload=traj.model_dump(mode="json"))
        session.add(record)
        _audit(session, actor, "create", "trajectory", traj.id, agent=traj.agent)
    else:
        record.payload = traj.model_dump(mode="json")
    existing = {t.message_index: t for t in record.turns}
    for v in traj.verdicts:
        text, obs = _turn_text(traj, v.message_index)
        turn = existing.get(v.message_index)
        if turn is None:
            turn = TurnRecord(trajectory_id=traj.id, message_index=v.message_index, text=text, observation=obs)
            record.turns.append(turn)
        turn.critic_logical, turn.critic_tool_call, turn.critic_info_gain = v.logical, v.tool_call, v.info_gain
        turn.critic_passed, turn.critic_reasons, turn.critic_judge = v.passed, list(v.reasons), v.judge
    session.flush()
    return record


def list_pending(session: Session, reviewer: str, limit: int = 50, agent: str | None = None) -> list[TurnRecord]:
    """Turns ``reviewer`` has not judged yet: critic failures first (they decide what is trained on), then in
    trajectory and turn order."""
    who = get_reviewer(session, reviewer)
    judged = select(Verdict.turn_id).where(Verdict.reviewer_id == who.id)
    query = select(TurnRecord).where(TurnRecord.id.not_in(judged))
    if agent is not None:
        query = query.join(TrajectoryRecord).where(TrajectoryRecord.agent == agent)
    query = query.order_by(TurnRecord.critic_passed, TurnRecord.trajectory_id, TurnRecord.message_index).limit(limit)
    return list(session.scalars(query))


def record_verdict(session: Session, turn_id: int, reviewer: str, *, passed: bool, note: str = "",
                   expected_version: int | None = None) -> Verdict:
    """Create or update ``reviewer``'s verdict on a turn.

    Args:
        expected_version: the version the reviewer saw; when the stored verdict has another one (someone saved
            in between) :class:`StaleVerdictError` is raised and nothing changes. ``0`` means "I saw none".
    """
    if session.get(TurnRecord, turn_id) is None:
        raise KeyError(f"no turn with id {turn_id}")
    who = get_reviewer(session, reviewer)
    verdict = session.scalar(select(Verdict).where(Verdict.turn_id == turn_id, Verdict.reviewer_id == who.id))
    current = verdict.version if verdict is not None else 0
    if expected_version is not None and expected_version != current:
        raise StaleVerdictError(f"turn {turn_id}: verdict is at version {current}, not {expected_version}")
    if verdict is None:
        verdict = Verdict(turn_id=turn_id, reviewer_id=who.id, passed=passed, note=note, version=1)
        session.add(verdict)
    else:
        verdict.passed, verdict.note, verdict.version, verdict.updated_at = passed, note, current + 1, utcnow()
    session.flush()
    _audit(session, reviewer, "verdict", "turn", str(turn_id), passed=passed, version=verdict.version)
    return verdict


def effective_verdicts(session: Session, trajectory_id: str) -> list[TurnVerdict]:
    """Per turn: the latest human verdict where one exists (it overrides the critic), else the critic's."""
    record = session.get(TrajectoryRecord, trajectory_id)
    if record is None:
        raise KeyError(f"no trajectory {trajectory_id}")
    out = []
    for turn in record.turns:
        humans = sorted(turn.verdicts, key=lambda v: (v.updated_at, v.id))
        if humans:
            h = humans[-1]
            out.append(TurnVerdict(message_index=turn.message_index, logical=h.passed, tool_call=h.passed,
                                   info_gain=h.passed, reasons=[f"reviewer {h.reviewer.name}: {h.note}".strip()],
                                   judge="human"))
        else:
            out.append(TurnVerdict(message_index=turn.message_index, logical=turn.critic_logical,
                                   tool_call=turn.critic_tool_call, info_gain=turn.critic_info_gain,
                                   reasons=list(turn.critic_reasons), judge=turn.critic_judge))  # type: ignore[arg-type]
    return out


def reviewed_trajectory(session: Session, trajectory_id: str) -> SearchTrajectory:
    """The stored trajectory with its effective (human-over-critic) verdicts."""
    record = session.get(TrajectoryRecord, trajectory_id)
    if record is None:
        raise KeyError(f"no trajectory {trajectory_id}")
    traj = SearchTrajectory.model_validate(record.payload)
    return traj.model_copy(update={"verdicts": effective_verdicts(session, trajectory_id)})


def review_digest(session: Session) -> str:
    """Changes whenever a verdict is added or edited: the cache key that makes filtering re-read the reviews."""
    count, versions, latest = session.execute(
        select(func.count(Verdict.id), func.coalesce(func.sum(Verdict.version), 0), func.max(Verdict.updated_at))
    ).one()
    return f"{count}:{versions}:{latest}"
