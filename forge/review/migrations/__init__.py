"""Alembic migrations of the review store; :func:`forge.review.repository.open_store` runs them to head."""
