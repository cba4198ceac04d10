"""The Alembic migrations build exactly the schema the models declare (SQLite and PostgreSQL), upgrade a store made
before migrations existed without losing its rows, and go down and up again."""

from __future__ import annotations

import json

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.orm import Session

from forge.review import effective_verdicts, migrate, open_store
from forge.review.models import Base, TrajectoryRecord
from forge.review.repository import downgrade


def _diff(engine, schema=None):
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"include_schemas": False, "version_table_schema": schema})
        if schema:
            conn.execute(text(f'SET search_path TO "{schema}"'))
        diff = compare_metadata(ctx, Base.metadata)
    # In a named schema the version table shows up as "not in the models": it is Alembic's own, not a drift.
    return [d for d in diff if not (d[0] == "remove_table" and d[1].name == "alembic_version")]


def test_migrations_match_the_models(store):
    url, schema = store
    engine = open_store(url, schema=schema)
    assert _diff(engine, schema) == []
    engine.dispose()


def test_a_store_from_before_migrations_is_upgraded_in_place(tmp_path, make_traj):
    db = tmp_path / "review.db"
    old = create_engine(f"sqlite:///{db}")
    migrate(old, revision="0001")
    traj = make_traj("old", python=True)
    with old.begin() as conn:
        conn.execute(text("DROP TABLE alembic_version"))  # what the first store's create_all left: tables, no version
        conn.execute(text("INSERT INTO reviewers (id, name, created_at) VALUES (1, 'ann', '2026-11-01')"))
        conn.execute(text("INSERT INTO trajectories VALUES (:id, 'qa', 'planner', 'q?', 'Hans Zimmer', 'Hans Zimmer', "
                          "1, :payload, '2026-11-01')"), {"id": traj.id, "payload": json.dumps(traj.model_dump(mode="json"))})
        conn.execute(text("INSERT INTO turns VALUES (7, :id, 3, 'Open it.', NULL, 1, 1, 0, 0, '[\"no gain\"]', 'rule')"),
                     {"id": traj.id})
        conn.execute(text("INSERT INTO verdicts VALUES (1, 7, 1, 1, 'fine', 1, '2026-11-02', '2026-11-02')"))
    old.dispose()

    engine = open_store(f"sqlite:///{db}")
    with Session(engine) as s:
        record = s.get(TrajectoryRecord, traj.id)
        assert record.domain == "tool_use"  # back-filled from the payload (it runs python)
        [verdict] = effective_verdicts(s, traj.id)
        assert verdict.judge == "human" and verdict.passed  # ann's old pass/fail stands for all three dimensions
        assert s.execute(text("SELECT role FROM reviewers WHERE name = 'ann'")).scalar() == "reviewer"
    assert _diff(engine) == []
    engine.dispose()


def test_down_and_up_again(tmp_path):
    url = f"sqlite:///{tmp_path / 'review.db'}"
    engine = open_store(url)
    downgrade(engine, "base")
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    engine.dispose()
    engine = open_store(url)
    assert {"trajectory_verdicts", "assignments", "verdicts"} <= set(inspect(engine).get_table_names())
    engine.dispose()
