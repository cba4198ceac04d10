"""Alembic environment: always called by :func:`forge.review.migrate` with an open connection (never from a URL
in alembic.ini), so the same code upgrades SQLite files and PostgreSQL schemas."""

from alembic import context

from forge.review.models import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table_schema=context.config.attributes.get("schema"),
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
)
with context.begin_transaction():
    context.run_migrations()
