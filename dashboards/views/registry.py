"""Registry: every registered version with its aliases and lineage; admins promote the candidate (through the
same gate as ``forge promote``) and roll the champion back (as ``forge rollback``)."""

import os

import streamlit as st

from dashboards.actions import NotAllowed, promote_candidate, rollback_champion
from dashboards.data import all_versions, lineage_dot, model_versions, registered_models
from dashboards.session import engine, flash, mlflow_client, require_user, show_flashes

user = require_user()
st.title("Model registry")
client = mlflow_client()
models = registered_models(client)
if not models:
    st.info("No registered model yet (`forge run` registers them).")
    st.stop()


def _promote(model: str) -> None:
    from forge.config import load_profile

    user = require_user()
    policy = load_profile(os.environ.get("FORGE_PROFILE", "tiny")).promotion
    try:
        decision = promote_candidate(engine(), user.name, client, model, policy)
    except NotAllowed as err:
        flash("error", str(err))
        return
    except ValueError as err:  # no candidate alias
        flash("error", str(err))
        return
    verdict = "already champion" if decision.unchanged else ("promoted" if decision.promote else "refused")
    st.session_state["promotion_reasons"] = (model, verdict, decision.reasons)


def _rollback(model: str) -> None:
    from registry.promotion import RollbackError

    user = require_user()
    try:
        restored = rollback_champion(engine(), user.name, client, model)
    except (NotAllowed, RollbackError) as err:
        flash("error", str(err))
        return
    flash("success", f"{model}: champion is version {restored} again.")


show_flashes()
if "promotion_reasons" in st.session_state:
    model, verdict, reasons = st.session_state.pop("promotion_reasons")
    (st.success if verdict != "refused" else st.error)(f"{model}: {verdict}")
    st.text("\n".join(f"- {r}" for r in reasons))

for model in models:
    versions = model_versions(client, model)
    st.header(model)
    aliases = client.get_registered_model(model).aliases
    st.text("aliases: " + (", ".join(f"{a} → v{v}" for a, v in sorted(aliases.items())) or "none"))
    if not versions.empty:
        shown = ["version", "aliases", "stage", "parent", "promotion", "data_md5", "git_commit", "created"]
        st.dataframe(versions[[c for c in shown if c in versions]], hide_index=True)
    if user.is_admin:
        left, right, _ = st.columns([1, 1, 3])
        left.button("Promote candidate", key=f"promote_{model}", on_click=_promote, args=(model,),
                    disabled="candidate" not in aliases, type="primary",
                    help="Move champion to the candidate if the promotion gate allows it (as `forge promote`).")
        right.button("Roll back champion", key=f"rollback_{model}", on_click=_rollback, args=(model,),
                     disabled="champion" not in aliases,
                     help="Make the previous champion the champion again (as `forge rollback`).")

everything = all_versions(client)
if not everything.empty and everything["parent"].notna().any():
    st.header("Lineage")
    st.caption("parent → child (forge.parent_version tags)")
    st.graphviz_chart(lineage_dot(everything))
