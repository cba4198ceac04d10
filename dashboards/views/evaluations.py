"""Evaluations: the eval metrics stored on each registered version (``metric.*`` tags, what the promotion gate
compares), plotted across versions."""

import streamlit as st

from dashboards.data import model_versions, registered_models
from dashboards.session import mlflow_client, require_user

require_user()
st.title("Evaluations across versions")
client = mlflow_client()
models = registered_models(client)
if not models:
    st.info("No registered model yet (`forge run` registers forge-policy).")
    st.stop()
model = st.selectbox("Model", models, index=models.index("forge-policy") if "forge-policy" in models else 0)
versions = model_versions(client, model)
metric_cols = [c for c in versions.columns if c.startswith("metric:")]
if not metric_cols:
    st.info(f"No version of {model} has eval metrics yet.")
    st.stop()
frame = versions.set_index("version")[metric_cols].rename(columns=lambda c: c.removeprefix("metric:"))
columns = st.columns(min(3, len(frame.columns)))
for i, metric in enumerate(frame.columns):
    with columns[i % len(columns)]:
        st.subheader(metric)
        st.line_chart(frame[[metric]].dropna(), x_label="version", y_label=metric)
st.dataframe(versions[["version", "aliases", "stage", *metric_cols]], hide_index=True)
