"""Shared, expensive fixtures of the deep-search tests: the tools (graph, pages, BM25 index) and 200 QAs."""

from __future__ import annotations

import random

import pytest

from forge.search.agents import PlannerAgent
from forge.search.heads import select_heads
from forge.search.tools import SearchTools
from forge.search.walks import WalkParams, synthesize_qas


@pytest.fixture(scope="session")
def tools(workspace) -> SearchTools:
    return SearchTools.load(workspace)


@pytest.fixture(scope="session")
def graph(tools):
    return tools.graph


@pytest.fixture(scope="session")
def qas(graph):
    """200 QAs from ten years of recent heads, 2–5 hops (the tiny profile's settings)."""
    sel = select_heads(graph, reference_year=None, window_days=3653, min_degree=5, max_degree=200)
    heads = list(sel.heads)
    random.Random("tests:heads").shuffle(heads)
    return synthesize_qas(graph, heads, 200, min_hops=2, max_hops=5, params=WalkParams(seed=7))


@pytest.fixture(scope="session")
def planner_runs(qas, tools):
    """The planner on every QA: (trajectory, qa) pairs."""
    return [(PlannerAgent().run(qa, tools), qa) for qa in qas]
