"""Reviewers' accounts: argon2-hashed passwords, roles (``reviewer``, ``admin``), OIDC users matched by e-mail.

    create_user(s, "alice", password="…", role="admin")
    who = authenticate(s, "alice", "…", client="10.0.0.7")   # Reviewer, or None (unknown name, wrong password,
                                                            # inactive); LoginThrottled while guessing is slowed

Every attempt is audited; a failed one does not say whether the name exists, and costs the same time either way.
Password guessing is slowed, per name and per client, from the audited failures of the last
``THROTTLE_WINDOW`` (no state of its own: every dashboard process sees the same store): after ``FREE_FAILURES``
failures an attempt must wait 1, 2, 4 … seconds after the last one, and after ``LOCK_AFTER`` failures the name (or
client) is locked for ``LOCK_SECONDS``. A throttled attempt is refused without looking at the password and audited
as ``login-throttled``; a successful login clears the name's count.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from forge.review.models import AuditEvent, Reviewer
from forge.review.repository import audit

ROLES = ("reviewer", "admin")
MIN_PASSWORD_LENGTH = 8
_hasher = PasswordHasher()
_DUMMY_HASH = _hasher.hash("forge: a password nobody has")  # verified against when the name is unknown


FREE_FAILURES = 3  # failed attempts before each next one has to wait
LOCK_AFTER = 10  # failed attempts that lock the name or the client
LOCK_SECONDS = 15 * 60
THROTTLE_WINDOW = timedelta(minutes=15)


class LoginThrottled(PermissionError):
    """Too many failed logins for this name or from this client: try again after ``retry_after`` seconds."""

    def __init__(self, retry_after: float, locked: bool) -> None:
        self.retry_after, self.locked = retry_after, locked
        what = "locked after too many failed logins" if locked else "too many failed logins"
        super().__init__(f"{what}: try again in {max(1, round(retry_after))} s")


class UserError(ValueError):
    """A user cannot be created or changed as asked (name taken, weak password, unknown role)."""


def _check(role: str, password: str | None) -> None:
    if role not in ROLES:
        raise UserError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    if password is not None and len(password) < MIN_PASSWORD_LENGTH:
        raise UserError(f"password too short: at least {MIN_PASSWORD_LENGTH} characters")


def create_user(session: Session, name: str, *, password: str | None = None, role: str = "reviewer",
                email: str | None = None, replace: bool = False, actor: str = "admin") -> Reviewer:
    """A new login. A name that judged before logins existed (a reviewer row without a password) is taken over;
    an existing login is changed only with ``replace=True``."""
    name = name.strip()
    if not name:
        raise UserError("a user needs a name")
    _check(role, password)
    user = session.scalar(select(Reviewer).where(Reviewer.name == name))
    if user is not None and user.password_hash is not None and not replace:
        raise UserError(f"user {name!r} exists (use --replace to change the password or role)")
    if user is None:
        user = Reviewer(name=name)
        session.add(user)
    user.role, user.email, user.active = role, email or user.email, True
    if password is not None:
        user.password_hash = _hasher.hash(password)
    session.flush()
    audit(session, actor, "create-user" if not replace else "update-user", "reviewer", str(user.id), role=role)
    return user


def _failures(session: Session, name: str, client: str | None, now: datetime) -> list[datetime]:
    """Times of the failed logins that count against ``name`` or ``client``: the window's failures for the name
    since its last success, and those from the client; newest last."""
    since = now - THROTTLE_WINDOW
    events = session.execute(
        select(AuditEvent.at, AuditEvent.action, AuditEvent.actor, AuditEvent.detail)
        .where(AuditEvent.at >= since, AuditEvent.action.in_(("login", "login-failed")))
        .order_by(AuditEvent.at)
    ).all()
    by_name: list[datetime] = []
    by_client: list[datetime] = []
    actor_name = name[:120]  # as audited
    for at, action, actor, detail in events:
        at = at if at.tzinfo else at.replace(tzinfo=UTC)  # SQLite hands back naive UTC times
        if action == "login":
            if actor == actor_name:
                by_name.clear()
            continue
        if actor == actor_name:
            by_name.append(at)
        if client and (detail or {}).get("client") == client:
            by_client.append(at)
    return max(by_name, by_client, key=len)


def _wait(failures: list[datetime], now: datetime) -> tuple[float, bool]:
    """Seconds still to wait before the next attempt (0: go ahead), and whether it is a lock."""
    if len(failures) < FREE_FAILURES:
        return 0.0, False
    locked = len(failures) >= LOCK_AFTER
    delay = LOCK_SECONDS if locked else 2 ** (len(failures) - FREE_FAILURES)
    return max(0.0, (failures[-1] + timedelta(seconds=delay) - now).total_seconds()), locked


def authenticate(
    session: Session, name: str, password: str, *, client: str | None = None, now: datetime | None = None
) -> Reviewer | None:
    """The reviewer when ``password`` is theirs, else None; :class:`LoginThrottled` while too many recent failures
    for ``name`` or from ``client`` (the caller's address) ask it to wait (see the module docstring)."""
    name = name.strip()
    now = now or datetime.now(UTC)
    wait, locked = _wait(_failures(session, name, client, now), now)
    if wait > 0:
        audit(session, name[:120], "login-throttled", "reviewer", "-", client=client, wait_s=round(wait, 1),
              locked=locked)
        session.flush()
        raise LoginThrottled(wait, locked)
    user = session.scalar(select(Reviewer).where(Reviewer.name == name))
    stored = user.password_hash if user is not None and user.active and user.password_hash else _DUMMY_HASH
    try:
        ok = _hasher.verify(stored, password) and stored is not _DUMMY_HASH
    except (VerificationError, InvalidHashError):
        ok = False
    if ok and _hasher.check_needs_rehash(stored):
        user.password_hash = _hasher.hash(password)
    session.add(AuditEvent(at=now, actor=name[:120], action="login" if ok else "login-failed", entity="reviewer",
                           entity_id=str(user.id) if user else "-", detail={"client": client}))
    session.flush()
    return user if ok else None


def user_for_oidc(session: Session, email: str, name: str | None = None) -> Reviewer:
    """The reviewer behind an OIDC identity (``st.user``), matched by e-mail; created as a reviewer on first login.
    An admin makes them admin with ``forge review add-user NAME --role admin --replace``."""
    email = email.strip().lower()
    if not email:
        raise UserError("the identity provider gave no e-mail address")
    user = session.scalar(select(Reviewer).where(Reviewer.email == email))
    if user is None:
        base = (name or email.split("@")[0]).strip() or email
        taken = session.scalar(select(Reviewer).where(Reviewer.name == base)) is not None
        user = Reviewer(name=email if taken else base, email=email, role="reviewer")
        session.add(user)
        session.flush()
        audit(session, "oidc", "create-user", "reviewer", str(user.id), email=email)
    audit(session, user.name, "login", "reviewer", str(user.id), via="oidc")
    session.flush()
    return user


def require_admin(user: Reviewer | None) -> Reviewer:
    """``user`` when an admin is acting, else :class:`PermissionError` (every admin action calls this itself)."""
    if user is None or not user.active or user.role != "admin":
        raise PermissionError(f"{getattr(user, 'name', 'nobody')} is not an admin")
    return user
