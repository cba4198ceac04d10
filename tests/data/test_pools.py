"""Pools built from the real corpora: valid rows, unique ids, tools where expected, no eval leakage, and no
FB15k-237 graph walks (those are deep-search synthesis, forge/search/)."""

from __future__ import annotations

import itertools

import pytest

from forge.data import corpora as C
from forge.data.jsonl import read_jsonl
from forge.data.pools import GSM8K, HOTPOT, MUSIQUE, chat_text, iter_pretraining_texts
from forge.data.schemas import PreferencePair
from forge.workspace import REPO_ROOT

CORPORA = REPO_ROOT / "corpora"
EXPECTED_TOOLS = {"deep_search": {"search", "visit"}, "tool_use": {"calculator"}}


@pytest.fixture(scope="module")
def eval_strings() -> list[str]:
    return [C.normalize_text(t) for t in C.eval_texts(CORPORA) if len(t.split()) >= 8]


def test_every_domain_non_empty_valid_and_ids_unique(chat_pools, pool_paths):
    ids = [r.id for rows in chat_pools.values() for r in rows]
    assert len(ids) == len(set(ids))
    for domain, rows in chat_pools.items():
        assert len(rows) >= 100, domain
        assert all(r.domain == domain for r in rows)
    res = read_jsonl(pool_paths["preferences"], PreferencePair, max_bad_ratio=0.0)
    assert res.n_good > 0 and len({r.id for r in res.rows}) == res.n_good
    assert set(pool_paths) == {*chat_pools, "preferences"}  # what a stage reads, nothing beside it


def test_tool_calls_where_expected_and_only_declared_tools(chat_pools):
    for domain, rows in chat_pools.items():
        called = {c.name for r in rows for m in r.messages for c in m.tool_calls}
        assert called == EXPECTED_TOOLS.get(domain, set()), domain
        for r in rows:
            declared = {t.function.name for t in r.tools}
            assert {c.name for m in r.messages for c in m.tool_calls} <= declared
            # every call is answered by a tool message of the same name
            for a, b in itertools.pairwise(r.messages):
                if a.tool_calls:
                    assert b.role == "tool" and b.name == a.tool_calls[0].name
    calc = [m for r in chat_pools["tool_use"] for m in r.messages if m.role == "tool" and m.name == "calculator"]
    assert calc and all(m.content.lstrip("-").replace(".", "", 1).isdigit() for m in calc)


def test_deep_search_answers_are_the_gold_answers_of_their_questions(chat_pools):
    gold = {f"musique:{q['id']}": q["answer"] for q in C.load_musique(CORPORA)}
    gold |= {f"hotpotqa:{q['_id']}": q["answer"] for q in C.load_hotpotqa(CORPORA)}
    for r in chat_pools["deep_search"]:
        final = r.messages[-1]
        assert final.role == "assistant" and final.content and not final.tool_calls
        assert final.content == gold[r.parents[0]], r.parents


def test_graph_walks_are_left_to_deep_search_synthesis(chat_pools):
    assert {r.source for r in chat_pools["deep_search"]} == {MUSIQUE, HOTPOT}
    assert {r.source for r in chat_pools["tool_use"]} == {GSM8K}
    rows = [r for rows in chat_pools.values() for r in rows]
    assert not [r.id for r in rows if r.source.startswith("kg_fb15k237") or any("fb15k" in p for p in r.parents)]


def test_leak_check_would_catch_the_raw_math_file(eval_strings):
    # MATH-500 is a subset of math/test: the raw file must trip the same check the pools pass.
    raw = C.normalize_text("\n".join(r["problem"] for r in C.iter_json_lines(CORPORA / "math" / "test.jsonl.gz")))
    assert sum(e in raw for e in eval_strings) >= 400


def test_no_eval_item_leaks_into_pools(chat_pools, eval_strings):
    text = C.normalize_text("\n".join(chat_text(r) for rows in chat_pools.values() for r in rows))
    leaked = [e for e in eval_strings if e in text]
    assert not leaked, leaked[:3]
    parents = {p for rows in chat_pools.values() for r in rows for p in r.parents}
    assert not any(p.startswith("HumanEval/") for p in parents)
    mbpp_ids = {int(p.split(":")[1]) for p in parents if p.startswith("mbpp:")}
    assert mbpp_ids and not mbpp_ids & set(C.MBPP_EVAL_IDS)
    assert not any(p.startswith("gsm8k/test") for p in parents)


def test_pretraining_texts_deterministic_mixed_and_eval_free(eval_strings):
    docs = list(iter_pretraining_texts(CORPORA, max_chars=1_500_000, seed=3))
    assert docs == list(iter_pretraining_texts(CORPORA, max_chars=1_500_000, seed=3))
    assert docs[:20] != list(iter_pretraining_texts(CORPORA, max_chars=200_000, seed=4))[:20]
    assert 1_500_000 <= sum(map(len, docs)) < 1_500_000 + max(map(len, docs))
    text = C.normalize_text("\n".join(docs))
    assert not [e for e in eval_strings if e in text]
    # several sources are mixed in the first few hundred documents
    head = docs[:300]
    assert any("The answer is" in d for d in head) and any("\nHuman:" in "\n" + d or "Human:" in d for d in head)
    assert any(d.startswith("# ") and "def " in d for d in docs)
