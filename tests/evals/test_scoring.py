"""Scoring files of predictions: every suite's known-good file scores 100 % and its known-bad file 0 %, bad lines are
named and skipped, and `forge eval score` does the same end to end.

PYTHONPATH=$PWD .venv/bin/pytest tests/evals/test_scoring.py -q
"""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forge.chat import format_assistant_text
from forge.cli import app
from forge.data.corpora import load_gsm8k, load_math500
from forge.evals.choice import LETTERS
from forge.evals.scoring import SCORERS, score_file

TOOL = {"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression.",
                                         "parameters": {"type": "object", "properties": {
                                             "expression": {"type": "string"}}, "required": ["expression"]}}}


def write(path: Path, rows: list) -> Path:
    """One line per row: dicts as JSON, strings as they are (to plant a broken line)."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def math_rows(workspace, good: bool) -> list[dict]:
    """Real gold answers (GSM8K test finals, MATH-500 answers) with a right or a wrong prediction."""
    gsm8k = load_gsm8k(workspace.corpora, "test")[:15]
    math500 = [r for r in load_math500(workspace.corpora)[:40] if r["answer"].lstrip("-").isdigit()][:10]
    rows = []
    for gold in [r["final"] for r in gsm8k] + [r["answer"] for r in math500]:
        answer = gold if good else str(int(gold.replace(",", "")) + 1)
        rows.append({"answer": gold, "prediction": f"Step by step... so the answer is $\\boxed{{{answer}}}$."})
    return rows


def science_rows(good: bool) -> list[dict]:
    rows = []
    for i, gold in enumerate(LETTERS):
        chosen = gold if good else LETTERS[(i + 3) % len(LETTERS)]
        rows.append({"answer": gold, "prediction": f"Options weighed.\n\nThe answer is ({chosen})."})
    return rows


def tool_rows(workspace, good: bool) -> list[dict]:
    """GSM8K's own calculator annotations (``<<48/2=24>>``) as gold calls; a wrong one has another expression."""
    rows = []
    for r in load_gsm8k(workspace.corpora, "test")[:12]:
        expression = r["answer"].split("<<", 1)[1].split("=", 1)[0]
        gold = {"name": "calculator", "arguments": {"expression": expression}}
        said = gold if good else {"name": "calculator", "arguments": {"expression": expression + "+1"}}
        prediction = format_assistant_text("", "Compute.", [said])
        rows.append({"tools": [TOOL], "gold_calls": [gold], "prediction": prediction})
    return rows


@pytest.mark.parametrize("suite", list(SCORERS))
def test_known_good_files_score_100_percent_and_known_bad_0_percent(workspace, tmp_path, suite):
    build = {"math": lambda good: math_rows(workspace, good), "science": science_rows,
             "tool_use": lambda good: tool_rows(workspace, good)}[suite]
    good_rows, good = score_file(suite, write(tmp_path / "good.jsonl", build(True)))
    assert good["n"] >= 10 and good["accuracy"] == 1.0 and good["bad_rows"] == 0, good_rows
    bad_rows, bad = score_file(suite, write(tmp_path / "bad.jsonl", build(False)))
    assert bad["n"] == good["n"] and bad["correct"] == 0, bad_rows
    assert all(r["reason"] for r in bad_rows)
    assert [r["line"] for r in good_rows] == list(range(1, good["n"] + 1))


def test_a_bad_line_is_named_and_the_others_are_scored(tmp_path):
    rows = [{"answer": "B", "prediction": "(B)"}, "{not json", {"answer": "K", "prediction": "(K)"},
            {"answer": "C", "prediction": "(D)", "id": "q4"}]
    scored, summary = score_file("science", write(tmp_path / "mixed.jsonl", rows))
    assert [(r["line"], r["correct"]) for r in scored] == [(1, True), (4, False)]
    assert summary["n"] == 2 and summary["correct"] == 1 and summary["accuracy"] == 0.5 and summary["bad_rows"] == 2
    assert summary["bad_lines"][0].startswith(f"{tmp_path / 'mixed.jsonl'}:2: <json>")
    assert summary["bad_lines"][1].startswith(f"{tmp_path / 'mixed.jsonl'}:3: answer")


def test_unknown_suite_and_missing_file_raise(tmp_path):
    with pytest.raises(KeyError, match="unknown suite"):
        score_file("poetry", write(tmp_path / "x.jsonl", []))
    with pytest.raises(FileNotFoundError):
        score_file("math", tmp_path / "absent.jsonl")


def test_cli_scores_a_file_writes_verdicts_and_reports_the_bad_line(workspace, tmp_path):
    rows = math_rows(workspace, True)[:3] + ['{"answer": "7", "prediction": '] + math_rows(workspace, False)[:1]
    source = write(tmp_path / "preds.jsonl", rows)
    result = CliRunner().invoke(app, ["eval", "score", "--suite", "math", str(source)])
    assert result.exit_code == 0, result.output
    assert "preds.jsonl:4: <json>" in result.output
    assert "75.00%" in result.output
    verdicts = [json.loads(line) for line in (tmp_path / "preds.scored.jsonl").read_text().splitlines()]
    assert [(v["line"], v["correct"]) for v in verdicts] == [(1, True), (2, True), (3, True), (5, False)]
    assert verdicts[3]["reason"].startswith("wrong answer") and verdicts[0]["extracted"] == rows[0]["answer"]


def test_cli_out_option_and_unusable_inputs(tmp_path):
    source = write(tmp_path / "calls.jsonl", science_rows(True)[:2])
    out = tmp_path / "v" / "verdicts.jsonl"
    result = CliRunner().invoke(app, ["eval", "score", "--suite", "science", str(source), "--out", str(out)])
    assert result.exit_code == 0 and len(out.read_text().splitlines()) == 2, result.output
    assert CliRunner().invoke(app, ["eval", "score", "--suite", "poetry", str(source)]).exit_code == 2
    assert CliRunner().invoke(app, ["eval", "score", "--suite", "math", str(tmp_path / "no.jsonl")]).exit_code == 2
    broken = write(tmp_path / "broken.jsonl", ['{"answer": 1}'])
    result = CliRunner().invoke(app, ["eval", "score", "--suite", "math", str(broken)])
    assert result.exit_code == 2
    assert "broken.jsonl:1: prediction" in result.output and "no row could be scored" in result.output
