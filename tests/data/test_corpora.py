"""The two eval sets shipped in Forge's own row format (corpora/mmlu_stem/, corpora/bfcl/): the loaders read them,
their counts are corpora/README.md's, every gold answer fits its question, and the scorers give the gold 100 % and a
changed answer 0 %.

PYTHONPATH=$PWD .venv/bin/pytest tests/data/test_corpora.py -q
"""

from __future__ import annotations

import gzip
from collections import Counter

import pytest

from forge.chat import format_assistant_text
from forge.data import corpora as C
from forge.data.jsonl import BadDataError
from forge.evals.scoring import SCORERS
from forge.evals.tool_calls import type_error

MMLU_STEM = {"abstract_algebra", "anatomy", "astronomy", "college_biology", "college_chemistry",
             "college_computer_science", "college_mathematics", "college_physics", "computer_security",
             "conceptual_physics", "electrical_engineering", "elementary_mathematics", "high_school_biology",
             "high_school_chemistry", "high_school_computer_science", "high_school_mathematics", "high_school_physics",
             "high_school_statistics", "machine_learning"}
BFCL_COUNTS = {"simple_python": 100, "multiple": 80, "parallel": 60, "parallel_multiple": 60}
BFCL_TYPE_NAMES = {"dict", "float", "tuple", "any"}  # converted to JSON Schema when the set was written


@pytest.fixture(scope="module")
def science(workspace) -> list[dict]:
    return C.load_science(workspace.corpora)


@pytest.fixture(scope="module")
def bfcl(workspace) -> list[dict]:
    return C.load_bfcl(workspace.corpora)


def test_science_is_25_questions_from_each_mmlu_stem_subject(science):
    assert len(science) == 475 and len({r["id"] for r in science}) == 475
    assert Counter(r["subject"] for r in science) == dict.fromkeys(MMLU_STEM, 25)
    assert {r["source"] for r in science} == {"mmlu/test"}
    for r in science:
        assert len(r["choices"]) == 4 and "ABCD".index(r["answer"]) < len(r["choices"]), r["id"]
        assert len(set(r["choices"])) == 4 and all(c.strip() for c in r["choices"]), r["id"]
    assert set(Counter(r["answer"] for r in science)) == set("ABCD")  # the gold is not always one letter


def test_science_gold_letters_score_100_percent_and_another_letter_0(science):
    suite = SCORERS["science"]
    for r in science:
        other = "ABCD"[("ABCD".index(r["answer"]) + 1) % 4]
        assert suite.score(suite.row(answer=r["answer"], prediction=f"The answer is ({r['answer']}).")).correct
        assert not suite.score(suite.row(answer=r["answer"], prediction=f"The answer is ({other}).")).correct


def test_bfcl_counts_and_single_turn_questions(bfcl):
    assert Counter(r["category"] for r in bfcl) == BFCL_COUNTS
    assert len({r["id"] for r in bfcl}) == len(bfcl)
    assert all(r["question"].strip() and r["id"].startswith(r["category"] + "_") for r in bfcl)
    assert all(len(r["gold_calls"]) == 1 for r in bfcl if not r["category"].startswith("parallel"))
    assert all(len(r["gold_calls"]) >= 2 for r in bfcl if r["category"].startswith("parallel"))


def _schemas(schema: dict):
    yield schema
    for sub in (schema.get("properties") or {}).values():
        yield from _schemas(sub)
    if isinstance(schema.get("items"), dict):
        yield from _schemas(schema["items"])


def test_bfcl_tools_are_openai_function_specs_in_json_schema_types(bfcl):
    for r in bfcl:
        for tool in r["tools"]:
            assert tool["type"] == "function" and tool["function"]["parameters"]["type"] == "object", r["id"]
            types = {s.get("type") for s in _schemas(tool["function"]["parameters"])}
            assert not types & BFCL_TYPE_NAMES, (r["id"], types)


def test_every_bfcl_gold_call_names_a_tool_and_fits_its_schema(bfcl):
    for r in bfcl:
        specs = {t["function"]["name"]: t["function"]["parameters"] for t in r["tools"]}
        for call in r["gold_calls"]:
            parameters = specs[call["name"]]
            properties = parameters["properties"]
            assert set(parameters["required"]) <= set(call["arguments"]), r["id"]
            for key, value in call["arguments"].items():
                assert type_error(value, properties[key], key) is None, r["id"]
            for key, values in call["alternatives"].items():
                assert key in properties, r["id"]
                assert all(type_error(v, properties[key], key) is None for v in values), r["id"]
                if key in call["arguments"]:
                    assert call["arguments"][key] in values, r["id"]


def _said(calls: list[dict]) -> str:
    return format_assistant_text("", "The question names every value.", calls)


def _changed(value):
    """A value of the same JSON type that no BFCL answer gives."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1000
    if isinstance(value, str):
        return value + " (changed)"
    if isinstance(value, list) and value:
        return [*value, value[0]]
    return None


def _perturbed(gold_calls: list[dict]) -> list[dict]:
    """The gold calls with one argument value changed (the first one that can be)."""
    calls = [{"name": c["name"], "arguments": dict(c["arguments"])} for c in gold_calls]
    for call in calls:
        for key, value in call["arguments"].items():
            if (new := _changed(value)) is not None:
                call["arguments"][key] = new
                return calls
    raise AssertionError(f"nothing to change in {gold_calls}")


def test_bfcl_gold_calls_score_100_percent_and_a_changed_argument_0(bfcl):
    suite = SCORERS["tool_use"]
    gold = [suite.score(suite.row(tools=r["tools"], gold_calls=r["gold_calls"], prediction=_said(
        [{"name": c["name"], "arguments": c["arguments"]} for c in r["gold_calls"]]))) for r in bfcl]
    assert all(s.correct for s in gold), [(r["id"], s.reason) for r, s in zip(bfcl, gold, strict=True) if not s.correct]
    changed = [suite.score(suite.row(tools=r["tools"], gold_calls=r["gold_calls"],
                                     prediction=_said(_perturbed(r["gold_calls"])))) for r in bfcl]
    assert not any(s.correct for s in changed)
    assert all("argument" in s.reason for s in changed), Counter(s.reason for s in changed)


def test_bfcl_alternatives_are_scored_as_right(bfcl):
    """A row whose gold lists another value for an argument: that value scores right too."""
    suite = SCORERS["tool_use"]
    tried = 0
    for r in bfcl:
        for i, call in enumerate(r["gold_calls"]):
            for key, values in call["alternatives"].items():
                for value in values:
                    calls = [{"name": c["name"], "arguments": dict(c["arguments"])} for c in r["gold_calls"]]
                    calls[i]["arguments"][key] = value
                    score = suite.score(suite.row(tools=r["tools"], gold_calls=r["gold_calls"], prediction=_said(calls)))
                    assert score.correct, (r["id"], key, value, score.reason)
                    tried += 1
    assert tried > 200


def test_both_sets_are_eval_texts(workspace, science, bfcl):
    texts = set(C.eval_texts(workspace.corpora))
    assert all(r["question"] in texts for r in science + bfcl)


@pytest.mark.parametrize(("folder", "loader", "old", "new", "where"), [
    ("mmlu_stem", C.load_science, b'"answer":"', b'"answer":"K', "test.jsonl.gz:1: answer"),
    ("bfcl", C.load_bfcl, b'"tools":[', b'"tools":[{"type":"function"},', "test.jsonl.gz:1: tools.0.function"),
])
def test_a_bad_row_names_file_line_and_field(workspace, tmp_path, folder, loader, old, new, where):
    (tmp_path / folder).mkdir()
    with gzip.open(workspace.corpora / folder / "test.jsonl.gz") as src:
        lines = src.read().splitlines(keepends=True)
    with gzip.open(tmp_path / folder / "test.jsonl.gz", "wb") as dst:
        dst.write(lines[0].replace(old, new, 1) + b"".join(lines[1:]))
    with pytest.raises(BadDataError, match=where):
        loader(tmp_path)


def _gsm8k_with(tmp_path, workspace, change) -> None:
    """tmp_path as a corpora folder whose gsm8k train file is the shipped one with ``change`` applied to its bytes."""
    (tmp_path / "gsm8k").mkdir()
    with gzip.open(workspace.corpora / "gsm8k" / "train.jsonl.gz") as src:
        lines = src.read().splitlines(keepends=True)
    (tmp_path / "gsm8k" / "train.jsonl.gz").write_bytes(change(lines))


@pytest.mark.parametrize(("change", "where"), [
    (lambda lines: gzip.compress(b"".join(lines[:2]) + b'{"question": "q", \n' + b"".join(lines[2:5])),
     r"train.jsonl.gz:3: not JSON"),
    (lambda lines: gzip.compress(b"".join(lines[:3]) + b'{"question": "q"}\n'), r"train.jsonl.gz:4: no field 'answer'"),
    (lambda lines: gzip.compress(b"".join(lines[:1]) + b"[1, 2]\n"), r"train.jsonl.gz:2: a JSON object expected"),
    (lambda lines: gzip.compress(b"".join(lines[:50]))[:-200], r"train.jsonl.gz: cannot be read"),
    (lambda lines: b"".join(lines[:3]), r"train.jsonl.gz: cannot be read \(Not a gzipped file"),
])
def test_a_damaged_upstream_corpus_file_names_file_line_and_field(workspace, tmp_path, change, where):
    _gsm8k_with(tmp_path, workspace, change)
    with pytest.raises(BadDataError, match=where):
        C.load_gsm8k(tmp_path, "train")


def test_an_intact_upstream_file_reads_as_plain_rows(workspace):
    rows = C.load_gsm8k(workspace.corpora, "train")
    assert len(rows) > 1000 and rows[0]["final"] and rows[0]["question"]
    assert C.load_math500(workspace.corpora)[0].get("no such field") is None  # .get is not a missing field
