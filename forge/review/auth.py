"""Reviewers' accounts: argon2-hashed passwords, roles (``reviewer``, ``admin``), OIDC users matched by e-mail.

    create_user(s, "alice", password="…", role="admin")
    who = authenticate(s, "alice", "…")          # Reviewer, or None (unknown name, wrong password, inactive)

Every attempt is audited; a failed one does not say whether the name exists, and costs the same time either way.
"""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from forge.review.models import Reviewer
from forge.review.repository import audit

ROLES = ("reviewer", "admin")
MIN_PASSWORD_LENGTH = 8
_hasher = PasswordHasher()
_DUMMY_HASH = _hasher.hash("forge: a password nobody has")  # verified against when the name is unknown


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


def authenticate(session: Session, name: str, password: str) -> Reviewer | None:
    """The reviewer when ``password`` is theirs, else None."""
    user = session.scalar(select(Reviewer).where(Reviewer.name == name.strip()))
    stored = user.password_hash if user is not None and user.active and user.password_hash else _DUMMY_HASH
    try:
        ok = _hasher.verify(stored, password) and stored is not _DUMMY_HASH
    except (VerificationError, InvalidHashError):
        ok = False
    if ok and _hasher.check_needs_rehash(stored):
        user.password_hash = _hasher.hash(password)
    audit(session, name[:120], "login" if ok else "login-failed", "reviewer", str(user.id) if user else "-")
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
