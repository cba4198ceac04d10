"""Time-aware head entities and the semantic filter, measured on the committed hand-labelled sample."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge.search.heads import filter_precision, load_labels, recent_entities, select_heads

LABELS = Path(__file__).parent / "data" / "entity_labels.jsonl"


def test_filter_precision_on_the_hand_labelled_sample(graph):
    labels = load_labels(LABELS)
    assert len(labels) == 100 and {r["label"] for r in labels} == {"specific", "generic"}
    scores = filter_precision(graph, labels)
    assert scores["precision"] >= 0.95  # of the entities kept as heads, how many are specific
    assert scores["generic_recall"] >= 0.8  # of the generic ones, how many are dropped
    assert scores["specific_recall"] >= 0.9  # the filter does not throw away the graph


def test_recency_window_is_respected(graph):
    ref, window, six_months = recent_entities(graph, None, 183, min_degree=5, max_degree=200)
    _, _, ten_years = recent_entities(graph, None, 3653, min_degree=5, max_degree=200)
    assert ref == 2015 and set(six_months) < set(ten_years)
    assert all(ref - window <= graph.last_update(m) <= ref for m in six_months)
    assert all(ref - 10.01 <= graph.last_update(m) for m in ten_years)
    _old_ref, _, old = recent_entities(graph, 1990, 3653, min_degree=5, max_degree=200)
    assert old and all(1980 <= graph.last_update(m) <= 1990 for m in old)


def test_semantic_filter_drops_concepts_keeps_named_things(graph):
    sel = select_heads(graph, reference_year=None, window_days=3653, min_degree=5, max_degree=400)
    titles = {graph.title(m) for m in sel.heads}
    dropped = {graph.title(m) for m in set(sel.recent) - set(sel.heads)}
    assert {"Country music", "Progressive rock", "Pneumonia"} <= dropped
    assert {"Uma Thurman", "University of Michigan", "Iron Man 2"} <= titles


def test_bad_label_file_names_file_line_and_field(tmp_path):
    bad = tmp_path / "labels.jsonl"
    bad.write_text('{"mid": "/m/1", "label": "specific"}\n{"mid": "/m/2", "label": "maybe"}\n')
    with pytest.raises(ValueError, match=r"labels.jsonl:2: field 'label'"):
        load_labels(bad)
