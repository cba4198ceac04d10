"""Review: a filtered queue, one trajectory at a time, turn by turn.

Model output (question, reasoning, content, tool arguments and responses, answers) is drawn with ``st.text`` and
``st.code`` only — never ``st.markdown``, never ``unsafe_allow_html`` — so a turn that contains HTML or markdown
shows as the characters it is. Every save sends the verdict version this page showed (optimistic locking): when
the verdict changed meanwhile (another tab, another window) nothing is saved and the page says so.

The queue is a review plan by default (forge/review/views.py ``queue(plan=True)``): every trajectory the critic
failed, then those reviewers disagree on, then a random sample of the rest sized to estimate the share a person
would reject within ±5% at 95%. Each turn is marked (red: the critic failed it and you have not judged it, green:
you judged it, grey: pending); the turn index above the turns jumps to any of them.

Keys: ``N`` next trajectory, ``P`` previous, ``A`` accept the first turn you have not judged yet, ``X`` reject
it, ``Shift+A`` accept every turn you have not judged, ``T`` accept the trajectory, ``Shift+T`` reject it
(Streamlit keeps ``R`` and ``C`` for itself).
"""

import json

import pandas as pd
import streamlit as st

from dashboards.session import engine, flash, require_user, show_flashes
from forge.review import (
    DIMENSIONS,
    StaleVerdictError,
    accept_remaining,
    progress,
    queue,
    record_trajectory_verdict,
    record_verdict,
    session_scope,
    trajectory_view,
    write_once,
)
from forge.search.agents import SCRIPTED_AGENTS, ReActAgent
from forge.search.lookups import LookupAgent

LONG_OBSERVATION = 400  # characters; longer tool responses start collapsed
DIMENSION_LABELS = {"logical": "logic wrong", "tool_call": "tool call wrong", "info_gain": "no information gain"}
CURRENT, FILTERS = "review_current", "review_filters"
# What each agent that writes trajectories is (its docstring's first line), for the provenance line.
AGENTS = {a.name: (a.__doc__ or "").strip().splitlines()[0] for a in (*SCRIPTED_AGENTS.values(), ReActAgent,
                                                                      LookupAgent)}

user = require_user()


def _save_turn(turn_id: int, number: int, passed: bool, shown_version: int) -> None:
    note = st.session_state.get(f"note_{turn_id}", "")
    dimensions = None
    if not passed:
        wrong = {d: bool(st.session_state.get(f"dim_{d}_{turn_id}")) for d in DIMENSIONS}
        if any(wrong.values()):  # none ticked: every dimension fails with the turn
            dimensions = {d: not bad for d, bad in wrong.items()}
    try:
        version = write_once(engine(), lambda s: record_verdict(
            s, turn_id, user.name, passed=passed, note=note, dimensions=dimensions,
            expected_version=shown_version).version)
    except StaleVerdictError:
        st.session_state.pop(f"note_{turn_id}", None)  # show the stored comment, not the one typed over it
        flash("warning", f"Turn {number} was changed elsewhere after this page showed it, so nothing was saved. "
                         "The page now shows the current verdict; judge again if you still disagree.")
        return
    flash("success", f"Turn {number} {'accepted' if passed else 'rejected'} (version {version}).")


def _accept_remaining(trajectory_id: str) -> None:
    try:
        accepted = write_once(engine(), lambda s: accept_remaining(s, trajectory_id, user.name))
    except StaleVerdictError:
        flash("warning", "A turn was judged elsewhere after this page showed it, so nothing was saved. The page "
                         "now shows the current verdicts.")
        return
    flash("success", f"Accepted the {len(accepted)} remaining turn(s).")


def _agent(name: str) -> str:
    return f"{name}: {AGENTS.get(name, 'an agent this dashboard does not know')}"


MARKS = {"judged": ":green[:material/check_circle:]", "critic failed": ":red[:material/error:]",
         "pending": ":gray[:material/radio_button_unchecked:]"}  # Streamlit's own icon font: no emoji font needed


def _state(turn) -> str:
    return "judged" if turn.my_verdict is not None else "critic failed" if not turn.critic["passed"] else "pending"


def _save_trajectory(trajectory_id: str, accepted: bool, shown_version: int) -> None:
    note = st.session_state.get(f"tnote_{trajectory_id}", "")
    try:
        version = write_once(engine(), lambda s: record_trajectory_verdict(
            s, trajectory_id, user.name, accepted=accepted, note=note, expected_version=shown_version).version)
    except StaleVerdictError:
        st.session_state.pop(f"tnote_{trajectory_id}", None)
        flash("warning", "The trajectory verdict was changed elsewhere after this page showed it, so nothing was "
                         "saved. The page now shows the current verdict.")
        return
    flash("success", f"Trajectory {'accepted' if accepted else 'rejected'} (version {version}).")


def _go(trajectory_id: str | None) -> None:
    st.session_state[CURRENT] = trajectory_id


# --- queue filters and progress (sidebar) -------------------------------------------------------------------
with session_scope(engine()) as s:
    domains = sorted({i.domain for i in queue(s, user.name, status="all", limit=10**6)})
with st.sidebar:
    st.header("Queue")
    domain = st.selectbox("Domain", ["all", *domains], key="f_domain")
    critic = st.selectbox("Critic verdict", ["all", "failed", "passed"], key="f_critic")
    disagreement = st.checkbox("Disagreements only", key="f_disagreement")
    mine = st.checkbox("Assigned to me", key="f_mine")
    status = st.radio("Status", ["pending", "reviewed", "all"], key="f_status", horizontal=True)
    plan = st.radio("Queue", ["review plan", "everything"], key="f_plan", horizontal=True,
                    help="Review plan: every critic failure and disagreement, then a random sample of the rest "
                         "large enough to estimate what share a person would reject (±5% at 95%).") == "review plan"
filters = {"domain": None if domain == "all" else domain, "critic": None if critic == "all" else critic,
           "disagreement": disagreement, "assigned_to_me": mine, "status": status, "plan": plan}
if st.session_state.get(FILTERS) != filters:  # new filters: start at the top of the new queue
    st.session_state[FILTERS], st.session_state[CURRENT] = filters, None

with session_scope(engine()) as s:
    items = queue(s, user.name, limit=1000, **filters)
    done = progress(s, user.name)

st.title("Review")
show_flashes()
a, b, c = st.columns(3)
a.metric("Turns judged by you", f"{done.turns_judged_by_me} / {done.turns_total}")
b.metric("Trajectories done", f"{done.trajectories_done_by_me} / {done.trajectories_total}")
c.metric("Your verdicts", done.verdicts_total)
st.progress(done.turns_judged_by_me / done.turns_total if done.turns_total else 0.0)

ids = [i.trajectory_id for i in items]
current = st.session_state.get(CURRENT) or (ids[0] if ids else None)
st.session_state[CURRENT] = current
if current is None:
    st.info("Nothing in this queue. Change the filters in the sidebar (status `all` shows what you judged).")
    st.stop()
# A trajectory finished a moment ago leaves a `pending` queue; it stays on screen until the reviewer moves on.
position = ids.index(current) if current in ids else None
last = st.session_state.get("review_position", 0)
if position is not None:
    st.session_state["review_position"] = position
    next_id = ids[position + 1] if position + 1 < len(ids) else None
    prev_id = ids[position - 1] if position > 0 else None
else:
    next_id = ids[min(last, len(ids) - 1)] if ids else None
    prev_id = ids[last - 1] if 0 < last <= len(ids) else None

with st.expander(f"Queue: {len(items)} trajectories", expanded=False):
    st.dataframe(pd.DataFrame([{"id": i.trajectory_id[:12], "why": i.why, "domain": i.domain, "agent": i.agent,
                                "turns": i.turns, "critic failed": i.critic_failed_turns,
                                "judged by me": i.my_judged_turns, "disagreements": i.disagreements,
                                "status": i.status, "question": i.question} for i in items]),
                 hide_index=True)

nav_prev, nav_where, nav_next = st.columns([1, 3, 1])
nav_prev.button("Previous", on_click=_go, args=(prev_id,), disabled=prev_id is None, shortcut="P",
                icon=":material/arrow_back:", key="prev_trajectory")
nav_where.text(f"{position + 1} of {len(ids)} in this queue" if position is not None
               else "judged: no longer in this queue")
nav_next.button("Next", on_click=_go, args=(next_id,), disabled=next_id is None, shortcut="N",
                icon=":material/arrow_forward:", key="next_trajectory")

try:
    with session_scope(engine()) as s:
        view = trajectory_view(s, current, user.name)
except KeyError:  # deleted from the store since it was picked
    st.session_state[CURRENT] = None
    st.rerun()

# --- the trajectory -------------------------------------------------------------------------------------------
st.subheader("Question")
with st.container(key="question"):
    st.text(view.question)
st.text(f"trajectory {view.id[:12]} · domain {view.domain} · {'correct' if view.correct else 'wrong'} final "
        f"answer · question {view.qa_id[:12]} · stored {view.stored}")
st.text(f"agent {_agent(view.agent)}")

# The turn index: one link per turn, marked like the turns below, jumping to it.
st.markdown(" ".join(f"[{MARKS[_state(t)]} {k}](#turn-{k})" for k, t in enumerate(view.turns, 1))
            + "  \n" + " · ".join(f"{mark} {state}" for state, mark in MARKS.items()))
open_turns = [(k, t) for k, t in enumerate(view.turns, 1) if t.my_verdict is None]
if open_turns:
    k, t = open_turns[0]
    accept, reject, remaining, _ = st.columns([2, 2, 2, 3])
    accept.button(f"Accept turn {k} (next open)", on_click=_save_turn, args=(t.turn_id, k, True, 0), shortcut="A",
                  key="accept_next_open")
    reject.button(f"Reject turn {k} (next open)", on_click=_save_turn, args=(t.turn_id, k, False, 0), shortcut="X",
                  key="reject_next_open")
    remaining.button(f"Accept remaining turns ({len(open_turns)})", on_click=_accept_remaining, args=(view.id,),
                     shortcut="shift+a", key="accept_remaining")

for k, turn in enumerate(view.turns, 1):
    with st.container(border=True, key=f"turn_{k}"):
        st.subheader(f"{MARKS[_state(turn)]} Turn {k} · {_state(turn)}", anchor=f"turn-{k}")
        if turn.reasoning:
            st.caption("Reasoning")
            st.text(turn.reasoning)
        if turn.content:
            st.caption("Content")
            st.text(turn.content)
        for call in turn.tool_calls:
            st.caption("Tool call")
            st.text(call.name)
            st.code(json.dumps(call.arguments, indent=2, ensure_ascii=False), language="json")
        if turn.observation is not None:
            if len(turn.observation) > LONG_OBSERVATION:
                with st.expander(f"Tool response ({len(turn.observation):,} characters)"):
                    st.text(turn.observation)
            else:
                st.caption("Tool response")
                st.text(turn.observation)
        st.caption(f"Critic ({turn.critic_judge})")
        st.text("   ".join(f"{'✓' if turn.critic[d] else '✗'} {d}" for d in DIMENSIONS)
                + f"   → {'passed' if turn.critic['passed'] else 'failed'}")
        for reason in turn.critic_reasons:
            st.text(f"· {reason}")

        mine_v = turn.my_verdict
        if mine_v is None:
            st.text("Your verdict: none yet" + (f" ({turn.other_verdicts} other reviewer(s) judged it)"
                                                 if turn.other_verdicts else ""))
        else:
            wrong = [d for d in DIMENSIONS if not mine_v.dimensions.get(d, mine_v.passed)]
            st.text(f"Your verdict: {'✓ accepted' if mine_v.passed else '✗ rejected'} (version {mine_v.version})"
                    + (f" · wrong: {', '.join(wrong)}" if wrong and not mine_v.passed else "")
                    + (f" · {mine_v.note}" if mine_v.note else ""))
        shown = mine_v.version if mine_v is not None else 0
        with st.form(key=f"form_turn_{turn.turn_id}", border=False):
            st.text_area(f"Comment on turn {k}", value=mine_v.note if mine_v else "", key=f"note_{turn.turn_id}",
                         height=68, placeholder="optional; say why when you reject")
            checks = st.columns(len(DIMENSIONS))
            for col, d in zip(checks, DIMENSIONS, strict=True):
                col.checkbox(f"Turn {k}: {DIMENSION_LABELS[d]}", key=f"dim_{d}_{turn.turn_id}",
                             value=mine_v is not None and not mine_v.passed and not mine_v.dimensions.get(d, False),
                             help="Ticked dimensions are the ones that fail when you reject; none ticked = all fail.")
            ok, bad, _ = st.columns([1, 1, 4])
            ok.form_submit_button(f"Accept turn {k}", on_click=_save_turn, args=(turn.turn_id, k, True, shown),
                                  icon=":material/check:")
            bad.form_submit_button(f"Reject turn {k}", on_click=_save_turn, args=(turn.turn_id, k, False, shown),
                                   icon=":material/close:")

# --- final answer and the trajectory verdict ----------------------------------------------------------------------
st.subheader("Final answer")
left, right = st.columns(2)
with left:
    st.caption("Model's final answer")
    with st.container(key="final_answer"):
        st.text(view.final_answer if view.final_answer is not None else "(none)")
with right:
    st.caption("Gold answer")
    st.text(view.gold_answer)
if view.gold_path:
    st.caption("Gold path")
    st.text(" → ".join(view.gold_path))
if view.gold_relations:
    st.caption("Gold relations")
    st.text(" → ".join(view.gold_relations))

with st.container(border=True, key="trajectory_verdict"):
    st.subheader("Whole trajectory")
    tv = view.my_verdict
    st.text("Your verdict: none yet" if tv is None else
            f"Your verdict: {'✓ accepted' if tv.accepted else '✗ rejected'} (version {tv.version})"
            + (f" · {tv.note}" if tv.note else ""))
    st.caption("A rejected trajectory leaves the SFT pools at the next merge.")
    with st.form(key=f"form_trajectory_{view.id}", border=False):
        st.text_area("Comment on the trajectory", value=tv.note if tv else "", key=f"tnote_{view.id}", height=68)
        ok, bad, _ = st.columns([1, 1, 4])
        shown = tv.version if tv is not None else 0
        ok.form_submit_button("Accept trajectory", on_click=_save_trajectory, args=(view.id, True, shown),
                              icon=":material/check:", shortcut="T")
        bad.form_submit_button("Reject trajectory", on_click=_save_trajectory, args=(view.id, False, shown),
                               icon=":material/close:", shortcut="shift+t")
