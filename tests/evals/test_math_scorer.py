"""The math scorer: final-answer extraction from raw output, math-verify equivalence, and the per-row time limit
(a worker process killed past it).

PYTHONPATH=$PWD .venv/bin/pytest tests/evals/test_math_scorer.py -q
"""

import time

import pytest

from forge.data.corpora import load_competition_math, load_gsm8k, load_math500
from forge.evals.math import extract_answer, score_math


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),  # boxed, nested braces kept whole
        ("\\boxed{3} at first, but then \\boxed{\\sqrt{2}}", "\\sqrt{2}"),  # the last box wins
        ("<think>maybe \\boxed{7}</think>The answer is 8.", "8"),  # the reasoning's box is not the answer
        ("We get 12 apples. The answer is 18. Check: ok", "18"),  # the sentence ends at ". "
        ("Answer: $\\frac{3}{4}$", "\\frac{3}{4}"),  # dollars dropped
        ("The final answer is **42**.", "42"),  # bold dropped
        ("first 12, then 1,234 in total", "1,234"),  # the last number, thousands commas kept for normalize
        ("I have no idea.", None),  # nothing to read
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("gold", "prediction", "correct"),
    [
        ("1/2", "\\boxed{\\frac{1}{2}}", True),  # LaTeX fraction
        ("1/2", "The answer is 0.5.", True),  # decimal
        ("1/2", "Answer: 1/2", True),  # plain fraction
        ("1/2", "\\boxed{\\dfrac12}", True),  # \dfrac with single-digit arguments
        ("\\frac{1}{2}", "so it is 0.5", True),  # LaTeX gold, last-number prediction
        ("3", "\\boxed{3.0}", True),  # trailing zero
        ("3", "The answer is $x=3$.", True),  # an equation answering for its value
        ("50", "\\boxed{50\\%}", True),  # percent dropped: MATH graders grade the number
        ("50\\%", "The answer is 50.", True),  # ... on either side
        ("1,000", "The answer is 1000", True),  # thousands separator
        ("\\text{Evelyn}", "Answer: Evelyn", True),  # a name: compared as text
        ("1/2", "\\boxed{50\\%}", False),  # percent is not read as a fraction (module docstring)
        ("1/2", "\\boxed{0.6}", False),  # wrong decimal
        ("3", "The answer is 4.", False),  # wrong integer
        ("3", "\\boxed{x=4}", False),  # wrong equation
        ("\\text{Evelyn}", "Answer: Bob", False),  # wrong name
    ],
)
def test_equivalent_forms(gold, prediction, correct):
    score = score_math(gold, prediction)
    assert score.correct is correct, score
    assert (score.reason is None) is correct


def test_reasons():
    assert score_math("3", "no idea").reason == "no answer found"
    assert score_math("3", "The answer is 4.").reason == "wrong answer: 4"


def _gold_answers(corpora):
    """Real gold answers: GSM8K test finals, MATH-500 answers, AIME 2024 / AMC 2023 answers (corpora/README.md)."""
    gsm8k = [r["final"] for r in load_gsm8k(corpora, "test")[:30]]
    math500 = [r["answer"] for r in load_math500(corpora)[:60]]
    competition = [str(r["answer"]) for r in load_competition_math(corpora)[:20]]
    return gsm8k + math500 + competition


def _value(answer: str) -> str:
    return answer.rpartition("=")[2].replace(" ", "")


def test_real_gold_answers_score_100_percent_boxed_and_0_percent_when_swapped(workspace):
    golds = _gold_answers(workspace.corpora)
    right = [score_math(g, f"Putting it together, the answer is $\\boxed{{{g}}}$.") for g in golds]
    assert sum(s.correct for s in right) == len(golds), [(g, s) for g, s in zip(golds, right) if not s.correct]
    # A wrong answer: each gold paired with the next gold's box, skipping pairs of one value ("5" and "x=5").
    pairs = [(g, o) for g, o in zip(golds, golds[1:] + golds[:1]) if _value(g) != _value(o)]
    wrong = [score_math(g, f"The answer is $\\boxed{{{o}}}$.") for g, o in pairs]
    assert len(pairs) > 90
    assert sum(s.correct for s in wrong) == 0, [(p, s) for p, s in zip(pairs, wrong) if s.correct]


def test_a_check_past_its_time_limit_is_a_timeout_not_a_hang():
    assert score_math("1", "\\boxed{1}").correct  # the worker started, so its start-up is not timed below
    # A rational sum sympy adds term by term: about 3 s on 2 cores.
    slow = "\\boxed{\\sum_{n=1}^{3000} \\frac{1}{n^2+1}}"
    start = time.monotonic()
    score = score_math("5", slow, time_limit=0.3)
    assert time.monotonic() - start < 2.5  # cut, not finished (finishing takes ~3 s on a quiet machine, more if busy)
    assert (score.correct, score.reason) == (False, "timeout")
    # One integer power that holds the GIL for ~20 s: only a killed process gives it up in time.
    start = time.monotonic()
    assert score_math("5", "\\boxed{2^{10^{10}}}", time_limit=0.5).reason == "timeout"
    assert time.monotonic() - start < 10  # cut, not finished (~20 s): the limit, a new worker's start-up, slack
    # The killed worker is replaced for the next row.
    assert score_math("1/2", "\\boxed{0.5}").correct
