"""Drills: one-line-of-integers problems small enough for the tiny profile's policy to learn (docs/architecture.md,
"A signal at tiny scale").

The tiny policy (4 layers, a few minutes of CPU training) solves no HumanEval problem, so code RL would train on
nothing but zero rewards. Each drill is one operation over a line of integers ("print the largest number", "print
how many different numbers there are") whose answer is a two- to six-line program, with:

- a linear reference (the problem's optimal class, what R_time compares against, §2.3.3);
- for most operations a correct quadratic solution a small model writes just as readily (``max(a)`` inside a
  comprehension over ``a``): the room stage 2 of code RL has to move the policy toward the optimal class;
- plausible mistakes (the last number instead of the largest), so the SFT policy starts imperfect.

A problem is an operation plus a worked example in its statement; the example's seed names the problem, so the
SFT split, the RL split and the evaluation split hold different problems of the same operations (RL trains on
problems SFT never saw). The SFT rows come from a weak teacher that answers with the reference, the quadratic
solution or a mistake in the profile's proportions (:func:`drill_sft_rows`).

    problems = drill_problems("rl", per_op=3)
    rows = drill_sft_rows(per_op=40, weights=(0.4, 0.35, 0.25), seed=0)
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from forge.code.problems import Problem
from forge.code.runner import Test
from forge.data.schemas import ChatSample, Message

# Timing sizes for the complexity judge: a linear program runs them all in milliseconds (the slowest reference, 49 ms
# of CPU at 128,000 on an AMD EPYC 25/17); a quadratic one runs past the limit within the first three, is left
# "unknown" (R_time 0, as O(n^2) would get). The limit is 0.3 s, not the judge's default 1 s: six times the slowest
# reference's largest size, and a quadratic reference then costs ~0.5 s to judge instead of 1.4-2.1 s (one with an
# early exit that finished four sizes under 1 s was also timed four times more: 5.5 s), which code RL pays for
# every one its policy writes (2026-11-30).
SIZES = (4000, 8000, 16000, 32000, 64000, 128000)
TIMING_LIMIT_S = 0.3
TEST_SIZES = (1, 2, 3, 5, 8, 13, 30)
SPLITS = {"sft": 0, "rl": 1_000, "eval": 2_000}  # seed offsets: the splits never share a problem
READ = "a = list(map(int, input().split()))\n"


@dataclass(frozen=True)
class DrillOp:
    """One operation: what to print, its answer, the linear program, a quadratic one (None when no natural
    quadratic answer exists) and plausible mistakes (each must fail some test: tests/code/test_drills.py)."""

    id: str
    task: str
    answer: Callable[[list[int]], str]
    fast: str
    slow: str | None
    broken: tuple[str, ...]


def _records(a: list[int]) -> str:
    best, count = None, 0
    for x in a:
        if best is None or x > best:
            best, count = x, count + 1
    return str(count)


def _running_max_sum(a: list[int]) -> str:
    best, total = a[0], 0
    for x in a:
        best = max(best, x)
        total += best
    return str(total)


OPS: tuple[DrillOp, ...] = (
    DrillOp("max", "Print the largest number.", lambda a: str(max(a)),
            "print(max(a))", "print([x for x in a if x == max(a)][0])", ("print(a[-1])", "print(min(a))")),
    DrillOp("min", "Print the smallest number.", lambda a: str(min(a)),
            "print(min(a))", "print([x for x in a if x == min(a)][0])", ("print(a[0])", "print(max(a))")),
    DrillOp("count-max", "Print how many times the largest number occurs.", lambda a: str(a.count(max(a))),
            "m = max(a)\nprint(a.count(m))", "print(sum(1 for x in a if x == max(a)))",
            ("print(a.count(a[0]))", "print(max(a))")),
    DrillOp("above-mean", "Print how many numbers are greater than the average.",
            lambda a: str(sum(1 for x in a if x > sum(a) / len(a))),
            "m = sum(a) / len(a)\nprint(sum(1 for x in a if x > m))",
            "print(sum(1 for x in a if x > sum(a) / len(a)))", ("print(sum(1 for x in a if x > a[0]))",)),
    DrillOp("distinct", "Print how many different numbers there are.", lambda a: str(len(set(a))),
            "print(len(set(a)))", "print(sum(1 for i in range(len(a)) if a[i] not in a[:i]))", ("print(len(a))",)),
    DrillOp("repeat", "Print YES if some number occurs more than once, otherwise NO.",
            lambda a: "YES" if len(set(a)) < len(a) else "NO",
            'print("YES" if len(set(a)) < len(a) else "NO")',
            'print("YES" if any(a[i] in a[:i] for i in range(len(a))) else "NO")', ('print("NO")',)),
    DrillOp("running-max", "Print the sum, over all positions, of the largest number seen so far.", _running_max_sum,
            "m = a[0]\ns = 0\nfor x in a:\n    m = max(m, x)\n    s += m\nprint(s)",
            "print(sum(max(a[:i + 1]) for i in range(len(a))))", ("print(sum(a))", "print(max(a) * len(a))")),
    DrillOp("records", "Print how many numbers are larger than every number before them.", _records,
            "m = None\nc = 0\nfor x in a:\n    if m is None or x > m:\n        c += 1\n        m = x\nprint(c)",
            "print(sum(1 for i in range(len(a)) if all(a[i] > y for y in a[:i])))", ("print(len(set(a)))",)),
    DrillOp("spread", "Print the largest number minus the smallest number.", lambda a: str(max(a) - min(a)),
            "print(max(a) - min(a))", "print(max(x - y for x in a for y in a))", ("print(a[-1] - a[0])",)),
    DrillOp("sum", "Print the sum of the numbers.", lambda a: str(sum(a)),
            "print(sum(a))", None, ("print(sum(a[1:]))", "print(len(a))")),
    DrillOp("even", "Print how many of the numbers are even.", lambda a: str(sum(1 for x in a if x % 2 == 0)),
            "print(sum(1 for x in a if x % 2 == 0))", None, ("print(len(a) // 2)", "print(sum(1 for x in a if x % 2))")),
)
OPS_BY_ID = {op.id: op for op in OPS}


def _values(n: int, rng: random.Random) -> list[int]:
    return [rng.randint(0, 30) for _ in range(n)]  # a narrow range: repeats occur, YES and NO both appear


def _timing_input(n: int, rng: random.Random) -> str:
    # Distinct values: no early exit for a quadratic "seen before?" scan, so its measured growth is its class.
    return " ".join(map(str, rng.sample(range(10**9), n))) + "\n"


def program(body: str) -> str:
    """The whole program of an answer: read the line, then ``body``."""
    return READ + body + "\n"


def build_problem(op: DrillOp, split: str, index: int) -> Problem:
    """The ``index``-th problem of ``op`` in ``split``: the operation with a worked example, tests from the seed."""
    pid = f"drills/{op.id}/{split}-{index}"
    rng = random.Random(f"{pid}:{SPLITS[split] + index}")
    example = _values(rng.randint(4, 7), rng)
    line = " ".join(map(str, example))
    statement = f"{op.task}\n\nInput: one line of integers.\nExample: for the input `{line}` the answer is " \
                f"`{op.answer(example)}`."
    tests = [Test.stdio(line + "\n", op.answer(example) + "\n")]
    for n in TEST_SIZES:
        values = _values(n, rng)
        tests.append(Test.stdio(" ".join(map(str, values)) + "\n", op.answer(values) + "\n"))
    return Problem(id=pid, source="drills", kind="stdio", statement=statement, tests=tuple(tests),
                   reference=program(op.fast), complexity="O(n)", generate=_timing_input, sizes=SIZES,
                   timing_limit_s=TIMING_LIMIT_S, title=f"drill: {op.id}")


def drill_problems(split: str = "rl", per_op: int = 3, ops: tuple[str, ...] | None = None) -> list[Problem]:
    """``per_op`` problems of every operation (or of ``ops``) in ``split`` ("sft", "rl" or "eval")."""
    if split not in SPLITS:
        raise ValueError(f"unknown drill split {split!r}; known: {', '.join(SPLITS)}")
    chosen = [OPS_BY_ID[o] for o in ops] if ops else list(OPS)
    return [build_problem(op, split, i) for i in range(per_op) for op in chosen]


def drill_sft_rows(per_op: int, weights: tuple[float, float, float], seed: int = 0) -> tuple[list[ChatSample], Counter]:
    """SFT rows for ``per_op`` problems of every operation from the "sft" split, answered by a weak teacher that
    writes the linear program, the quadratic one or a mistake with ``weights`` (an operation without a quadratic
    answer gives its share to the linear one). Returns the rows and how many of each kind were written."""
    fast_w, slow_w, broken_w = weights
    rng = random.Random(f"drills:sft:{seed}")
    rows, kinds = [], Counter()
    for problem in drill_problems("sft", per_op):
        op = OPS_BY_ID[problem.id.split("/")[1]]
        kind = rng.choices(("fast", "slow", "broken"), (fast_w + (slow_w if op.slow is None else 0),
                                                        slow_w if op.slow else 0.0, broken_w))[0]
        body = {"fast": op.fast, "slow": op.slow, "broken": rng.choice(op.broken)}[kind]
        kinds[kind] += 1
        answer = f"```python\n{program(body)}```"
        rows.append(ChatSample.build(domain="code", source="forge-drills", parents=[problem.id],
                                     messages=[Message(role="user", content=problem.prompt()),
                                               Message(role="assistant", content=answer)]))
    return rows, kinds
