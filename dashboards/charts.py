"""Charts the pages share, drawn with Altair (which Streamlit ships) where its one-line charts mislead:

- a line over one version draws nothing, so every line here carries its points;
- a missing value (Cohen's kappa with no variation) is left out and named, never drawn as 0;
- bars keep the order of the data (stages in the order they ran), not the alphabet.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st


def line_with_points(frame: pd.DataFrame, x: str, y: str, *, x_title: str | None = None) -> None:
    chart = alt.Chart(frame.dropna(subset=[y])).mark_line(point=alt.OverlayMarkDef(size=60)).encode(
        x=alt.X(f"{x}:O" if frame[x].dtype.kind in "iu" else x, title=x_title or x),
        y=alt.Y(y, title=y), tooltip=[x, y])
    st.altair_chart(chart, use_container_width=True)


def grouped_bars(frame: pd.DataFrame, category: str, columns: list[str], *, y_title: str) -> None:
    """One bar per (category, column); a missing value draws no bar and is listed under the chart as n/a."""
    long = frame.reset_index().melt(id_vars=[category], value_vars=columns, var_name="measure")
    missing = long[long["value"].isna()]
    chart = alt.Chart(long.dropna(subset=["value"])).mark_bar().encode(
        x=alt.X(f"{category}:N", sort=None, title=category), xOffset="measure:N",
        y=alt.Y("value:Q", title=y_title), color="measure:N", tooltip=[category, "measure", "value"])
    st.altair_chart(chart, use_container_width=True)
    if not missing.empty:
        pairs = zip(missing[category], missing["measure"], strict=True)
        st.caption("n/a, not drawn: " + ", ".join(f"{measure} of {name}" for name, measure in pairs))


def bars_in_order(frame: pd.DataFrame, category: str, value: str, *, x_title: str) -> None:
    """Horizontal bars, one per row, top to bottom in the frame's order."""
    chart = alt.Chart(frame).mark_bar().encode(
        y=alt.Y(f"{category}:N", sort=None, title=None), x=alt.X(f"{value}:Q", title=x_title),
        tooltip=[category, value])
    st.altair_chart(chart, use_container_width=True)
