"""What every page shares: the workspace, the review store's engine, the signed-in user, one-shot messages.

The signed-in user lives in Streamlit's server-side session state (never in the browser); the role kept there
only decides what a page *shows*. Every action that changes something re-reads the role from the store
(:mod:`dashboards.actions`), so a reviewer who crafts a request still cannot act as an admin.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
from sqlalchemy import Engine

from forge.workspace import Workspace, configure_environment

USER_KEY = "forge_user"
FLASH_KEY = "forge_flash"


@dataclass(frozen=True)
class SignedIn:
    name: str
    role: str  # "reviewer" | "admin"
    via: str = "password"  # "password" | "oidc"

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def workspace() -> Workspace:
    return configure_environment()


@st.cache_resource(show_spinner=False)
def _engine(url: str | None, schema: str | None, home: str) -> Engine:
    from forge.review.repository import open_workspace_store

    return open_workspace_store(home=Path(home))


def engine() -> Engine:
    """The review store ``forge review add-user`` writes to: ``$FORGE_REVIEW_DB_URL`` (+ ``$FORGE_REVIEW_DB_SCHEMA``),
    else SQLite under ``$FORGE_HOME/review/`` (one engine per process and store; migrated to head on first use)."""
    return _engine(os.environ.get("FORGE_REVIEW_DB_URL"), os.environ.get("FORGE_REVIEW_DB_SCHEMA"),
                   str(workspace().home))


@st.cache_resource(show_spinner=False)
def _mlflow_client(home: str):
    from registry.tracking import init_mlflow

    return init_mlflow(workspace())


def mlflow_client():
    """The workspace's MLflow client (tracking + registry), the same store the CLI uses."""
    return _mlflow_client(str(workspace().home))


def current_user() -> SignedIn | None:
    return st.session_state.get(USER_KEY)


def sign_in(user: SignedIn) -> None:
    st.session_state[USER_KEY] = user


def sign_out() -> None:
    for key in list(st.session_state.keys()):
        del st.session_state[key]


def require_user() -> SignedIn:
    """The signed-in user; a page run without one (it cannot happen through ``app.py``) stops here."""
    user = current_user()
    if user is None:
        st.error("Log in first.")
        st.stop()
    return user


def flash(kind: str, text: str) -> None:
    """A message shown once, on the next run (callbacks run before the page is drawn)."""
    st.session_state.setdefault(FLASH_KEY, []).append((kind, text))


def show_flashes() -> None:
    for kind, text in st.session_state.pop(FLASH_KEY, []):
        {"success": st.success, "warning": st.warning, "error": st.error}.get(kind, st.info)(text)
