"""Fixtures of the registry tests: the MLflow store each runs against.

The session's store is the scratch workspace's SQLite database (tests/conftest.py).
"""

import uuid

import pytest

from registry.tracking import init_mlflow


@pytest.fixture(scope="module")
def client(workspace):
    return init_mlflow(workspace)


@pytest.fixture
def model_name():
    return f"test-policy-{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, workspace):
    """The registry on the embedded SQLite store and on PostgreSQL (a team deployment's backend), each in turn.

    PostgreSQL gets a fresh database per test on 127.0.0.1:5432; the test is skipped, saying so, when no server
    answers there (a laptop without one)."""
    if request.param == "sqlite":
        yield init_mlflow(workspace)
        return
    import psycopg2

    try:
        admin = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="test", connect_timeout=3)
    except psycopg2.OperationalError as err:
        pytest.skip(f"no PostgreSQL server answers on 127.0.0.1:5432: {err}".strip())
    admin.autocommit = True
    name = f"forge_mlflow_{uuid.uuid4().hex[:8]}"
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    try:
        yield init_mlflow(workspace, tracking_uri=f"postgresql://postgres@127.0.0.1:5432/{name}")
    finally:
        init_mlflow(workspace)  # back to the session's SQLite store for the other tests
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()
