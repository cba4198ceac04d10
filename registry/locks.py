"""One promoter at a time per registered model: a lock held across read champion → decide → move aliases.

    from registry.locks import promotion_lock
    with promotion_lock(tracking_uri, "forge-policy"):
        ...  # no other promote()/rollback() of this model on this store runs here

MLflow moves one alias atomically but offers nothing across several calls, and a promotion is several: read the
champion, record the decision, push the old champion onto the history tag, move ``previous-champion`` and
``champion``. Two promoters interleaving there would both replace the same champion and lose a history entry.

Where the lock lives depends on the store behind the URI:

- ``postgresql://…`` (also ``postgresql+driver://…``): a session-level ``pg_advisory_lock`` on a key derived from
  the model name, held on a connection of its own. Every promoter reaching that database takes turns, on any
  machine; a promoter that dies drops its connection and with it the lock.
- ``sqlite:///PATH``: ``fcntl.flock`` on ``PATH.promotion.lock`` beside the database file.
- a file store (``file:///DIR`` or a bare path): ``flock`` on ``DIR/.promotion.lock``.
- anything else (an MLflow server over HTTP): ``flock`` on a file in the temporary directory named after the URI,
  which serializes the promoters of this machine only. Promoters on several machines sharing a tracking server
  need the server's database behind them (promote against the ``postgresql://`` URI) to be serialized.

The file locks are per store, not per model (promotions are rare and take seconds); the kernel releases them when
the process exits, however it exits.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mlflow import MlflowClient

LOCK_TIMEOUT_S = 120.0  # a promotion takes seconds; waiting longer means a stuck promoter, worth an error
_POLL_S = 0.05


class PromotionLockTimeout(TimeoutError):
    """Another promoter held the lock for longer than the wait allowed."""


def registry_uri(client: MlflowClient) -> str:
    """The registry URI ``client`` talks to (MlflowClient keeps it only in a private attribute)."""
    import mlflow

    return getattr(client, "_registry_uri", None) or mlflow.get_registry_uri()


def advisory_key(model_name: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_lock``: the same model gives the same key in every process."""
    digest = hashlib.sha256(f"forge.promotion:{model_name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def lock_file_path(uri: str) -> Path:
    """The file a non-PostgreSQL store's promoters ``flock`` (see the module docstring)."""
    parts = urlsplit(uri)
    if parts.scheme == "sqlite" and uri.startswith("sqlite:///") and len(uri) > len("sqlite:///"):
        db = uri[len("sqlite:///") :].split("?", 1)[0]  # sqlite:////abs/x.db → /abs/x.db; sqlite:///x.db → x.db
        return Path(f"{Path(db).resolve()}.promotion.lock")
    if parts.scheme == "file" or (not parts.scheme and uri not in ("databricks", "databricks-uc", "uc")):
        store = Path(unquote(parts.path) if parts.scheme == "file" else uri)
        return store.resolve() / ".promotion.lock"
    tag = hashlib.sha256(uri.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"forge-promotion-{tag}.lock"


@contextmanager
def _flock(path: Path, timeout_s: float) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise PromotionLockTimeout(
                        f"{path}: another promotion held the lock for over {timeout_s:g} s"
                    ) from None
                time.sleep(_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def _advisory_lock(uri: str, model_name: str, timeout_s: float) -> Iterator[None]:
    import psycopg2
    from psycopg2 import errors

    scheme, rest = uri.split("://", 1)
    dsn = f"{scheme.split('+', 1)[0]}://{rest}"  # libpq knows postgresql://, not SQLAlchemy's +driver suffix
    conn = psycopg2.connect(dsn, connect_timeout=10)
    conn.autocommit = True  # a session-level lock: it must outlive no transaction and leak into none
    key = advisory_key(model_name)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT set_config('lock_timeout', %s, false)", (f"{int(timeout_s * 1000)}ms",))
            try:
                cur.execute("SELECT pg_advisory_lock(%s)", (key,))
            except errors.LockNotAvailable:
                raise PromotionLockTimeout(
                    f"{model_name}: another promotion held the PostgreSQL advisory lock {key} for over {timeout_s:g} s"
                ) from None
        try:
            yield
        finally:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s)", (key,))
    finally:
        conn.close()


@contextmanager
def promotion_lock(uri: str, model_name: str, *, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the promotion lock of ``model_name`` on the store at ``uri`` for the ``with`` block; waits up to
    ``timeout_s`` for another holder, then raises :class:`PromotionLockTimeout`. Not re-entrant."""
    if uri.startswith("postgresql"):
        with _advisory_lock(uri, model_name, timeout_s):
            yield
    else:
        with _flock(lock_file_path(uri), timeout_s):
            yield
