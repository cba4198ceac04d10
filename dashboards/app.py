"""Forge dashboard (first page): the latest recipe run and the data mix it trained on.

    streamlit run dashboards/app.py --server.address 127.0.0.1

The review pages (turn-by-turn trajectory review, login, verdicts) come with the dashboard issue; this page only
reads what the recipe wrote: ``$FORGE_HOME/runs/latest.json`` and ``data/mixes/*/manifest.json``.
"""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from forge.workspace import configure_environment

ws = configure_environment()
st.set_page_config(page_title="Forge", layout="wide")
st.title("Forge")

summary_path = ws.home / "runs" / "latest.json"
st.header("Latest recipe run")
if summary_path.exists():
    summary = json.loads(summary_path.read_text())
    st.caption(f"flow run {summary['flow_run_id']} · profile {summary['profile']} · {summary['state']}")
    rows = [{"stage": name, **{k: v for k, v in st_.items() if k in ("state", "seconds", "run_id", "version")}}
            for name, st_ in summary["stages"].items()]
    st.dataframe(pd.DataFrame(rows), hide_index=True)
else:
    st.info("No recipe run yet: `make run` or `forge run --profile tiny`.")

st.header("Data mixes")
manifests = sorted(ws.mixes.glob("*/manifest.json"))
if not manifests:
    st.info("No mix built yet.")
for path in manifests:
    manifest = json.loads(path.read_text())
    st.subheader(path.parent.name)
    frame = pd.DataFrame(
        [{"domain": d, "target": r["target_share"], "actual": r["actual_share"], "tokens": r["tokens"], "rows": r["rows"]}
         for d, r in manifest["domains"].items()]
    ).set_index("domain")
    st.bar_chart(frame[["target", "actual"]], stack=False)
    st.dataframe(frame)
