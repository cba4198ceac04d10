"""Math answers: the final answer taken from raw model output and checked against the gold with math-verify.

    from forge.evals.math import score_math, extract_answer
    extract_answer("... so the answer is $\\boxed{\\frac{1}{2}}$.")    # "\\frac{1}{2}"
    score_math("1/2", "The answer is 0.5.")                           # Score(correct=True, ...)
    score_math("1/2", "...", time_limit=5.0)                          # a slow check is "timeout", not a hang

The final answer is the last ``\\boxed{...}`` (nested braces), else the last "the answer is X" / "Answer: X",
else the last number; only the text after ``</think>`` is read when the output has one (the reasoning may box
intermediate results). Equivalence is math-verify's (``docs/stack.md``): ``\\frac{1}{2}``, ``\\dfrac12``, ``0.5``
and ``1/2`` are one answer, ``3.0`` is ``3``, and ``x=3`` answers ``3``.

Percent: a ``%`` or ``\\%`` is dropped from both sides before comparing, the convention of MATH-style graders
(an answer asked "in percent" is graded on its number): ``50\\%`` matches a gold ``50`` or ``50\\%``, not ``1/2``.

math-verify's own timeouts use SIGALRM, which only works on the main thread, so they are switched off
(``parsing_timeout=None, timeout_seconds=None``) and each check runs in a daemon thread that is abandoned after
``time_limit`` seconds. A check stuck inside one C call that holds the GIL (a huge integer power) is not
interrupted until that call returns; everything sympy does in Python is.
"""

from __future__ import annotations

import logging
import re
import threading

from forge.data.corpora import last_boxed
from forge.evals.score import Score

DEFAULT_TIME_LIMIT = 10.0  # seconds per row; MATH-500 answers verify in milliseconds
MAX_ANSWER_CHARS = 1_000  # longer "answers" are rambling, not a final answer, and only slow sympy down

_ANSWER_IS = re.compile(r"(?:the\s+(?:final\s+)?answer\s+is|answer\s*:)\s*:?\s*(.+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


class _OwnTimeout(logging.Filter):
    """Drops math-verify's "Timeout is disabled" warning: the time limit here is ours (run_with_time_limit)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_OwnTimeout())


def _final_part(text: str) -> str:
    _head, closed, rest = text.rpartition("</think>")
    return rest if closed and rest.strip() else text


def _tidy(answer: str) -> str:
    """``**$x=3$**.`` → ``x=3``: the sentence's period, bold and dollars around an answer are not part of it."""
    answer = answer.strip().rstrip(".").strip().strip("*").strip()
    answer = answer.removeprefix("$").removesuffix("$").strip() if answer.count("$") == 2 else answer.strip("$ ")
    return answer.rstrip(".").strip()


def extract_answer(text: str) -> str | None:
    """The final answer in raw model output (see the module docstring), or None when there is none."""
    text = _final_part(text)
    boxed = last_boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip()
    stated = [m.group(1) for m in _ANSWER_IS.finditer(text)]
    for candidate in reversed(stated):
        line = candidate.split("\n", 1)[0]
        # "The answer is 18. We can check ..." → "18": the sentence ends at a period followed by a space.
        line = re.split(r"(?<!\d)\.\s|\.\s+(?=[A-Z])", line, maxsplit=1)[0]
        if tidy := _tidy(line):
            return tidy
    numbers = _NUMBER.findall(text)
    return numbers[-1].rstrip(",") if numbers else None


def normalize(answer: str) -> str:
    """The answer as math-verify should read it: no dollars, no percent sign, no thousands commas."""
    answer = _tidy(answer)
    answer = answer.replace("\\%", "").replace("%", "").replace("\\!", "").strip()
    if _THOUSANDS.fullmatch(answer):
        answer = answer.replace(",", "")
    return answer


def _loose(answer: str) -> str:
    """String form for answers sympy cannot read (names, words): no spacing, no \\text{}, lower case."""
    answer = re.sub(r"\\(?:text|textbf|mathrm)\{([^{}]*)\}", r"\1", answer)
    return re.sub(r"\s+|\\[,;: ]|\\left|\\right", "", answer).lower()


def equivalent(gold: str, answer: str) -> bool:
    """math-verify's verdict on two answer strings (no timeout here: call it through :func:`score_math`)."""
    from math_verify import parse, verify  # imported here: it pulls in sympy and the LaTeX grammar

    gold_n, answer_n = normalize(gold), normalize(answer)
    parsed_gold = parse(f"${gold_n}$", parsing_timeout=None)
    parsed_answer = parse(f"${answer_n}$", parsing_timeout=None)
    if parsed_gold and parsed_answer and verify(parsed_gold, parsed_answer, timeout_seconds=None):
        return True
    return _loose(gold_n) == _loose(answer_n)


def run_with_time_limit(fn, *args, seconds: float):
    """``(finished, value)``: ``fn(*args)`` run in a daemon thread, given up on after ``seconds``.

    A daemon thread, not an executor: a thread still busy with an abandoned check must not keep the process
    alive at exit. An exception inside ``fn`` is raised here.
    """
    box: dict = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = err

    worker = threading.Thread(target=target, name="forge-math-verify", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        return False, None
    if "error" in box:
        raise box["error"]
    return True, box["value"]


def score_math(gold: str, prediction: str, *, time_limit: float = DEFAULT_TIME_LIMIT) -> Score:
    """Is the final answer in ``prediction`` (raw model output) equal to ``gold``? Reasons: "no answer found",
    "answer too long", "timeout", "wrong answer: X"."""
    answer = extract_answer(prediction)
    if answer is None:
        return Score.wrong("no answer found")
    if len(answer) > MAX_ANSWER_CHARS:
        return Score.wrong("answer too long", answer[:MAX_ANSWER_CHARS])
    try:
        finished, same = run_with_time_limit(equivalent, str(gold), answer, seconds=time_limit)
    except Exception as err:  # noqa: BLE001 - a parser crash on untrusted output is a wrong answer
        return Score.wrong(f"unreadable answer: {type(err).__name__}", answer)
    if not finished:
        return Score.wrong("timeout", answer)
    return Score.right(answer) if same else Score.wrong(f"wrong answer: {answer}", answer)
