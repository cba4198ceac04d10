"""The scoring suites and the file scorer: a JSONL file of predictions in, one verdict per row and a summary out.

    from forge.evals.scoring import SCORERS, score_file
    rows, summary = score_file("math", "preds.jsonl")
    summary      # {"n": 500, "correct": 412, "accuracy": 0.824, "bad_rows": 1, "bad_lines": ["preds.jsonl:7: ..."]}
    rows[0]      # {"line": 1, "correct": True, "reason": None, "extracted": "\\frac{1}{2}"}
    SCORERS["science"].score(SCORERS["science"].row(answer="B", prediction="(B)"))

Row formats (extra fields, such as an id, are ignored):

- ``math``: ``answer`` (gold, a string or a number) and ``prediction`` (raw model output), forge/evals/math.py;
- ``science``: ``answer`` (the gold letter, A–J) and ``prediction``, forge/evals/choice.py;
- ``tool_use``: ``tools`` (OpenAI function specs), ``gold_calls`` (``[{"name", "arguments"}]``, each optionally with
  ``alternatives``, ``{argument: [values that count as right]}``) and ``prediction``, forge/evals/tool_calls.py.

Lines are read with forge/data/jsonl.py: a bad line is named by file, line and field and the good ones are still
scored. Math rows are checked one at a time in a worker process, each under ``time_limit`` seconds
(forge/evals/math.py). The `forge eval
score` command and the evaluation run call the same scorers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from forge.data.jsonl import read_jsonl
from forge.data.schemas import GoldCall
from forge.evals.choice import LETTERS, score_choice
from forge.evals.math import DEFAULT_TIME_LIMIT, score_math
from forge.evals.score import Score
from forge.evals.tool_calls import score_tool_calls


class MathRow(BaseModel):
    model_config = ConfigDict(extra="ignore")
    answer: str
    prediction: str

    @field_validator("answer", mode="before")
    @classmethod
    def _number_as_text(cls, value: Any) -> Any:
        # Gold answers stored as JSON numbers (AMC's 27.0) are compared as written.
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


class ChoiceRow(BaseModel):
    model_config = ConfigDict(extra="ignore")
    answer: str = Field(pattern=f"^[{LETTERS}{LETTERS.lower()}]$", description="The gold letter, A–J.")
    prediction: str


class ToolUseRow(BaseModel):
    model_config = ConfigDict(extra="ignore")
    tools: list[dict[str, Any]] = Field(min_length=1)
    gold_calls: list[GoldCall]
    prediction: str

    @field_validator("tools")
    @classmethod
    def _named(cls, tools: list[dict]) -> list[dict]:
        for tool in tools:
            spec = tool.get("function", tool)
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
                raise ValueError("every tool needs a function name")  # noqa: TRY004 - pydantic reports ValueErrors
        return tools


@dataclass(frozen=True)
class Suite:
    """A scoring suite: the row schema of its files and the scorer of one row."""

    name: str
    row: type[BaseModel]
    score: Callable[..., Score]


def _math(row: MathRow, time_limit: float = DEFAULT_TIME_LIMIT) -> Score:
    return score_math(row.answer, row.prediction, time_limit=time_limit)


def _science(row: ChoiceRow, time_limit: float = DEFAULT_TIME_LIMIT) -> Score:
    return score_choice(row.answer, row.prediction)


def _tool_use(row: ToolUseRow, time_limit: float = DEFAULT_TIME_LIMIT) -> Score:
    gold = [call.model_dump() for call in row.gold_calls]
    return score_tool_calls(row.tools, gold, row.prediction)


SCORERS: dict[str, Suite] = {
    "math": Suite("math", MathRow, _math),
    "science": Suite("science", ChoiceRow, _science),
    "tool_use": Suite("tool_use", ToolUseRow, _tool_use),
}


def summarize(scores: list[Score], bad_lines: list[str] | None = None, n_bad: int = 0) -> dict:
    """``{n, correct, accuracy, bad_rows, bad_lines}`` of scored rows (accuracy 0.0 when nothing was scored)."""
    correct = sum(s.correct for s in scores)
    return {"n": len(scores), "correct": correct, "accuracy": correct / len(scores) if scores else 0.0,
            "bad_rows": n_bad, "bad_lines": list(bad_lines or [])}


def score_file(
    suite: str, path: str | os.PathLike, *, time_limit: float = DEFAULT_TIME_LIMIT
) -> tuple[list[dict], dict]:
    """Score every good line of ``path`` with ``SCORERS[suite]``: ``(rows, summary)``.

    ``rows`` are ``{"line", "correct", "reason", "extracted"}`` in file order; ``summary`` is :func:`summarize`'s,
    its ``bad_lines`` the unreadable lines as ``file:line: field: reason``. Raises KeyError for an unknown suite and
    FileNotFoundError for a missing file.
    """
    if suite not in SCORERS:
        raise KeyError(f"unknown suite {suite!r}; suites: {', '.join(SCORERS)}")
    spec = SCORERS[suite]
    read = read_jsonl(path, spec.row)
    scores = [spec.score(row, time_limit=time_limit) for row in read.rows]
    rows = [{"line": line, **asdict(s)} for line, s in zip(read.line_nos, scores, strict=True)]
    return rows, summarize(scores, [str(b) for b in read.bad], read.n_bad)
