"""Agreement: how often reviewers agree with the critic, per dimension, and with each other (Cohen's kappa on
turns judged by two or more). Admins assign trajectories with an overlap so the second number can be measured."""

import math

import pandas as pd
import streamlit as st

from dashboards.actions import NotAllowed, assign_overlap_as
from dashboards.charts import grouped_bars
from dashboards.session import engine, flash, require_user, show_flashes
from forge.review import critic_agreement, human_agreement, human_pair_agreement, reviewer_names, session_scope

user = require_user()
st.title("Agreement")
show_flashes()


def _fmt(value: float | None, pattern: str = "{:.3f}") -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else pattern.format(value)


with session_scope(engine()) as s:
    critic = critic_agreement(s)
    humans = human_agreement(s)
    pairs = human_pair_agreement(s)
    people = [r.name for r in reviewer_names(s)]

st.header("Critic vs human")
st.caption("Each human verdict on a turn against the critic's label on that turn; `passed` is the overall verdict.")
frame = pd.DataFrame([{"dimension": dim, "n": stat.n, "agreement": stat.agreement, "kappa": stat.kappa}
                      for dim, stat in critic.items()]).set_index("dimension")
st.dataframe(frame.style.format({"agreement": "{:.1%}", "kappa": "{:.3f}"}, na_rep="n/a"))
if frame["n"].sum() > 0:
    grouped_bars(frame[["agreement", "kappa"]].astype(float), "dimension", ["agreement", "kappa"],
                 y_title="agreement share / Cohen's kappa")
else:
    st.info("No human verdicts yet.")

st.header("Human vs human")
a, b, c = st.columns(3)
a.metric("Turns judged by ≥ 2 reviewers", humans.n)
b.metric("Raw agreement", _fmt(humans.agreement, "{:.1%}"))
c.metric("Cohen's kappa", _fmt(humans.kappa))
if pairs:
    per_pair = pd.DataFrame([{"reviewer A": p[0], "reviewer B": p[1], "n": stat.n, "agreement": stat.agreement,
                              "kappa": stat.kappa} for p, stat in pairs.items()])
    st.dataframe(per_pair.style.format({"agreement": "{:.1%}", "kappa": "{:.3f}"}, na_rep="n/a"), hide_index=True)


def _assign() -> None:
    chosen = st.session_state.get("overlap_reviewers") or []
    try:
        made = assign_overlap_as(engine(), require_user().name, chosen, st.session_state["overlap_share"],
                                 int(st.session_state["overlap_seed"]))
    except (NotAllowed, ValueError) as err:
        flash("error", str(err))
        return
    flash("success", f"{made} assignments made over {len(chosen)} reviewers.")


if user.is_admin:
    st.header("Assign with overlap")
    st.caption("Trajectories nobody is assigned yet are spread over the chosen reviewers; the overlap share goes to "
               "two of them, so human-vs-human kappa has items to be measured on.")
    with st.form("assign_overlap"):
        st.multiselect("Reviewers", people, default=people, key="overlap_reviewers")
        st.slider("Overlap (share judged twice)", 0.0, 1.0, 0.2, 0.05, key="overlap_share")
        st.number_input("Seed", min_value=0, value=0, step=1, key="overlap_seed")
        st.form_submit_button("Assign overlap", on_click=_assign)
