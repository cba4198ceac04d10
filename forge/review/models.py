"""SQLAlchemy 2 typed models of the review store (SQLite by default, PostgreSQL by URL).

- ``reviewers``: people who judge turns;
- ``trajectories``: one synthesized trajectory (the full :class:`~forge.search.trajectory.SearchTrajectory`
  as JSON, plus the columns a queue filters on);
- ``turns``: one row per assistant turn with the critic's three labels;
- ``verdicts``: a reviewer's pass/fail on a turn; ``version`` counts edits, so the dashboard can refuse a save
  based on a stale read (optimistic locking: ``record_verdict(..., expected_version=n)``);
- ``audit_events``: who did what, when (append-only).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict] = {dict[str, Any]: JSON, list[str]: JSON}


class Reviewer(Base):
    __tablename__ = "reviewers"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(120), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TrajectoryRecord(Base):
    __tablename__ = "trajectories"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # SearchTrajectory.id (content hash)
    qa_id: Mapped[str] = mapped_column(String(64), index=True)
    agent: Mapped[str] = mapped_column(String(64), index=True)
    question: Mapped[str] = mapped_column(Text)
    gold_answer: Mapped[str] = mapped_column(Text)
    final_answer: Mapped[str | None] = mapped_column(Text, nullable=True)
    correct: Mapped[bool] = mapped_column(Boolean)
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


class Verdict(Base):
    __tablename__ = "verdicts"
    __table_args__ = (UniqueConstraint("turn_id", "reviewer_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    turn_id: Mapped[int] = mapped_column(ForeignKey("turns.id", ondelete="CASCADE"), index=True)
    reviewer_id: Mapped[int] = mapped_column(ForeignKey("reviewers.id"), index=True)
    passed: Mapped[bool] = mapped_column(Boolean)
    note: Mapped[str] = mapped_column(Text, default="")
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    turn: Mapped[TurnRecord] = relationship(back_populates="verdicts")
    reviewer: Mapped[Reviewer] = relationship()


class AuditEvent(Base):
    __tablename__ = "audit_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(120))
    action: Mapped[str] = mapped_column(String(64))
    entity: Mapped[str] = mapped_column(String(64))
    entity_id: Mapped[str] = mapped_column(String(64))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
