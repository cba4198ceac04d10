"""The graph's per-entity and per-graph indexes give what a scan of the raw triples gives, and hand out copies."""

from __future__ import annotations

import random
from dataclasses import asdict

from forge.search.walks import Condition, answer_set


def test_edges_and_years_match_the_raw_triples(graph):
    rng = random.Random(11)
    for mid in rng.sample(graph.entities, 500):
        raw = [(r, t) for r, t in graph.kg.out_edges.get(mid, []) if t in graph.titles]
        assert graph.out_edges(mid) == raw
        for relation in {r for r, _ in raw}:
            assert graph.tails(mid, relation) == [t for r, t in raw if r == relation]
        assert graph.tails(mid, "/no/such/relation") == []
        facts = graph.kg.years.get(mid, [])
        assert graph.years(mid) == sorted(set(facts))
        for attr in {a for a, _ in facts}:
            assert graph.year(mid, attr) == min(y for a, y in facts if a == attr)
        assert graph.year(mid, "no_such_attribute") is None


def test_accessors_hand_out_copies(graph):
    mid = max(graph.entities, key=lambda m: len(graph.out_edges(m)))
    edges, entities = graph.out_edges(mid), graph.entities
    edges.clear()
    entities.reverse()
    assert graph.out_edges(mid) and graph.entities == sorted(graph.titles)


def test_dated_between_is_every_entity_dated_in_the_range(graph):
    born = "people.person.date_of_birth"
    found = graph.dated_between(born, 1961, 1963)
    scan = [m for m in graph.entities if graph.year(m, born) is not None and 1961 <= graph.year(m, born) <= 1963]
    assert sorted(found) == scan and scan
    assert graph.dated_between(born, 1963, 1961) == [] and graph.dated_between("no_such_attribute", 0, 3000) == []


def test_head_condition_answers_match_a_whole_graph_scan(graph):
    # answer_set reads an obfuscated head through the date and description indexes; every entity scanned agrees.
    rng = random.Random(5)
    conditions = [Condition()]
    for mid in rng.sample(graph.entities, 200):
        desc, years = graph.description(mid), graph.years(mid)
        if desc:
            conditions.append(Condition(description=desc))
        if years:
            attr, year = rng.choice(years)
            width = rng.randint(0, 8)
            conditions.append(Condition(date_attr=attr, low=year - width, high=year + rng.randint(0, 3)))
            if desc:
                conditions.append(Condition(description=desc, date_attr=attr, low=year - width, high=year))
    for cond in conditions:
        spec = {"head": None, "head_condition": asdict(cond), "hops": []}
        assert answer_set(graph, spec) == {m for m in graph.entities if cond.holds(graph, m)}, cond
