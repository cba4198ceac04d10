"""Run every test of a submission and collect per-test verdicts: the execution half of the judge.

Python submissions run all their tests in one sandboxed run (the per-process cost dominates: ~75 runs/s one per
test against thousands of tests/s batched, docs/stack.md): the sandboxed candidate server (``_harness.py``) holds the
code and answers one request per test; Forge, outside the sandbox, holds the expected answers, sends the inputs,
decodes the answers into plain values and decides every verdict (the code cannot reach any of that).
C++ is compiled once and its binary runs once per test (a process start costs little for native code).

    from forge.code.runner import Test, run_tests
    report = run_tests("def add(a, b):\\n    return a + b\\n", [Test.call("add", [1, 2], 3)])
    assert report.pass_rate == 1.0

A test that times out or kills the candidate ends that run; the rest are re-run in a fresh one (at most
``max_restarts`` times, then they count as failed), so one bad test does not sink the others.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from forge.code import wire
from forge.code.sandbox import RunEnded, SandboxResult, compile_cpp, run_compiled, run_python

_WIRE = Path(wire.__file__).read_text(encoding="utf-8")
_HARNESS = _WIRE + "\n\n" + Path(__file__).with_name("_harness.py").read_text(encoding="utf-8")

Kind = Literal["stdio", "call", "assert"]
# Per-test statuses: pass; fail (wrong answer or an exception); timeout; died (the process ended mid-test);
# skipped (after too many restarts); or the sandbox's status when the whole run ended without a verdict.
PASS = "pass"


@dataclass(frozen=True)
class Test:
    __test__ = False  # not a pytest class

    kind: Kind
    input: str = ""  # stdio: standard input
    output: str | None = None  # stdio: expected standard output (whitespace-insensitive); None = run only
    fn: str = ""  # call: function name
    args: tuple = ()  # call: positional arguments (plain values)
    expected: Any = None  # call: expected return value (plain values; floats within tolerance)
    code: str = ""  # assert: trusted test code run by the checker, the submission's functions as proxies

    @classmethod
    def stdio(cls, input: str, output: str | None = None) -> Test:
        return cls("stdio", input=input, output=output)

    @classmethod
    def call(cls, fn: str, args: Sequence, expected: Any) -> Test:
        return cls("call", fn=fn, args=tuple(args), expected=expected)

    @classmethod
    def check(cls, code: str) -> Test:
        return cls("assert", code=code)


@dataclass(frozen=True)
class TestOutcome:
    status: str
    seconds: float  # wall-clock, as the checker saw it
    detail: str = ""
    cpu_seconds: float | None = None  # the candidate's CPU time for this test (batched Python runs)

    @property
    def passed(self) -> bool:
        return self.status == PASS


@dataclass
class TestReport:
    """All tests of one submission: verdicts in test order, plus the last sandbox run (for its stderr)."""

    outcomes: list[TestOutcome]
    runs: int = 0
    compile_error: str = ""
    last_run: SandboxResult | None = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return len(self.outcomes)

    @property
    def passed(self) -> int:
        return sum(o.passed for o in self.outcomes)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.n if self.n else 0.0

    @property
    def all_passed(self) -> bool:
        return self.n > 0 and self.passed == self.n

    def seconds(self) -> list[float]:
        return [o.seconds for o in self.outcomes]


_TOP_LEVEL_DEF = re.compile(r"^(?:async[ \t]+)?def[ \t]+([^\W\d]\w*)[ \t]*\(", re.MULTILINE)


def defined_functions(source: str) -> list[str]:
    """Names of the functions ``source`` defines at top level, by a scan of its lines (never executed, never
    parsed: parsing a HumanEval solution into an AST cost the checker ~0.5 ms, a tenth of a whole run,
    bench/code_judge.py). Each name gets a proxy in the checker; a ``def`` the scan finds inside a string, or in
    code that does not compile, gets one that answers an error, which fails the test as the missing name would."""
    return list(dict.fromkeys(_TOP_LEVEL_DEF.findall(source)))


def run_tests(
    source: str,
    tests: Sequence[Test],
    *,
    lang: str = "python",
    time_limit_s: float = 2.0,
    memory_mb: int = 256,
    entry_point: str | None = None,
    setup: str = "",
    max_restarts: int = 3,
    float_tol: float = 1e-6,
    allow_weak_isolation: bool = False,
) -> TestReport:
    """Judge ``source`` on ``tests``; ``time_limit_s`` is per test, ``setup`` runs in the checker before each
    assert test (e.g. MBPP's test_setup_code)."""
    if lang == "cpp":
        return _run_cpp(source, tests, time_limit_s, memory_mb, allow_weak_isolation)
    if lang != "python":
        raise ValueError(f"unknown language {lang!r}")
    functions = defined_functions(source)
    outcomes: list[TestOutcome] = []
    report = TestReport(outcomes)
    while len(outcomes) < len(tests):
        remaining = tests[len(outcomes) :]
        if report.runs > max_restarts:
            outcomes += [TestOutcome("skipped", 0.0, "too many restarts")] * len(remaining)
            break
        checker = _Checker(remaining, functions, entry_point, setup, float_tol, time_limit_s)
        result = run_python(
            _HARNESS,
            timeout_s=time_limit_s * len(remaining) + 2.0,
            memory_mb=memory_mb,
            max_output_bytes=MAX_ANSWER_BYTES,
            allow_weak_isolation=allow_weak_isolation,
            extra_files={"solution.py": source},
            trusted_main=True,
            dialogue=checker.run,
        )
        report.runs += 1
        report.last_run = result
        if not checker.outcomes:  # nothing was answered: every remaining test gets the run's status
            status = "died" if result.status == "ok" else result.status
            outcomes += [TestOutcome(status, 0.0, result.stderr[-300:])] * len(remaining)
            break
        outcomes += checker.outcomes
    return report


MAX_ANSWER_BYTES = 1 << 22  # per answer line and for stderr


class _CandidateDied(Exception):
    pass


class _Checker:
    """Forge's side of a batched run: sends each test's input, decides the verdict from the answer, times it.

    The expected answers never enter the sandbox; answers are decoded into plain values (forge/code/wire.py)
    before any comparison, so nothing the submission defines is ever called here."""

    def __init__(self, tests, functions, entry_point, setup, tol, time_limit_s) -> None:
        self.tests, self.functions, self.entry_point = tests, functions, entry_point
        self.setup, self.tol, self.time_limit_s = setup, tol, time_limit_s
        self.outcomes: list[TestOutcome] = []
        self.deadline = 0.0

    def ask(self, channel, request: dict, payload: bytes = b"") -> Any:
        try:
            line = channel.ask(json.dumps(request).encode() + b"\n" + payload, self.deadline)
        except RunEnded:
            raise _CandidateDied("the submission's process ended") from None
        try:
            reply = json.loads(line)
            if "err" in reply:
                raise RuntimeError(str(reply["err"])[:300])
            return wire.decode(reply["ok"])
        except (ValueError, KeyError, TypeError, RecursionError, AttributeError) as err:
            raise RuntimeError(f"unreadable answer ({type(err).__name__})") from None

    def run(self, channel) -> None:
        for test in self.tests:
            start = time.monotonic()
            self.deadline = start + self.time_limit_s
            cpu_start = channel.cpu_seconds()
            try:
                passed, detail = self.check(channel, test)
                status = PASS if passed else "fail"
            except TimeoutError:
                status, detail = "timeout", ""
            except OverflowError:
                status, detail = "output_limit", ""
            except _CandidateDied as err:
                status, detail = "died", str(err)
            except Exception as err:  # noqa: BLE001 - a failed assert, an error answer, a bad value: the test fails
                status, detail = "fail", f"{type(err).__name__}: {err}"[:300]
            cpu = channel.cpu_seconds() - cpu_start
            self.outcomes.append(
                TestOutcome(status, time.monotonic() - start, detail, cpu if math.isfinite(cpu) else None)
            )
            if status in ("timeout", "died", "output_limit"):
                if status != "died":
                    channel.kill()
                return

    def check(self, channel, test: Test) -> tuple[bool, str]:
        if test.kind == "stdio":
            data = test.input.encode("utf-8")
            got = self.ask(channel, {"op": "stdio", "len": len(data)}, data)
            ok = test.output is None or (isinstance(got, str) and got.split() == test.output.split())
            return ok, str(got)[:200]
        if test.kind == "call":
            request = {"op": "call", "fn": test.fn, "args": wire.encode(list(test.args)), "kwargs": {"$d": []}}
            got = self.ask(channel, request)
            return same(got, test.expected, self.tol), repr(got)[:200]
        # "assert": trusted test code, run here with the submission's functions as proxies
        names = {n: self._proxy(channel, n) for n in self.functions}
        scope = {"__name__": "__checker__", **names}
        if self.entry_point in names:
            scope["candidate"] = names[self.entry_point]
        # Trusted dataset code (HumanEval's check, MBPP's asserts), never the submission: it runs here.
        if self.setup:
            exec(_compiled(self.setup), scope)  # noqa: S102
        exec(_compiled(test.code), scope)  # noqa: S102
        return True, ""

    def _proxy(self, channel, name: str):
        def call(*args, **kwargs):
            request = {"op": "call", "fn": name, "args": wire.encode(list(args)), "kwargs": wire.encode(kwargs)}
            return self.ask(channel, request)

        call.__name__ = name
        return call


@functools.lru_cache(maxsize=4096)
def _compiled(code: str):
    """Test code compiled once per process (the same HumanEval check runs for every candidate)."""
    return compile(code, "<test>", "exec")


def same(got: Any, want: Any, tol: float) -> bool:
    """Equality of plain values (decoded answers: no user-defined __eq__ can reach here), floats within tol."""
    if type(want) is float and type(got) in (int, float):
        return abs(got - want) <= tol * max(1.0, abs(want))
    if type(want) in (list, tuple) and type(got) is type(want):
        return len(got) == len(want) and all(same(g, w, tol) for g, w in zip(got, want))
    return type(got) is type(want) and got == want


def _run_cpp(source, tests, time_limit_s, memory_mb, allow_weak_isolation) -> TestReport:
    program, compiled = compile_cpp(source, allow_weak_isolation=allow_weak_isolation)
    if program is None:
        outcomes = [TestOutcome("compile_error", 0.0)] * len(tests)
        return TestReport(outcomes, runs=1, compile_error=compiled.stderr[-2000:], last_run=compiled)
    report = TestReport([], runs=1, last_run=compiled)
    try:
        for test in tests:
            if test.kind != "stdio":
                raise ValueError("C++ submissions take stdio tests only")
            result = run_compiled(program, time_limit_s=time_limit_s, memory_mb=memory_mb, stdin=test.input)
            report.runs += 1
            report.last_run = result
            if result.status != "ok":
                status = {"runtime_error": "fail", "killed": "died"}.get(result.status, result.status)
                report.outcomes.append(TestOutcome(status, result.wall_s, result.stderr[-300:], result.cpu_s))
                continue
            ok = test.output is None or result.stdout.split() == test.output.split()
            outcome = TestOutcome(PASS if ok else "fail", result.wall_s, result.stdout[:200], result.cpu_s)
            report.outcomes.append(outcome)
    finally:
        program.remove()
    return report


@dataclass(frozen=True)
class Submission:
    """One unit of work for the pool: a source and its tests (and run_tests keyword arguments)."""

    source: str
    tests: Sequence[Test]
    options: dict = field(default_factory=dict)


def default_workers() -> int:
    """One sandboxed run per core: the runs are CPU-bound, the threads only wait on them."""
    return max(1, len(os.sched_getaffinity(0)))


def judge_many(submissions: Iterable[Submission], workers: int | None = None) -> list[TestReport]:
    """Judge many submissions, ``workers`` sandboxes at a time (default: the cores), results in input order."""
    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        return list(pool.map(lambda s: run_tests(s.source, s.tests, **s.options), submissions))
