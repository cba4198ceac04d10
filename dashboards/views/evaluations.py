"""Evaluations: the eval metrics stored on each registered version (``metric.*`` tags, what the promotion gate
compares): the headline metric of each of the paper's domains side by side (forge/evals/domains.py), then the
chosen metrics across versions."""

import streamlit as st

from dashboards.charts import line_with_points
from dashboards.data import model_versions, registered_models
from dashboards.session import mlflow_client, require_user
from forge.evals.domains import HEADLINE

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
headline = {domain: metric for domain, metric in HEADLINE.items() if metric in frame.columns}
if headline:
    st.subheader("Headline metric per domain")
    by_domain = frame[list(headline.values())].rename(columns={m: d for d, m in headline.items()}).T
    by_domain.columns = [f"v{v}" for v in by_domain.columns]
    st.bar_chart(by_domain, stack=False, x_label="domain", y_label="score (higher is better)")
MANY = 8  # past this many metrics, only the headline ones are plotted until more are chosen
default = list(frame.columns) if len(frame.columns) <= MANY else list(headline.values()) or list(frame.columns)[:MANY]
chosen = st.multiselect("Metrics across versions", list(frame.columns), default=default)
columns = st.columns(max(1, min(3, len(chosen))))
for i, metric in enumerate(chosen):
    with columns[i % len(columns)]:
        st.subheader(metric)
        line_with_points(frame[[metric]].reset_index(), "version", metric)
st.dataframe(versions[["version", "aliases", "stage", *metric_cols]], hide_index=True)
