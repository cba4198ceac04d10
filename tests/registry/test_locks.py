"""The promotion lock: where it lives for each kind of store, and that a second holder waits.

.venv/bin/pytest tests/registry/test_locks.py -q
"""

import tempfile
from pathlib import Path

import pytest

from registry.locks import PromotionLockTimeout, advisory_key, lock_file_path, promotion_lock


@pytest.mark.parametrize(
    "uri, expected",
    [
        # the workspace's SQLite store: beside the database file
        ("sqlite:////srv/forge/mlflow.db", "/srv/forge/mlflow.db.promotion.lock"),
        # query parameters are not part of the file name
        ("sqlite:////srv/forge/mlflow.db?timeout=5", "/srv/forge/mlflow.db.promotion.lock"),
        # a file store: inside its folder
        ("file:///srv/mlruns", "/srv/mlruns/.promotion.lock"),
        ("/srv/mlruns", "/srv/mlruns/.promotion.lock"),
    ],
)
def test_a_local_store_is_locked_beside_itself(uri, expected):
    assert lock_file_path(uri) == Path(expected)


@pytest.mark.parametrize("uri", ["http://mlflow.internal:5000", "databricks", "sqlite://"])
def test_a_remote_or_in_memory_store_is_locked_in_the_temporary_directory(uri):
    path = lock_file_path(uri)
    assert path.parent == Path(tempfile.gettempdir()) and path.name.startswith("forge-promotion-")
    assert lock_file_path(uri) == path != lock_file_path(uri + "/other")  # one file per URI, the same every time


def test_the_advisory_key_is_stable_per_model():
    assert advisory_key("forge-policy") == advisory_key("forge-policy") != advisory_key("forge-rm")
    assert -(2**63) <= advisory_key("forge-policy") < 2**63  # a PostgreSQL bigint


def test_a_second_holder_waits_then_times_out(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    waits = pytest.raises(PromotionLockTimeout, match="another promotion")
    with promotion_lock(uri, "forge-policy"), waits, promotion_lock(uri, "forge-rm", timeout_s=0.1):
        pass  # a file lock is the whole store's: another model waits too
    with promotion_lock(uri, "forge-policy", timeout_s=0.1):  # released on exit
        pass


def test_the_postgresql_lock_is_per_model(pg_schema):  # pg_schema: skipped, saying why, where no server answers
    uri = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"
    with promotion_lock(uri, "forge-policy"):
        with promotion_lock(uri, "forge-rm", timeout_s=0.1):  # another model promotes meanwhile
            pass
        waits = pytest.raises(PromotionLockTimeout, match="advisory lock")
        with waits, promotion_lock(uri, "forge-policy", timeout_s=0.1):
            pass
    with promotion_lock(uri, "forge-policy", timeout_s=0.1):
        pass
