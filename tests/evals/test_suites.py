"""The model-run eval suites (forge/evals/suites.py) end to end on a real (random, 2-layer) model, and their item
pipelines scored with gold and with wrong answers.

HF_HUB_OFFLINE=1 .venv/bin/pytest tests/evals/test_suites.py -q
"""

from __future__ import annotations

import json

import pytest

from forge.config import AlignmentSuiteConfig, DeepSearchSuiteConfig, MathSuiteConfig, SuiteConfig
from forge.data.corpora import load_multihop_eval, load_multihop_train
from forge.evals import suites
from forge.generation import get_backend
from tasks.evals import run_model_suite

MATH = MathSuiteConfig(limit=2, max_new_tokens=16, batch_size=8)
SMALL = SuiteConfig(limit=6, max_new_tokens=16, batch_size=8)


@pytest.fixture(scope="module")
def backend(tiny_policy):
    return get_backend("transformers", model=tiny_policy, batch_size=8)


def _tool_call(call: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': call['name'], 'arguments': call['arguments']})}\n</tool_call>"


@pytest.mark.parametrize("suite, gold_answer, wrong_answer", [
    # math: the gold in a box is right; another item's gold (GSM8K's first answers all differ) is wrong
    ("math", lambda it: f"So the answer is $\\boxed{{{it.gold}}}$.", lambda it: "The answer is 0.123456789."),
    # science: the gold letter, stated; the next letter round is wrong
    ("science", lambda it: f"Answer: ({it.gold})", lambda it: f"Answer: {'ABCD'[('ABCD'.index(it.gold) + 1) % 4]}"),
    # tool use: the gold calls in the chat format; no call at all is wrong
    ("tool_use", lambda it: "".join(_tool_call(c) for c in it.gold), lambda it: "I cannot call tools."),
])
def test_item_pipeline_scores_gold_right_and_wrong_answers_wrong(workspace, suite, gold_answer, wrong_answer):
    load = {"math": lambda: suites.math_items(workspace.corpora, MATH),
            "science": lambda: suites.science_items(workspace.corpora, SuiteConfig(limit=20)),
            "tool_use": lambda: suites.tool_use_items(workspace.corpora, SuiteConfig(limit=20))}[suite]
    items = load()
    assert len({it.id for it in items}) == len(items) >= 8
    score = {"math": lambda it, a: suites.score_math(it.gold, a),
             "science": lambda it, a: suites.score_choice(it.gold, a),
             "tool_use": lambda it, a: suites.SCORERS["tool_use"].score(suites.SCORERS["tool_use"].row(
                 tools=it.tools, gold_calls=it.gold, prediction=a))}[suite]
    right = suites._score_rows(items, [gold_answer(it) for it in items], score)
    wrong = suites._score_rows(items, [wrong_answer(it) for it in items], score)
    assert [r["score"] for r in right] == [1.0] * len(items), [r["reason"] for r in right if not r["score"]]
    assert [r["score"] for r in wrong] == [0.0] * len(items)
    assert all(r["reason"] for r in wrong)


def test_limits_spread_over_sources(workspace):
    math = suites.math_items(workspace.corpora, MATH)
    assert [it.source for it in math] == ["gsm8k"] * 2 + ["math500"] * 2 + ["aime24"] * 2 + ["amc23"] * 2
    science = suites.science_items(workspace.corpora, SuiteConfig(limit=19))
    assert len({it.source for it in science}) == 19  # one question from each STEM subject
    tools = suites.tool_use_items(workspace.corpora, SuiteConfig(limit=8))
    assert {it.source for it in tools} == {"simple_python", "multiple", "parallel", "parallel_multiple"}


@pytest.mark.parametrize("suite", ["math", "science", "tool_use"])
def test_suite_runs_on_a_real_model(backend, workspace, suite):
    cfg = MATH if suite == "math" else SMALL
    report = suites.__dict__[f"run_{suite}"](backend, cfg, workspace.corpora)
    assert report.suite == suite and report.rows
    assert all(r["score"] in (0.0, 1.0) and r["id"] and r["source"] for r in report.rows)
    assert report.metrics[f"{suite}_n"] == len(report.rows)
    accuracy = sum(r["score"] for r in report.rows) / len(report.rows)
    assert report.metrics[f"{suite}_accuracy"] == pytest.approx(accuracy)
    # a random model does not write final answers: every wrong row says why
    assert all(r["reason"] for r in report.rows if not r["score"])


def test_prompt_longer_than_the_context_is_scored_wrong_not_dropped(backend, workspace):
    limit = backend.model.config.max_position_embeddings
    report = suites.run_science(backend, SuiteConfig(limit=3, max_new_tokens=limit), workspace.corpora)
    assert len(report.rows) == 3
    assert all(r["score"] == 0.0 and "exceeds the model's context" in r["reason"] for r in report.rows)


def test_alignment_judges_both_orders(backend, workspace, tiny_policy):
    from forge.training.pairwise_rm import PairwiseScorer

    judge = PairwiseScorer(tiny_policy, max_length=256)  # a random score head: real verdicts, no skill
    cfg = AlignmentSuiteConfig(limit=6, max_new_tokens=16, judge_max_length=256)
    items = suites.alignment_items(workspace.corpora, cfg)
    assert all(int(it.id.split(":")[1]) % 10 == 0 for it in items)  # the held-out tenth of HH (split_hh)
    assert {"single_turn", "multi_turn"} & {it.source for it in suites.alignment_items(
        workspace.corpora, AlignmentSuiteConfig(limit=50))} == {"single_turn", "multi_turn"}
    report = suites.run_alignment(backend, cfg, workspace.corpora, judge)
    for row in report.rows:
        d_ab, d_ba = row["d_model_first"], row["d_reference_first"]
        expected = 1.0 if d_ab > 0 > d_ba else 0.0 if d_ab < 0 < d_ba else 0.5
        assert row["score"] == expected
    assert report.metrics["alignment_win_rate"] == pytest.approx(sum(r["score"] for r in report.rows) / 6)
    # the same answer in both slots reads the same both ways: never a win, always the tie
    chat = items[0].chat
    (d_ab, d_ba), = judge.both_orders([chat], [items[0].gold], [items[0].gold])
    assert d_ab == pytest.approx(d_ba)


def test_deep_search_questions_are_held_out_of_training(backend, workspace):
    from forge.search.lookups import build_lookup_qas, is_eval_head
    from forge.search.tools import SearchTools

    tools = SearchTools.load(workspace)
    train = build_lookup_qas(tools.graph, 60, seed=0)
    held = build_lookup_qas(tools.graph, 20, seed=0, split="eval")
    assert not {q.walk["head"] for q in train} & {q.walk["head"] for q in held}
    assert all(is_eval_head(q.walk["head"]) for q in held)
    cfg = DeepSearchSuiteConfig(questions=3, multihop_questions=3, max_new_tokens=24, max_tool_calls=2)
    report = run_model_suite("deep_search", backend, cfg, workspace.corpora, ws=workspace)
    assert [r["id"] for r in report.rows[:3]] == [q.id for q in held[:3]]
    assert [r["source"] for r in report.rows[3:]] == ["2wiki", "hotpotqa", "musique"]  # one from each set in turn
    train = {" ".join(r["question"].split()).casefold() for r in load_multihop_train(workspace.corpora)}
    assert not {" ".join(r["question"].split()).casefold() for r in report.rows[3:]} & train
    assert all(r["tool_calls"] <= 2 and r["turns"] >= 1 for r in report.rows)
    assert report.metrics["deep_search_n"] == 6.0 and "deep_search_musique_accuracy" in report.metrics


def test_multihop_questions_are_kept_only_where_the_wiki_holds_the_answer(workspace):
    from forge.search.evaluation import reachable_multihop
    from forge.search.tools import SearchTools

    tools = SearchTools.load(workspace)
    page = next(p for p in tools.pages if len(p.title) >= 8 and tools.graph.out_edges(p.mid))
    linked = tools.page(tools.graph.out_edges(page.mid)[0][1]).title
    rows = [{"idx": 1, "question": f"What is {page.title} known for?", "answer": "Qwertyuiop Zxcvbnm"},  # nowhere
            {"idx": 2, "question": "Who founded a city nobody wrote a page about?", "answer": linked},  # names no page
            {"idx": 3, "question": f"Which page does {page.title} link to?", "answer": linked}]  # one link away
    kept = reachable_multihop(tools, {"probe_500": rows}, 5)
    assert [(source, qa.id) for source, qa in kept] == [("probe", "probe_500:3")]
    shipped = reachable_multihop(tools, load_multihop_eval(workspace.corpora), 1500)
    assert 50 <= len(shipped) <= 150  # about 80 of the 1,500 ask about pages this wiki has


def test_forge_eval_run_on_a_local_checkpoint(tiny_policy, tmp_path):
    from typer.testing import CliRunner

    from forge.evals.cli import app

    out = tmp_path / "science.jsonl"
    result = CliRunner().invoke(app, ["run", "--model", str(tiny_policy), "--suite", "science", "--limit", "3",
                                      "--profile", "configs/ci.yaml", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and all(r["id"].startswith("mmlu:") for r in rows)
    assert "science_accuracy" in result.output
    bad = CliRunner().invoke(app, ["run", "--model", str(tiny_policy), "--suite", "poetry"])
    assert bad.exit_code == 2 and "unknown suite" in bad.output
    missing = CliRunner().invoke(app, ["run", "--model", str(tmp_path / "nowhere"), "--suite", "math"])
    assert missing.exit_code == 2 and "cannot load" in missing.output
