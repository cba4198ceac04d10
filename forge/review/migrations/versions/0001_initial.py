"""The review store as the deep-search issue created it: reviewers, trajectories, turns, verdicts, audit events.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "reviewers",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(120), nullable=False, unique=True),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "trajectories",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("qa_id", sa.String(64), nullable=False, index=True),
        sa.Column("agent", sa.String(64), nullable=False, index=True),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("gold_answer", sa.Text(), nullable=False),
        sa.Column("final_answer", sa.Text(), nullable=True),
        sa.Column("correct", sa.Boolean(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "turns",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("trajectory_id", sa.String(64), sa.ForeignKey("trajectories.id", ondelete="CASCADE"),
                  nullable=False, index=True),
        sa.Column("message_index", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("observation", sa.Text(), nullable=True),
        sa.Column("critic_logical", sa.Boolean(), nullable=False),
        sa.Column("critic_tool_call", sa.Boolean(), nullable=False),
        sa.Column("critic_info_gain", sa.Boolean(), nullable=False),
        sa.Column("critic_passed", sa.Boolean(), nullable=False, index=True),
        sa.Column("critic_reasons", sa.JSON(), nullable=False),
        sa.Column("critic_judge", sa.String(16), nullable=False),
        sa.UniqueConstraint("trajectory_id", "message_index"),
    )
    op.create_table(
        "verdicts",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("turn_id", sa.Integer(), sa.ForeignKey("turns.id", ondelete="CASCADE"), nullable=False, index=True),
        sa.Column("reviewer_id", sa.Integer(), sa.ForeignKey("reviewers.id"), nullable=False, index=True),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.UniqueConstraint("turn_id", "reviewer_id"),
    )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("at", TS, nullable=False, index=True),
        sa.Column("actor", sa.String(120), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("entity", sa.String(64), nullable=False),
        sa.Column("entity_id", sa.String(64), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    for table in ("audit_events", "verdicts", "turns", "trajectories", "reviewers"):
        op.drop_table(table)
