"""Login and roles, per-dimension human verdicts, trajectory verdicts, assignments; the trajectory's domain and
gold path.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("reviewers") as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=False, server_default="reviewer"))
        batch.add_column(sa.Column("password_hash", sa.String(255), nullable=True))
        batch.add_column(sa.Column("email", sa.String(255), nullable=True))
        batch.add_column(sa.Column("active", sa.Boolean(), nullable=False, server_default=sa.true()))
        batch.create_index("ix_reviewers_email", ["email"], unique=True)
    with op.batch_alter_table("trajectories") as batch:
        batch.add_column(sa.Column("domain", sa.String(32), nullable=False, server_default="deep_search"))
        batch.add_column(sa.Column("gold", sa.JSON(), nullable=True))
        batch.create_index("ix_trajectories_domain", ["domain"])
    _backfill_domains()
    with op.batch_alter_table("verdicts") as batch:
        for name in ("logical", "tool_call", "info_gain"):
            batch.add_column(sa.Column(name, sa.Boolean(), nullable=True))
    for table in ("trajectory_verdicts", "assignments"):
        columns = [
            sa.Column("id", sa.Integer(), primary_key=True),
            sa.Column("trajectory_id", sa.String(64), sa.ForeignKey("trajectories.id", ondelete="CASCADE"),
                      nullable=False, index=True),
            sa.Column("reviewer_id", sa.Integer(), sa.ForeignKey("reviewers.id"), nullable=False, index=True),
        ]
        if table == "trajectory_verdicts":
            columns += [sa.Column("accepted", sa.Boolean(), nullable=False),
                        sa.Column("note", sa.Text(), nullable=False),
                        sa.Column("version", sa.Integer(), nullable=False),
                        sa.Column("created_at", TS, nullable=False),
                        sa.Column("updated_at", TS, nullable=False)]
        else:
            columns += [sa.Column("created_at", TS, nullable=False)]
        op.create_table(table, *columns, sa.UniqueConstraint("trajectory_id", "reviewer_id"))


def _backfill_domains() -> None:
    """Trajectories that call ``python`` are tool-use data (``forge.data.schemas.SearchTrajectory.domain``)."""
    trajectories = sa.table("trajectories", sa.column("id", sa.String), sa.column("payload", sa.JSON),
                            sa.column("domain", sa.String))
    conn = op.get_bind()
    for tid, payload in conn.execute(sa.select(trajectories.c.id, trajectories.c.payload)).all():
        calls = [c.get("name") for m in (payload or {}).get("messages", []) for c in (m.get("tool_calls") or [])]
        if "python" in calls:
            conn.execute(trajectories.update().where(trajectories.c.id == tid).values(domain="tool_use"))


def downgrade() -> None:
    op.drop_table("assignments")
    op.drop_table("trajectory_verdicts")
    with op.batch_alter_table("verdicts") as batch:
        for name in ("info_gain", "tool_call", "logical"):
            batch.drop_column(name)
    with op.batch_alter_table("trajectories") as batch:
        batch.drop_index("ix_trajectories_domain")
        batch.drop_column("gold")
        batch.drop_column("domain")
    with op.batch_alter_table("reviewers") as batch:
        batch.drop_index("ix_reviewers_email")
        for name in ("active", "email", "password_hash", "role"):
            batch.drop_column(name)
