"""Code problems the judge serves: HumanEval and MBPP (function problems) and Forge's own stdin/stdout set.

Every problem is a :class:`Problem`: a statement for the prompt, tests the runner executes, a reference solution
and, for Forge's stdin/stdout problems, an input generator for growing sizes and the reference's complexity
class (what R_time compares against).

    from forge.code.problems import load_problems
    problems = load_problems(["forge", "humaneval", "mbpp"])
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from forge.code.runner import Test

# Complexity classes, simplest first (the judge prefers the earlier one when fits are close).
CLASSES = ("O(1)", "O(log n)", "O(n)", "O(n log n)", "O(n^2)", "O(n^3)", "O(2^n)")


@dataclass(frozen=True)
class Solution:
    """A known solution of a stdio problem and its time-complexity class (in the problem's size n)."""

    solve: Callable[[str], str]
    complexity: str
    sizes: tuple[int, ...] = ()  # sizes at which to time it, when the problem's default would be too slow

    @property
    def source(self) -> str:
        return program_source(self.solve)


def program_source(solve: Callable[[str], str]) -> str:
    """A stdin/stdout program from a self-contained ``solve(text) -> text`` function."""
    body = inspect.getsource(solve)
    return f"import sys\n\n\n{body}\n\nsys.stdout.write({solve.__name__}(sys.stdin.read()))\n"


@dataclass(frozen=True)
class Problem:
    id: str
    source: str  # "forge", "humaneval", "mbpp"
    kind: str  # "stdio" or "function"
    statement: str
    tests: tuple[Test, ...]
    reference: str  # a correct program (stdio) or module (function)
    entry_point: str = ""
    prefix: str = ""  # code a function-problem answer continues (HumanEval's prompt: imports, helpers, signature)
    setup: str = ""  # checker-side setup for assert tests (MBPP's test_setup_code)
    complexity: str = ""  # the reference's class (stdio problems)
    generate: Callable[[int, random.Random], str] | None = field(default=None, repr=False)
    sizes: tuple[int, ...] = ()  # sizes for the complexity judge
    timing_limit_s: float = 1.0  # the complexity judge's wall-clock limit for one timed size
    before: Solution | None = None  # a correct but slower solution (the paper's Appendix C "before")
    labelled: tuple[Solution, ...] = ()  # more solutions with known classes (the complexity judge's test set)
    title: str = ""

    def prompt(self) -> str:
        """The user message asking for a solution."""
        if self.kind == "stdio":
            return (
                f"{self.statement.strip()}\n\nWrite a Python 3 program that reads standard input and writes the "
                "answer to standard output. Aim for the best time complexity. Reply with one ```python code block."
            )
        return f"{self.statement.strip()}\n\nReply with the whole function in one ```python code block."


@dataclass(frozen=True)
class StdioSpec:
    """How a Forge stdin/stdout problem is written down (see forge/code/problems/*.py)."""

    id: str
    title: str
    statement: str
    generate: Callable[[int, random.Random], str]
    solve: Callable[[str], str]
    complexity: str
    sizes: tuple[int, ...]
    test_sizes: tuple[int, ...] = (1, 2, 3, 5, 8, 13, 30)
    examples: tuple[tuple[str, str], ...] = ()
    before: Solution | None = None
    labelled: tuple[Solution, ...] = ()

    def build(self, seed: int = 0) -> Problem:
        """Tests = the examples + generated inputs (answers from the reference, computed here: it is Forge's
        own code); deterministic for a seed."""
        if self.complexity not in CLASSES:
            raise ValueError(f"{self.id}: unknown complexity class {self.complexity!r}")
        rng = random.Random(f"{self.id}:{seed}")
        tests = [Test.stdio(i, o) for i, o in self.examples]
        for n in self.test_sizes:
            inp = self.generate(n, rng)
            tests.append(Test.stdio(inp, self.solve(inp)))
        return Problem(
            id=f"forge/{self.id}",
            source="forge",
            kind="stdio",
            statement=f"{self.title}\n\n{self.statement.strip()}",
            tests=tuple(tests),
            reference=program_source(self.solve),
            complexity=self.complexity,
            generate=self.generate,
            sizes=self.sizes,
            before=self.before,
            labelled=self.labelled,
            title=self.title,
        )


def forge_problems(seed: int = 0) -> list[Problem]:
    """Forge's stdin/stdout problems (≥ 30, the paper's Appendix C pairs among them)."""
    from forge.code.problems import classic, paper, polynomial, scaling

    return [spec.build(seed) for module in (paper, classic, polynomial, scaling) for spec in module.SPECS]


def load_problems(sources: Sequence[str] = ("forge", "humaneval", "mbpp"), limit: int | None = None) -> list[Problem]:
    """Problems from the named sources, in that order (``limit`` per source)."""
    from forge.code.problems import public

    loaders = {"forge": forge_problems, "humaneval": public.humaneval_problems, "mbpp": public.mbpp_problems,
               "mbpp-train": lambda: public.mbpp_problems("train")}
    out: list[Problem] = []
    for name in sources:
        if name not in loaders:
            raise ValueError(f"unknown problem source {name!r}; known: {', '.join(loaders)}")
        items = loaders[name]()
        out += items[:limit] if limit else items
    return out
