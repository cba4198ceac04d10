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
(``parsing_timeout=None, timeout_seconds=None``) and the checks run in one worker process (:class:`Checker`,
started at the first check), killed and replaced when a check runs past ``time_limit`` seconds. A thread could
not do it: ``2^{10^{10}}`` is a single integer power that holds the GIL for about 20 s, so a thread's timeout only
fires after it. Scoring from several threads is safe (the worker takes one check at a time).
"""

from __future__ import annotations

import json
import logging
import os
import re
import select
import subprocess
import sys
import threading
from pathlib import Path

from forge.data.corpora import last_boxed
from forge.evals.score import Score

DEFAULT_TIME_LIMIT = 10.0  # seconds per row; MATH-500 answers verify in milliseconds
STARTUP_LIMIT = 120.0  # seconds for a fresh worker to import sympy and math-verify (not charged to a row)
MAX_ANSWER_CHARS = 1_000  # longer "answers" are rambling, not a final answer, and only slow sympy down

_ANSWER_IS = re.compile(r"(?:the\s+(?:final\s+)?answer\s+is|answer\s*:)\s*:?\s*(.+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


class _OwnTimeout(logging.Filter):
    """Drops math-verify's "Timeout is disabled" warning: the time limit here is ours (Checker)."""

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


def serve() -> None:
    """The worker's loop (run by :class:`Checker` as ``python -c``): a JSON line ``[gold, answer]`` in on stdin,
    ``["ok", same]`` or ``["error", exception name]`` out on stdout, until stdin closes."""
    import math_verify  # noqa: F401 - imported before "ready", so no row pays for it

    # The protocol owns the real stdout; anything a library prints goes to stderr instead.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    out.write('["ready", null]\n')
    out.flush()
    for line in sys.stdin:
        gold, answer = json.loads(line)
        try:
            reply = ["ok", equivalent(gold, answer)]
        except Exception as err:  # noqa: BLE001 - a parser crash on untrusted output is that row's verdict
            reply = ["error", type(err).__name__]
        out.write(json.dumps(reply) + "\n")
        out.flush()


class Checker:
    """:func:`equivalent` in a worker process, killed past a row's limit and started again for the next row.

    A plain subprocess (``python -c``), not multiprocessing: spawn would re-run the caller's ``__main__`` (a
    script without a main guard would score itself recursively) and fork would copy locks held by the caller's
    other threads (Prefect, logging).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None

    def _start(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # the directory holding the forge package
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from forge.evals.math import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
        )
        if self._reply(STARTUP_LIMIT) != ["ready", None]:
            self.stop()
            raise RuntimeError(f"the math-verify worker did not start in {STARTUP_LIMIT:.0f} s")

    def _reply(self, seconds: float) -> list | None:
        """The worker's next line, or None when it wrote none within ``seconds`` (or died)."""
        ready, _, _ = select.select([self._proc.stdout], [], [], seconds)
        line = self._proc.stdout.readline() if ready else ""
        return json.loads(line) if line else None

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc.stdin.close()
            self._proc.stdout.close()
        self._proc = None

    def check(self, gold: str, answer: str, seconds: float) -> tuple[str, bool | str | None]:
        """``("ok", same)``, ``("error", exception name)``, or ``("timeout", None)`` after ``seconds``."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self.stop()
                self._start()
            try:
                self._proc.stdin.write(json.dumps([gold, answer]) + "\n")
                self._proc.stdin.flush()
            except BrokenPipeError:
                reply = None
            else:
                reply = self._reply(seconds)
            if reply is None:
                died = self._proc.poll() is not None  # out of memory, say: not the answer's fault alone
                self.stop()
                return ("error", "worker died") if died else ("timeout", None)
            return reply[0], reply[1]


CHECKER = Checker()


def score_math(gold: str, prediction: str, *, time_limit: float = DEFAULT_TIME_LIMIT) -> Score:
    """Is the final answer in ``prediction`` (raw model output) equal to ``gold``? Reasons: "no answer found",
    "answer too long", "timeout", "wrong answer: X"."""
    answer = extract_answer(prediction)
    if answer is None:
        return Score.wrong("no answer found")
    if len(answer) > MAX_ANSWER_CHARS:
        return Score.wrong("answer too long", answer[:MAX_ANSWER_CHARS])
    kind, value = CHECKER.check(str(gold), answer, time_limit)
    if kind == "timeout":
        return Score.wrong("timeout", answer)
    if kind == "error":
        return Score.wrong(f"unreadable answer: {value}", answer)
    return Score.right(answer) if value else Score.wrong(f"wrong answer: {answer}", answer)
