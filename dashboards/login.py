"""The login gate: username + password against the review store (argon2), or SSO through ``st.login`` when
``.streamlit/secrets.toml`` has an ``[auth]`` section. Until one succeeds no page is drawn."""

from __future__ import annotations

import streamlit as st

from dashboards.session import SignedIn, current_user, engine, sign_in, sign_out

FAILED = "Unknown user or wrong password."


def oidc_configured() -> bool:
    """True when Streamlit's secrets hold an ``[auth]`` section (no secrets file is not an error)."""
    try:
        return "auth" in st.secrets
    except Exception:  # noqa: BLE001 - no (or an unreadable) secrets file means: no SSO; the password form works
        return False


def _oidc_user() -> SignedIn | None:
    if not oidc_configured() or not st.user.get("is_logged_in", False):
        return None
    from forge.review import session_scope, user_for_oidc

    email = st.user.get("email")
    if not email:
        st.error("The identity provider sent no e-mail address; ask an admin.")
        return None
    with session_scope(engine()) as s:
        reviewer = user_for_oidc(s, email, st.user.get("name"))
        return SignedIn(reviewer.name, reviewer.role, via="oidc")


def _password_login() -> None:
    from forge.review import LoginThrottled, authenticate, session_scope

    name = st.session_state.get("login_name", "").strip()
    password = st.session_state.get("login_password", "")
    st.session_state["login_password"] = ""  # never kept past this attempt
    ip = getattr(st.context, "ip_address", None)  # the browser's address; not a string under AppTest
    client = ip if isinstance(ip, str) else None
    signed_in = None
    with session_scope(engine()) as s:  # caught inside, so the throttled attempt's audit row is committed
        try:
            reviewer = authenticate(s, name, password, client=client) if name and password else None
        except LoginThrottled as err:
            st.session_state["login_failed"] = str(err).capitalize() + "."
            return
        if reviewer is not None:
            signed_in = SignedIn(reviewer.name, reviewer.role)
    if signed_in is not None:
        sign_in(signed_in)
        return
    st.session_state["login_failed"] = FAILED


def login_gate() -> SignedIn | None:
    """The signed-in user, or None after drawing the login form (the caller stops the run)."""
    user = current_user()
    if user is not None:
        return user
    user = _oidc_user()
    if user is not None:
        sign_in(user)
        return user
    st.title("Forge")
    st.caption("Log in to review trajectories and see the training dashboards.")
    with st.form("login", enter_to_submit=True):
        st.text_input("Username", key="login_name", autocomplete="username")
        st.text_input("Password", key="login_password", type="password", autocomplete="current-password")
        st.form_submit_button("Log in", on_click=_password_login, type="primary")
    failed = st.session_state.pop("login_failed", None)
    if failed:
        st.error(failed)
    if oidc_configured():
        st.button("Log in with SSO", on_click=st.login)
    return None


def logout() -> None:
    user = current_user()
    sign_out()
    if user is not None and user.via == "oidc":
        st.logout()
