"""SQLAlchemy 2 typed models of the review store (SQLite by default, PostgreSQL by URL).

- ``reviewers``: people who judge turns: a role (``reviewer`` or ``admin``), an argon2 password hash (none for
  people who log in through OIDC, who are matched by e-mail);
- ``trajectories``: one synthesized trajectory (the full :class:`~forge.data.schemas.SearchTrajectory`
  as JSON, plus the columns a queue filters on);
- ``turns``: one row per assistant turn with the critic's three labels;
- ``verdicts``: a reviewer's pass/fail on a turn, with the critic's three dimensions judged too (agreement is
  measured per dimension); ``version`` counts edits, so the dashboard can refuse a save based on a stale read
  (optimistic locking: ``record_verdict(..., expected_version=n)``);
- ``trajectory_verdicts``: a reviewer's accept/reject of a whole trajectory (a rejected one leaves the SFT pools);
- ``assignments``: which reviewer is asked to judge which trajectory (some trajectories get two: agreement);
- ``audit_events``: who did what, when (append-only).

The schema is created and upgraded by the Alembic migrations in ``forge/review/migrations`` (``open_store`` runs them);
a change here needs a new migration there (``tests/review/test_migrations.py`` compares the two).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint, true
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict] = {dict[str, Any]: JSON, list[str]: JSON}


class Reviewer(Base):
    __tablename__ = "reviewers"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(120), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    role: Mapped[str] = mapped_column(String(16), default="reviewer", server_default="reviewer")
    password_hash: Mapped[str | None] = mapped_column(String(255), nullable=True)
    email: Mapped[str | None] = mapped_column(String(255), nullable=True, unique=True, index=True)
    active: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


class TrajectoryRecord(Base):
    __tablename__ = "trajectories"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # SearchTrajectory.id (content hash)
    qa_id: Mapped[str] = mapped_column(String(64), index=True)
    agent: Mapped[str] = mapped_column(String(64), index=True)
    domain: Mapped[str] = mapped_column(String(32), index=True, default="deep_search", server_default="deep_search")
    question: Mapped[str] = mapped_column(Text)
    gold_answer: Mapped[str] = mapped_column(Text)
    final_answer: Mapped[str | None] = mapped_column(Text, nullable=True)
    correct: Mapped[bool] = mapped_column(Boolean)
    gold: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=dict)  # {"path": [entities], "relations": [labels]}
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    turns: Mapped[list[TurnRecord]] = relationship(back_populates="trajectory", order_by="TurnRecord.message_index",
                                                   cascade="all, delete-orphan")


class TurnRecord(Base):
    __tablename__ = "turns"
    __table_args__ = (UniqueConstraint("trajectory_id", "message_index"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trajectory_id: Mapped[str] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"), index=True)
    message_index: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)  # the assistant turn as shown to a reviewer
    observation: Mapped[str | None] = mapped_column(Text, nullable=True)
    critic_logical: Mapped[bool] = mapped_column(Boolean)
    critic_tool_call: Mapped[bool] = mapped_column(Boolean)
    critic_info_gain: Mapped[bool] = mapped_column(Boolean)
    critic_passed: Mapped[bool] = mapped_column(Boolean, index=True)
    critic_reasons: Mapped[list[str]] = mapped_column(JSON, default=list)
    critic_judge: Mapped[str] = mapped_column(String(16), default="rule")
    trajectory: Mapped[TrajectoryRecord] = relationship(back_populates="turns")
    verdicts: Mapped[list[Verdict]] = relationship(back_populates="turn", cascade="all, delete-orphan")


class _Judgement:
    """What every verdict row has: one reviewer's note, an edit counter for optimistic locking, timestamps."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    reviewer_id: Mapped[int] = mapped_column(ForeignKey("reviewers.id"), index=True)
    note: Mapped[str] = mapped_column(Text, default="")
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    @declared_attr
    def reviewer(cls) -> Mapped[Reviewer]:
        return relationship(Reviewer)


class Verdict(_Judgement, Base):
    __tablename__ = "verdicts"
    __table_args__ = (UniqueConstraint("turn_id", "reviewer_id"),)
    turn_id: Mapped[int] = mapped_column(ForeignKey("turns.id", ondelete="CASCADE"), index=True)
    passed: Mapped[bool] = mapped_column(Boolean)
    logical: Mapped[bool | None] = mapped_column(Boolean, nullable=True)  # None: not judged apart (= passed)
    tool_call: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    info_gain: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    turn: Mapped[TurnRecord] = relationship(back_populates="verdicts")

    def dimension(self, name: str) -> bool:
        value = getattr(self, name)
        return self.passed if value is None else value


class TrajectoryVerdict(_Judgement, Base):
    __tablename__ = "trajectory_verdicts"
    __table_args__ = (UniqueConstraint("trajectory_id", "reviewer_id"),)
    trajectory_id: Mapped[str] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"), index=True)
    accepted: Mapped[bool] = mapped_column(Boolean)


class Assignment(Base):
    __tablename__ = "assignments"
    __table_args__ = (UniqueConstraint("trajectory_id", "reviewer_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trajectory_id: Mapped[str] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"), index=True)
    reviewer_id: Mapped[int] = mapped_column(ForeignKey("reviewers.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AuditEvent(Base):
    __tablename__ = "audit_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(120))
    action: Mapped[str] = mapped_column(String(64))
    entity: Mapped[str] = mapped_column(String(64))
    entity_id: Mapped[str] = mapped_column(String(64))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
