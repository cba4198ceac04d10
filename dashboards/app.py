"""Forge dashboard: review trajectories turn by turn, and see the data mixes, evaluations and the registry.

    forge review serve                 # = streamlit run dashboards/app.py --server.address 127.0.0.1 ...

Nothing but the login form is drawn until a user logs in (``forge review add-user`` creates one). Pages live in
``views/``; promotion and rollback are shown to admins only and re-checked server-side (``actions.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

# `streamlit run` puts dashboards/ on sys.path; the pages import `dashboards.*` from this same checkout.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import streamlit as st

from dashboards.login import login_gate, logout

# A file of ours, not a ":material/…" icon: Streamlit fetches those favicons from fonts.gstatic.com.
st.set_page_config(page_title="Forge", page_icon=str(Path(__file__).with_name("icon.png")), layout="wide")

user = login_gate()
if user is None:
    st.stop()

navigation = st.navigation(
    {
        "Review": [
            st.Page("views/review.py", title="Review", icon=":material/rate_review:", default=True),
            st.Page("views/agreement.py", title="Agreement", icon=":material/handshake:"),
        ],
        "Training": [
            st.Page("views/overview.py", title="Latest run", icon=":material/play_circle:"),
            st.Page("views/mixes.py", title="Data mixes", icon=":material/pie_chart:"),
            st.Page("views/evaluations.py", title="Evaluations", icon=":material/monitoring:"),
            st.Page("views/registry.py", title="Registry", icon=":material/inventory_2:"),
        ],
    }
)
with st.sidebar:
    st.text(f"{user.name} · {user.role}")
    st.button("Log out", on_click=logout, icon=":material/logout:")
navigation.run()
