"""The time-complexity judge: empirical (timed runs on growing inputs, fitted class) and, when a judge endpoint
is configured, model-based (a generation backend asked for the class). Compared with the reference's class it
gives R_time.

Empirical: the program runs once per generated input (all sizes and repeats in one sandboxed batch, timed by
the harness's checker, which the code cannot influence), the minimum of the repeats per size is kept (noise from
other load only ever adds time), and each class f is fitted as t = a + b·f(n) with a, b >= 0 by least squares
on relative error. The simplest class whose error is within a margin of the best wins; confidence says how
clearly the best class beat the next plausible one.

    from forge.code.complexity import estimate_complexity
    verdict = estimate_complexity(program, problem)
    verdict.complexity, verdict.confidence
"""

from __future__ import annotations

import functools
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from forge.code.problems import CLASSES, Problem
from forge.code.runner import Test, run_tests

GROWTH = {
    "O(1)": lambda n: 1.0,
    "O(log n)": lambda n: math.log2(n),
    "O(n)": lambda n: float(n),
    "O(n log n)": lambda n: n * math.log2(n),
    "O(n^2)": lambda n: float(n) ** 2,
    "O(n^3)": lambda n: float(n) ** 3,
    "O(2^n)": lambda n: 2.0**n if n < 1000 else math.inf,
}
RANK = {c: i for i, c in enumerate(CLASSES)}


@dataclass(frozen=True)
class ComplexityVerdict:
    complexity: str  # one of CLASSES, or "unknown" (too few sizes finished)
    confidence: float  # 0..1
    method: str  # "empirical" or "model"
    points: tuple[tuple[int, float], ...] = ()  # (n, min seconds)
    errors: dict = field(default_factory=dict)  # class -> relative fit error
    timed_out_at: int | None = None  # first size that ran past the limit


def _fit(ns: Sequence[float], ts: Sequence[float], f) -> float:
    """Relative RMS error of the best t = a + b·f(n), a, b >= 0 (weights 1/t: every size counts alike)."""
    xs = [f(n) for n in ns]
    if any(not math.isfinite(x) for x in xs):
        return math.inf
    w = [1.0 / t for t in ts]
    rows = [(wi, wi * x, wi * t) for wi, x, t in zip(w, xs, ts)]  # rows of [w, w·x] · [a, b] ≈ w·t
    s11 = sum(r[0] * r[0] for r in rows)
    s12 = sum(r[0] * r[1] for r in rows)
    s22 = sum(r[1] * r[1] for r in rows)
    y1 = sum(r[0] * r[2] for r in rows)
    y2 = sum(r[1] * r[2] for r in rows)
    det = s11 * s22 - s12 * s12
    candidates = []
    if det > 1e-12 * max(s11 * s22, 1e-300):
        a, b = (y1 * s22 - y2 * s12) / det, (s11 * y2 - s12 * y1) / det
        if a >= 0 and b >= 0:
            candidates.append((a, b))
    candidates.append((y1 / s11, 0.0))  # b = 0: a constant
    if s22 > 0:
        candidates.append((0.0, y2 / s22))  # a = 0: pure growth
    best = math.inf
    for a, b in candidates:
        err = math.sqrt(sum(((a + b * x) / t - 1.0) ** 2 for x, t in zip(xs, ts)) / len(ts))
        best = min(best, err)
    return best


def _trimmed_fit(ns: Sequence[float], ts: Sequence[float], f) -> float:
    """Fit error with the single worst point left out (5 points or more): one run inflated by a burst of load
    that the minimum of the repeats did not absorb must not decide the class."""
    full = _fit(ns, ts, f)
    if len(ns) < 5 or not math.isfinite(full):
        return full
    return min(_fit(ns[:i] + ns[i + 1 :], ts[:i] + ts[i + 1 :], f) for i in range(len(ns)))


def classify(
    points: Sequence[tuple[int, float]], margin: float = 0.05, ratio: float = 1.5, flat: float = 1.6
) -> tuple[str, float, dict]:
    """(class, confidence, errors) for measured (n, seconds) points.

    The simplest class within ``margin`` (absolute) or ``ratio`` (relative) of the best fit wins: measured noise
    adds a few per cent, and a needlessly complex class can always bend to fit it."""
    ns = [float(n) for n, _ in points]
    ts = [max(t, 1e-7) for _, t in points]
    errors = {c: _trimmed_fit(ns, ts, GROWTH[c]) for c in CLASSES}
    best = min(errors.values())
    chosen = next(c for c in CLASSES if errors[c] <= max(best * ratio, best + margin))
    if max(ts) < flat * min(ts) and max(ns) >= 8 * min(ns):
        # Less than `flat`-fold growth over a size range of 8x or more: no growing class fits the intent, even
        # where a step (e.g. Python's ints switching to two digits) makes log n fit the points better.
        chosen = "O(1)"
    # Confidence: how much worse the nearest alternatives (one class simpler, one more complex) fit.
    i = RANK[chosen]
    rivals = [errors[c] for c in CLASSES[max(0, i - 1) : i + 2] if c != chosen]
    rival = min(rivals) if rivals else math.inf
    confidence = 1.0 - errors[chosen] / rival if rival > 0 and math.isfinite(rival) else 1.0
    return chosen, round(max(0.0, min(1.0, confidence)), 3), errors


def measure(
    program: str,
    problem: Problem,
    sizes: Sequence[int] | None = None,
    repeats: int = 5,
    time_limit_s: float | None = None,
    memory_mb: int = 512,
    seed: int = 0,
    lang: str = "python",
    min_points: int = 4,
) -> tuple[list[tuple[int, float]], int | None]:
    """(n, min seconds) per size that finished, and the first size that timed out (None if all finished).

    Two sandboxed batches: one ascending pass that stops at the first size past the limit, then the remaining
    repeats interleaved across sizes (a burst of load then inflates one run of several sizes, not every run of
    one size). Seconds are the candidate's CPU time where the harness could read it, else wall time.
    ``time_limit_s``: the wall-clock limit of one size (default: the problem's ``timing_limit_s``)."""
    if problem.generate is None:
        raise ValueError(f"{problem.id} has no input generator: it cannot be timed")
    sizes = list(sizes or problem.sizes)
    if time_limit_s is None:
        time_limit_s = problem.timing_limit_s
    inputs = dict(zip(sizes, timing_inputs(problem.id, problem.generate, tuple(sizes), seed)))
    options = {"lang": lang, "time_limit_s": time_limit_s, "memory_mb": memory_mb, "max_restarts": 0}
    first = run_tests(program, [Test.stdio(inputs[n]) for n in sizes], **options)
    best: dict[int, float] = {}
    timed_out = None
    for n, outcome in zip(sizes, first.outcomes):
        if not outcome.passed:
            timed_out = n
            break
        best[n] = _seconds(outcome)
    done = [n for n in sizes if n in best]
    if repeats > 1 and len(done) >= min_points:
        order = [n for _ in range(repeats - 1) for n in done]
        again = run_tests(program, [Test.stdio(inputs[n]) for n in order], **options)
        for n, outcome in zip(order, again.outcomes):
            if outcome.passed:
                best[n] = min(best[n], _seconds(outcome))
    return [(n, best[n]) for n in done], timed_out


@functools.lru_cache(maxsize=32)
def timing_inputs(problem_id: str, generate, sizes: tuple[int, ...], seed: int) -> tuple[str, ...]:
    """The inputs a problem's programs are timed on, one per size: the same for every program judged on that
    problem with that seed, so generated once per process (a drill's six sizes are 252,000 random numbers,
    ~0.14 s to draw and write; code RL times hundreds of programs on a few dozen problems). At most 32 problems
    are kept (a drill's inputs are ~2.5 MB)."""
    rng = random.Random(f"{problem_id}:time:{seed}")
    return tuple(generate(n, rng) for n in sizes)


def _seconds(outcome) -> float:
    return outcome.cpu_seconds if outcome.cpu_seconds is not None else outcome.seconds


def estimate_complexity(program: str, problem: Problem, min_points: int = 4, **measure_options) -> ComplexityVerdict:
    """Empirical class of ``program`` on ``problem``'s generator ("unknown" if fewer than ``min_points`` sizes
    finished; a timeout before that means the program is slower than anything the sizes were chosen for)."""
    points, timed_out = measure(program, problem, min_points=min_points, **measure_options)
    if len(points) < min_points:
        return ComplexityVerdict("unknown", 0.0, "empirical", tuple(points), {}, timed_out)
    cls, confidence, errors = classify(points)
    return ComplexityVerdict(cls, confidence, "empirical", tuple(points), errors, timed_out)


# --- model-based -------------------------------------------------------------------------------------------

_CLASS_PATTERN = re.compile(
    r"O\(\s*(1|log\s*n|n\s*log\s*n|n\s*\^?\s*2|n\s*\^?\s*3|n²|n³|2\s*\^\s*n|2ⁿ|n)\s*\)", re.IGNORECASE
)


def parse_class(text: str) -> str | None:
    """The last complexity class named in a judge model's answer, normalised to CLASSES."""
    found = _CLASS_PATTERN.findall(text)
    if not found:
        return None
    raw = re.sub(r"\s+", "", found[-1].lower()).replace("^", "").replace("²", "2").replace("³", "3")
    table = {"1": "O(1)", "logn": "O(log n)", "n": "O(n)", "nlogn": "O(n log n)", "n2": "O(n^2)", "n3": "O(n^3)"}
    return table.get(raw, "O(2^n)" if raw in ("2n", "2ⁿ") else None)


def model_complexity(backend, problem: Problem, program: str, max_new_tokens: int = 64) -> ComplexityVerdict:
    """Ask a judge model (any generation backend) for the program's time complexity."""
    prompt = (
        f"Problem:\n{problem.statement}\n\nSolution:\n```python\n{program}\n```\n\n"
        f"What is the worst-case time complexity of this solution in the input size n? "
        f"Answer with exactly one of: {', '.join(CLASSES)}."
    )
    answer = backend.generate([[{"role": "user", "content": prompt}]], max_new_tokens=max_new_tokens, temperature=0.0)[
        0
    ]
    cls = parse_class(answer)
    return ComplexityVerdict(cls or "unknown", 1.0 if cls else 0.0, "model")


def judge_complexity(program: str, problem: Problem, backend=None, **options) -> ComplexityVerdict:
    """Model-based when a judge backend is given, else empirical (the model verdict falls back to the
    empirical one when the model names no class)."""
    if backend is not None:
        verdict = model_complexity(backend, problem, program)
        if verdict.complexity != "unknown":
            return verdict
    return estimate_complexity(program, problem, **options)


def time_reward(verdict: ComplexityVerdict, reference: str) -> float:
    """R_time: 1 when the solution's class is at most the reference's, 0.5 one class above, else 0."""
    if verdict.complexity not in RANK or reference not in RANK:
        return 0.0
    gap = RANK[verdict.complexity] - RANK[reference]
    return 1.0 if gap <= 0 else 0.5 if gap == 1 else 0.0
