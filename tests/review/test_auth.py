"""Logins: argon2 hashes (never the password), right/wrong/unknown/inactive, audited attempts, roles, OIDC users,
and the ``forge review add-user`` command."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from sqlalchemy import select

from forge.review import (
    UserError,
    authenticate,
    create_user,
    get_reviewer,
    open_store,
    require_admin,
    session_scope,
    user_for_oidc,
)
from forge.review.models import AuditEvent, Reviewer


def test_passwords_are_hashed_and_checked(engine):
    with session_scope(engine) as s:
        create_user(s, "alice", password="correct horse battery", role="admin")
        create_user(s, "bob", password="hunter2hunter2")
    with session_scope(engine) as s:
        stored = s.scalar(select(Reviewer.password_hash).where(Reviewer.name == "alice"))
        assert stored.startswith("$argon2id$") and "correct horse" not in stored
        alice = authenticate(s, "alice", "correct horse battery")
        assert alice is not None and alice.is_admin
        assert authenticate(s, "alice", "correct horse batter") is None
        assert authenticate(s, "mallory", "correct horse battery") is None
        bob = authenticate(s, "bob", "hunter2hunter2")
        assert bob is not None and not bob.is_admin
        bob.active = False
    with session_scope(engine) as s:
        assert authenticate(s, "bob", "hunter2hunter2") is None  # deactivated
        actions = [(e.actor, e.action) for e in s.scalars(select(AuditEvent).order_by(AuditEvent.id))]
        assert actions.count(("alice", "login")) == 1 and actions.count(("alice", "login-failed")) == 1
        assert ("mallory", "login-failed") in actions and ("bob", "login-failed") in actions


def test_user_rules(engine):
    with session_scope(engine) as s:
        get_reviewer(s, "carol")  # judged before logins existed: no password yet
        create_user(s, "carol", password="a long passphrase")  # takes the row over
        with pytest.raises(UserError, match="exists"):
            create_user(s, "carol", password="another passphrase")
        create_user(s, "carol", password="another passphrase", role="admin", replace=True)
        with pytest.raises(UserError, match="too short"):
            create_user(s, "dave", password="short")
        with pytest.raises(UserError, match="unknown role"):
            create_user(s, "dave", password="long enough pw", role="root")
        assert authenticate(s, "carol", "another passphrase").is_admin
        assert s.scalar(select(Reviewer).where(Reviewer.name == "dave")) is None


def test_only_admins_pass_the_admin_check(engine):
    with session_scope(engine) as s:
        admin = create_user(s, "root", password="root password!", role="admin")
        reviewer = create_user(s, "eve", password="eve password!")
        assert require_admin(admin) is admin
        for who in (reviewer, None):
            with pytest.raises(PermissionError):
                require_admin(who)


def test_oidc_users_are_matched_by_email(engine):
    with session_scope(engine) as s:
        create_user(s, "frank", password="frank password")  # a password user with the same name
        first = user_for_oidc(s, "Frank@Example.org", name="frank")
        assert first.name == "frank@example.org" and first.role == "reviewer"  # name taken → e-mail as name
        again = user_for_oidc(s, "frank@example.org")
        assert again.id == first.id
        with pytest.raises(UserError):
            user_for_oidc(s, "  ")


def test_add_user_command(tmp_path):
    env = {**os.environ, "FORGE_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    env.pop("FORGE_REVIEW_DB_URL", None)
    cmd = [sys.executable, "-m", "forge.cli", "review", "add-user", "grace", "--role", "admin", "--password-stdin"]
    def add_grace():
        return subprocess.run(cmd, input="grace's password\n", env=env, capture_output=True, text=True, timeout=120,
                              check=False)

    done = add_grace()
    assert done.returncode == 0, done.stderr
    again = add_grace()
    assert again.returncode == 2 and "exists" in again.stdout
    engine = open_store(home=tmp_path)
    with session_scope(engine) as s:
        assert authenticate(s, "grace", "grace's password").is_admin
    engine.dispose()


def _attempt(engine, name, password, at, client=None):
    """One login at time ``at``: the reviewer, None, or the LoginThrottled it raised (its audit row committed)."""
    from forge.review import LoginThrottled

    with session_scope(engine) as s:
        try:
            user = authenticate(s, name, password, client=client, now=at)
            return user.name if user else None
        except LoginThrottled as err:
            return err


def test_password_guessing_slows_down_then_locks(engine):
    from datetime import UTC, datetime, timedelta

    from forge.review import LoginThrottled
    from forge.review.auth import FREE_FAILURES, LOCK_AFTER, LOCK_SECONDS

    with session_scope(engine) as s:
        create_user(s, "erin", password="erin's long password")
    t0 = datetime.now(UTC)
    at = [t0 + timedelta(seconds=i) for i in range(FREE_FAILURES)]
    assert [_attempt(engine, "erin", "guess", t) for t in at] == [None] * FREE_FAILURES  # free failures
    slowed = _attempt(engine, "erin", "erin's long password", at[-1] + timedelta(seconds=0.5))
    assert isinstance(slowed, LoginThrottled) and not slowed.locked  # even the right password waits its turn
    t = at[-1] + timedelta(seconds=1.5)  # the 1 s wait is over
    assert _attempt(engine, "erin", "erin's long password", t) == "erin"  # success clears the count
    for i in range(LOCK_AFTER):  # guess at the pace the back-off allows: 1, 2, 4 ... s apart
        t += timedelta(seconds=2 ** max(0, i - FREE_FAILURES + 1) + 0.1)
        assert _attempt(engine, "erin", "guess", t) is None
    locked = _attempt(engine, "erin", "erin's long password", t + timedelta(seconds=600))
    assert isinstance(locked, LoginThrottled) and locked.locked and locked.retry_after > 200
    assert _attempt(engine, "erin", "erin's long password", t + timedelta(seconds=LOCK_SECONDS + 1)) == "erin"
    with session_scope(engine) as s:
        actions = [e.action for e in s.query(AuditEvent).filter(AuditEvent.actor == "erin")]
    assert actions.count("login-throttled") == 2 and actions.count("login-failed") == FREE_FAILURES + LOCK_AFTER


def test_guessing_from_one_client_is_slowed_across_names(engine):
    from datetime import UTC, datetime, timedelta

    from forge.review import LoginThrottled
    from forge.review.auth import FREE_FAILURES

    with session_scope(engine) as s:
        create_user(s, "frank", password="frank's long password")
    t0 = datetime.now(UTC)
    for i in range(FREE_FAILURES):  # a different name each time, one address
        assert _attempt(engine, f"user{i}", "guess", t0 + timedelta(seconds=i), client="10.0.0.9") is None
    later = t0 + timedelta(seconds=FREE_FAILURES - 0.5)
    assert isinstance(_attempt(engine, "frank", "frank's long password", later, client="10.0.0.9"), LoginThrottled)
    assert _attempt(engine, "frank", "frank's long password", later, client="10.0.0.1") == "frank"  # others: fine
