"""Data mixes: target vs actual token share per domain, tokens per domain, and the data's DVC version history
(commits of ``data.dvc``, and the recipe's ``data`` stage runs with the md5 they trained on)."""

import streamlit as st

from dashboards.charts import line_with_points
from dashboards.data import data_runs, dvc_history, mix_frames
from dashboards.session import mlflow_client, require_user, workspace

require_user()
ws = workspace()
st.title("Data mixes")

frames = mix_frames(ws.mixes)
if not frames:
    st.info(f"No mix built yet under {ws.mixes} (`forge run` builds it).")
for name, frame in frames.items():
    st.header(name)
    st.caption(f"{int(frame['tokens'].sum()):,} tokens · {int(frame['rows'].sum()):,} rows · "
               f"largest share error {(frame['actual share'] - frame['target share']).abs().max():.4f}")
    left, right = st.columns(2)
    with left:
        st.subheader("Token share per domain")
        st.bar_chart(frame[["target share", "actual share"]], stack=False, y_label="share of tokens")
    with right:
        st.subheader("Tokens per domain")
        st.bar_chart(frame[["target tokens", "tokens"]], stack=False, y_label="tokens")
    st.dataframe(frame)

st.header("DVC versions of the data")
history = dvc_history(ws.root)
if history.empty:
    st.info(f"No committed data.dvc in {ws.root}.")
else:
    st.caption("Each commit of data.dvc is one version of data/ (md5 of the directory, pushed to the DVC remote).")
    line_with_points(history, "date", "size")
    st.dataframe(history, hide_index=True)

runs = data_runs(mlflow_client())
if not runs.empty:
    st.subheader("Recipe data runs")
    st.caption("One row per `data` stage run: the DVC md5 it versioned and the tokens per domain it logged.")
    token_cols = [c for c in runs.columns if c.endswith("_tokens")]
    if len(runs) > 1 and token_cols:
        st.bar_chart(runs.set_index("started")[token_cols], y_label="tokens")
    st.dataframe(runs, hide_index=True)
