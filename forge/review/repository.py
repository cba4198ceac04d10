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
write lock at BEGIN (docs/stack.md: 0 of 1,200 lost that way); :func:`open_store` sets all three. A PostgreSQL URL
(``postgresql+psycopg2://…``) is used as is; ``schema`` places the tables in a named schema. Either way the
schema comes from the Alembic migrations in ``forge/review/migrations`` (``open_store`` upgrades to head).
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Engine, create_engine, event, func, inspect, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from forge.data.schemas import SearchQA, SearchTrajectory, TurnVerdict
from forge.review.models import (
    AuditEvent,
    Reviewer,
    TrajectoryRecord,
    TrajectoryVerdict,
    TurnRecord,
    Verdict,
    utcnow,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 30_000  # 5 s starved a writer among 8 on a loaded 2-core machine


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
    # pre-ping: a pooled connection the server dropped while it sat idle (a restart, an idle timeout) is replaced
    # at checkout instead of failing the reviewer's next click
    engine = create_engine(url, pool_pre_ping=True)
    if engine.dialect.name == "sqlite":
        _sqlite_pragmas(engine)
    if schema:
        engine = engine.execution_options(schema_translate_map={None: schema})
    migrate(engine, schema=schema)
    return engine


STORE_URL_ENV = "FORGE_REVIEW_DB_URL"
STORE_SCHEMA_ENV = "FORGE_REVIEW_DB_SCHEMA"


def open_workspace_store(url: str | None = None, home: Path | None = None) -> Engine:
    """The store everyone in this workspace shares: ``url`` (a profile's ``deep_search.review_db_url``), else
    ``$FORGE_REVIEW_DB_URL`` (+ ``$FORGE_REVIEW_DB_SCHEMA``), else SQLite under ``home`` (default ``$FORGE_HOME``)."""
    from forge.workspace import Workspace

    return open_store(url or os.environ.get(STORE_URL_ENV) or None, home or Workspace.from_env().home,
                      schema=os.environ.get(STORE_SCHEMA_ENV) or None)


MIGRATIONS = Path(__file__).with_name("migrations")
FIRST_REVISION = "0001"  # the schema the deep-search issue made with create_all, before there were migrations


def migrate(engine: Engine, *, schema: str | None = None, revision: str = "head") -> str | None:
    """Upgrade the store to ``revision``; returns the revision it was at. Safe to call from many processes at once:
    SQLite takes its write lock at BEGIN, PostgreSQL an advisory lock, so one process migrates and the others then
    find the store at head."""
    from alembic import command

    cfg = _alembic_config()
    target = _script(cfg).get_current_head() if revision == "head" else revision
    with engine.connect() as conn:  # cheap check first: nearly every open finds the store at head
        if _revision(conn, schema) == target:
            return target
    with _migrating(engine, schema) as conn:
        current = _revision(conn, schema)
        if current != target:
            cfg.attributes.update(connection=conn, schema=schema)
            if current is None and inspect(conn).has_table("trajectories", schema=schema):
                command.stamp(cfg, FIRST_REVISION)  # a store from before the migrations: it has 0001's tables
            command.upgrade(cfg, target)
        return current


def downgrade(engine: Engine, revision: str, *, schema: str | None = None) -> None:
    """Take the schema back to ``revision`` (``base`` drops every table): for rolling back a release."""
    from alembic import command

    cfg = _alembic_config()
    with _migrating(engine, schema) as conn:
        cfg.attributes.update(connection=conn, schema=schema)
        command.downgrade(cfg, revision)


def _alembic_config():
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def _script(cfg):
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(cfg)


@contextmanager
def _migrating(engine: Engine, schema: str | None):
    """One transaction for the whole migration, under the store's write lock.

    SQLite changes a table by copying it, which foreign keys refuse while other tables point at its rows; the
    check is switched off for the migration (it can only be switched outside a transaction) and the keys are
    verified before the transaction commits."""
    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            conn.connection.dbapi_connection.execute("PRAGMA foreign_keys=OFF")
        try:
            with conn.begin():
                if conn.dialect.name == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                                 {"key": zlib.crc32(f"forge-review:{schema}".encode())})
                    if schema:  # Alembic's ALTER statements name tables without a schema: resolve them in ours
                        conn.execute(text(f'SET LOCAL search_path TO "{schema}"'))
                yield conn
                if sqlite:
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise RuntimeError(f"review store migration would break foreign keys: {broken[:5]}")
        finally:
            if sqlite:
                conn.connection.dbapi_connection.execute("PRAGMA foreign_keys=ON")


def _revision(conn, schema: str | None) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn, opts={"version_table_schema": schema}).get_current_revision()


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits when the block ends and rolls back when it raises."""
    with Session(engine) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def write_once(engine: Engine, work: Callable[[Session], T]) -> T:
    """``work(session)`` in one transaction, run again once on a fresh connection when the database dropped the
    connection under it (the transaction rolled back, so nothing was half-written). A drop during COMMIT leaves it
    unknown whether the write landed: the retry of a versioned verdict then finds the new version and raises
    :class:`StaleVerdictError` rather than writing twice."""
    for attempt in (1, 2):
        try:
            with session_scope(engine) as session:
                return work(session)
        except DBAPIError as err:
            if attempt == 2 or not err.connection_invalidated:
                raise
            log.warning("the database dropped the connection (%s); trying once more", str(err.orig).strip())
    raise AssertionError("unreachable")


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


def audit(session: Session, actor: str, action: str, entity: str, entity_id: str, **detail) -> None:
    session.add(AuditEvent(actor=actor, action=action, entity=entity, entity_id=str(entity_id), detail=detail))


def get_reviewer(session: Session, name: str) -> Reviewer:
    """The reviewer called ``name``, created on first use."""
    query = select(Reviewer).where(Reviewer.name == name)
    reviewer = session.scalar(query)
    if reviewer is None:
        reviewer = Reviewer(name=name)
        if not _insert(session, reviewer):  # another writer created them a moment ago
            return session.scalars(query).one()
        audit(session, name, "create", "reviewer", str(reviewer.id))
    return reviewer


def _insert(session: Session, row) -> bool:
    """Add ``row`` inside a savepoint; False (and nothing added) when a unique key says another writer won."""
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        return False
    return True


def _turn_text(traj: SearchTrajectory, index: int) -> tuple[str, str | None]:
    m = traj.messages[index]
    parts = [f"<think>{m.reasoning}</think>" if m.reasoning else "", m.content]
    parts += [f"{c.name}({c.arguments})" for c in m.tool_calls]
    nxt = traj.messages[index + 1] if index + 1 < len(traj.messages) else None
    return "\n".join(p for p in parts if p), (nxt.content if nxt is not None and nxt.role == "tool" else None)


def add_trajectory(session: Session, traj: SearchTrajectory, actor: str = "synthesis",
                   qa: SearchQA | None = None) -> TrajectoryRecord:
    """Insert a trajectory and its turns with the critic's labels; a known id gets its critic labels refreshed
    (human verdicts are kept). ``qa`` (the question it answers) adds the gold path reviewers compare against."""
    record = session.get(TrajectoryRecord, traj.id)
    if record is None:
        record = TrajectoryRecord(id=traj.id, qa_id=traj.qa_id, agent=traj.agent, domain=traj.domain,
                                  question=traj.question,
                                  gold_answer=traj.gold_answer, final_answer=traj.final_answer, correct=traj.correct,
                                  payload=traj.model_dump(mode="json"))
        session.add(record)
        audit(session, actor, "create", "trajectory", traj.id, agent=traj.agent)
    else:
        record.payload = traj.model_dump(mode="json")
    if qa is not None:
        record.gold = {"path": list(qa.gold_path), "relations": list(qa.gold_relations)}
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


DIMENSIONS = ("logical", "tool_call", "info_gain")


def _check_version(what: str, current: int, expected: int | None) -> None:
    if expected is not None and expected != current:
        raise StaleVerdictError(f"{what}: verdict is at version {current}, not {expected} (someone saved in between; "
                                "reload to see it)")


def record_verdict(session: Session, turn_id: int, reviewer: str, *, passed: bool, note: str = "",
                   dimensions: dict[str, bool] | None = None, expected_version: int | None = None) -> Verdict:
    """Create or update ``reviewer``'s verdict on a turn.

    Args:
        dimensions: the reviewer's judgement on the critic's three dimensions (``logical``, ``tool_call``,
            ``info_gain``); missing ones follow ``passed``. ``passed`` decides: a set of dimensions that
            contradicts it (all true on a rejected turn) is not stored, the turn then fails on every dimension.
        expected_version: the version the reviewer saw; when the stored verdict has another one (someone saved
            in between) :class:`StaleVerdictError` is raised and nothing changes. ``0`` means "I saw none".
    """
    if session.get(TurnRecord, turn_id) is None:
        raise KeyError(f"no turn with id {turn_id}")
    unknown = set(dimensions or {}) - set(DIMENSIONS)
    if unknown:
        raise ValueError(f"unknown verdict dimension(s) {sorted(unknown)}; known: {', '.join(DIMENSIONS)}")
    dims = {d: (dimensions or {}).get(d, passed) for d in DIMENSIONS}
    if all(dims.values()) != passed:
        dims = dict.fromkeys(DIMENSIONS, passed)
    who = get_reviewer(session, reviewer)
    verdict = session.scalar(select(Verdict).where(Verdict.turn_id == turn_id, Verdict.reviewer_id == who.id)
                             .with_for_update())  # PostgreSQL: the row stays ours until commit (SQLite: BEGIN IMMEDIATE)
    current = verdict.version if verdict is not None else 0
    _check_version(f"turn {turn_id}", current, expected_version)
    if verdict is None:
        verdict = Verdict(turn_id=turn_id, reviewer_id=who.id, version=1, passed=passed, note=note)
        if not _insert(session, verdict):
            raise StaleVerdictError(f"turn {turn_id}: {reviewer} saved a verdict in between (reload to see it)")
    else:
        verdict.version, verdict.updated_at = current + 1, utcnow()
    verdict.passed, verdict.note = passed, note
    verdict.logical, verdict.tool_call, verdict.info_gain = (dims[d] for d in DIMENSIONS)
    session.flush()
    audit(session, reviewer, "verdict", "turn", str(turn_id), passed=passed, version=verdict.version, **dims)
    return verdict


def accept_remaining(session: Session, trajectory_id: str, reviewer: str) -> list[int]:
    """Accept every turn of a trajectory that ``reviewer`` has not judged yet (each as :func:`record_verdict` with
    ``expected_version=0``, so a verdict saved meanwhile elsewhere stops the whole batch); returns the turn ids."""
    who = get_reviewer(session, reviewer)
    judged = select(Verdict.turn_id).where(Verdict.reviewer_id == who.id)
    open_turns = list(session.scalars(select(TurnRecord.id).where(TurnRecord.trajectory_id == trajectory_id,
                                                                  TurnRecord.id.not_in(judged))
                                      .order_by(TurnRecord.message_index)))
    for turn_id in open_turns:
        record_verdict(session, turn_id, reviewer, passed=True, expected_version=0)
    return open_turns


def record_trajectory_verdict(session: Session, trajectory_id: str, reviewer: str, *, accepted: bool,
                              note: str = "", expected_version: int | None = None) -> TrajectoryVerdict:
    """Accept or reject a whole trajectory (a rejected one leaves the SFT pools at the next merge); the same
    optimistic locking as :func:`record_verdict`."""
    if session.get(TrajectoryRecord, trajectory_id) is None:
        raise KeyError(f"no trajectory {trajectory_id}")
    who = get_reviewer(session, reviewer)
    verdict = session.scalar(select(TrajectoryVerdict).where(TrajectoryVerdict.trajectory_id == trajectory_id,
                                                             TrajectoryVerdict.reviewer_id == who.id).with_for_update())
    current = verdict.version if verdict is not None else 0
    _check_version(f"trajectory {trajectory_id}", current, expected_version)
    if verdict is None:
        verdict = TrajectoryVerdict(trajectory_id=trajectory_id, reviewer_id=who.id, version=1, accepted=accepted,
                                    note=note)
        if not _insert(session, verdict):
            raise StaleVerdictError(f"trajectory {trajectory_id}: {reviewer} saved a verdict in between (reload)")
    else:
        verdict.version, verdict.updated_at = current + 1, utcnow()
    verdict.accepted, verdict.note = accepted, note
    session.flush()
    audit(session, reviewer, "verdict", "trajectory", trajectory_id, accepted=accepted, version=verdict.version)
    return verdict


def _latest(verdicts):
    return max(verdicts, key=lambda v: (v.updated_at, v.id)) if verdicts else None


def effective_verdicts(session: Session, trajectory_id: str) -> list[TurnVerdict]:
    """Per turn: the latest human verdict where one exists (it overrides the critic), else the critic's."""
    record = session.get(TrajectoryRecord, trajectory_id)
    if record is None:
        raise KeyError(f"no trajectory {trajectory_id}")
    out = []
    for turn in record.turns:
        h = _latest(turn.verdicts)
        if h is not None:
            out.append(TurnVerdict(message_index=turn.message_index, **{d: h.dimension(d) for d in DIMENSIONS},
                                   reasons=[f"reviewer {h.reviewer.name}: {h.note}".strip()], judge="human"))
        else:
            out.append(TurnVerdict(message_index=turn.message_index, logical=turn.critic_logical,
                                   tool_call=turn.critic_tool_call, info_gain=turn.critic_info_gain,
                                   reasons=list(turn.critic_reasons), judge=turn.critic_judge))  # type: ignore[arg-type]
    return out


def trajectory_rejected(session: Session, trajectory_id: str) -> bool:
    """Whether the latest human verdict on the whole trajectory rejects it."""
    latest = _latest(list(session.scalars(select(TrajectoryVerdict).where(
        TrajectoryVerdict.trajectory_id == trajectory_id))))
    return latest is not None and not latest.accepted


def reviewed_trajectory(session: Session, trajectory_id: str) -> SearchTrajectory:
    """The stored trajectory with its effective (human-over-critic) verdicts."""
    record = session.get(TrajectoryRecord, trajectory_id)
    if record is None:
        raise KeyError(f"no trajectory {trajectory_id}")
    traj = SearchTrajectory.model_validate(record.payload)
    return traj.model_copy(update={"verdicts": effective_verdicts(session, trajectory_id)})


def review_digest(session: Session) -> str:
    """Changes whenever a turn or trajectory verdict is added or edited: the cache key that makes filtering re-read
    the reviews."""
    parts = []
    for table in (Verdict, TrajectoryVerdict):
        count, versions, latest = session.execute(
            select(func.count(table.id), func.coalesce(func.sum(table.version), 0), func.max(table.updated_at))
        ).one()
        parts.append(f"{count}:{versions}:{latest}")
    return "|".join(parts)
