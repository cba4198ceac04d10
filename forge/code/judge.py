"""The correctness judge: extract a program from a model's answer, check its format, run the problem's tests.

    from forge.code.judge import judge_correctness
    verdict = judge_correctness(problem, completion_text)
    verdict.format_ok, verdict.pass_rate

Format: the answer holds a fenced code block (```python / ```cpp; a bare fence counts) whose code parses
(Python: ``ast.parse``; C++: a ``main`` function is present, the compiler has the final word when it runs).
Function problems (HumanEval, MBPP) also accept a body that continues the problem's prefix (base-model style).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from forge import pyast
from forge.code.problems import Problem
from forge.code.runner import TestReport, default_workers, run_tests

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9+#]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_LANGS = {"python": "python", "python3": "python", "py": "python", "cpp": "cpp", "c++": "cpp", "cc": "cpp", "": ""}


@dataclass(frozen=True)
class Extracted:
    code: str
    lang: str  # "python" or "cpp"
    fenced: bool


def extract_code(completion: str, default_lang: str = "python") -> Extracted | None:
    """The first fenced block in a known language (a bare fence as ``default_lang``); None without a fence.
    An unterminated fence (a length cut-off) runs to the end."""
    for tag, body in _FENCE.findall(completion):
        lang = _LANGS.get(tag.lower())
        if lang is None:
            continue
        return Extracted(body, lang or default_lang, True)
    return None


def parses(code: str, lang: str) -> bool:
    """Python: the code parses; C++: it has a ``main`` (compiling costs a sandboxed g++ run, left to the tests)."""
    if lang == "cpp":
        return re.search(r"\bint\s+main\s*\(", code) is not None
    try:
        pyast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return bool(code.strip())


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def build_program(problem: Problem, completion: str) -> tuple[str, str, bool]:
    """(program, lang, format_ok) for a completion. Without a fence the raw text is tried (format_ok False)."""
    found = extract_code(completion)
    code, lang, fenced = (found.code, found.lang, True) if found else (completion, "python", False)
    if problem.kind == "function" and problem.prefix and not _defines(code, problem.entry_point):
        code = problem.prefix + code  # a body continuing the signature
    elif problem.kind == "function" and problem.prefix:
        code = f"{problem.prefix}\n    pass\n\n\n{code}"  # keep the prompt's imports and helpers defined
    return code, lang, fenced and parses(code, lang)


@dataclass(frozen=True)
class CorrectnessVerdict:
    problem_id: str
    format_ok: bool
    pass_rate: float
    passed: int
    total: int
    statuses: tuple[str, ...]
    lang: str

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


def run_problem_tests(problem: Problem, program: str, lang: str = "python", **options) -> TestReport:
    """The problem's tests against a program (options: time_limit_s, memory_mb, ...)."""
    options.setdefault("time_limit_s", 2.0)
    options.setdefault("memory_mb", 512)
    return run_tests(
        program, problem.tests, lang=lang, entry_point=problem.entry_point or None, setup=problem.setup, **options
    )


def judge_correctness(problem: Problem, completion: str, **options) -> CorrectnessVerdict:
    """Pass rate of a completion on ``problem`` (0 when nothing runnable can be extracted)."""
    program, lang, format_ok = build_program(problem, completion)
    if not program.strip():
        return CorrectnessVerdict(problem.id, False, 0.0, 0, len(problem.tests), (), lang)
    report = run_problem_tests(problem, program, lang, **options)
    statuses = tuple(o.status for o in report.outcomes)
    return CorrectnessVerdict(problem.id, format_ok, report.pass_rate, report.passed, report.n, statuses, lang)


def judge_many(problems: Sequence[Problem], completions: Sequence[str], workers: int | None = None, **options):
    """One verdict per (problem, completion), ``workers`` sandboxes at a time (default: the cores)."""
    if len(problems) != len(completions):
        raise ValueError(f"{len(problems)} problems but {len(completions)} completions")
    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        return list(pool.map(lambda pc: judge_correctness(pc[0], pc[1], **options), zip(problems, completions)))


def fence(code: str, lang: str = "python") -> str:
    """A completion that answers with ``code`` in a fenced block (how tests and SFT targets phrase answers)."""
    return f"```{lang}\n{code.rstrip()}\n```"
