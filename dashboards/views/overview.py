"""Latest run: the stages of the last recipe run (``$FORGE_HOME/runs/latest.json``, written by ``forge run``)."""

import json

import pandas as pd
import streamlit as st

from dashboards.charts import bars_in_order
from dashboards.session import require_user, workspace

require_user()
st.title("Latest recipe run")
summary_path = workspace().home / "runs" / "latest.json"
if summary_path.exists():
    summary = json.loads(summary_path.read_text())
    st.caption(f"flow run {summary['flow_run_id']} · profile {summary['profile']} · {summary['state']}")
    rows = [{"stage": name, **{k: v for k, v in stage.items() if k in ("state", "seconds", "run_id", "version")}}
            for name, stage in summary["stages"].items()]
    frame = pd.DataFrame(rows)
    st.dataframe(frame, hide_index=True)
    if "seconds" in frame and frame["seconds"].notna().any():
        st.subheader("Seconds per stage")
        bars_in_order(frame, "stage", "seconds", x_title="seconds (in the order the stages ran)")
else:
    st.info("No recipe run yet: `make run` or `forge run --profile tiny`.")
