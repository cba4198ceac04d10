"""A generation backend that answers from a fixed pool of candidate solutions per prompt, for tests of the judge's
side of code data: with each problem's reference, slower and broken solutions as the candidates, the SFT selection
and the RL difficulty filter can be shown to keep exactly what they should (what a model samples is tested with a
real model: tests/code/test_code_data.py). Greedy decoding (temperature 0) always returns a prompt's first
candidate; sampling walks through the pool in an order shuffled once per prompt (by the backend's ``seed``), one
candidate per call whatever seed the call passes, so n rollouts of a prompt see n different candidates while the
pool lasts, as n differently seeded samples of a model would.

    backend = CandidatePoolBackend({problem.prompt(): [good, slow, broken]})
    backend.generate([[{"role": "user", "content": problem.prompt()}]], temperature=1.0)
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from forge.code.judge import fence
from forge.code.problems import Problem

Messages = list[dict[str, Any]]


class CandidatePoolBackend:
    """:class:`forge.generation.base.GenerationBackend` over ``pools``: prompt text -> candidate answers."""

    def __init__(self, pools: dict[str, list[str]], fallback: str = "", seed: int = 0) -> None:
        if any(not answers for answers in pools.values()):
            raise ValueError("every prompt needs at least one candidate answer")
        self.pools = pools
        self.fallback = fallback
        self.seed = seed
        self._served: dict[str, int] = defaultdict(int)

    def _answer(self, prompt: str, temperature: float, seed: int) -> str:
        pool = self.pools.get(prompt)
        if pool is None:
            return self.fallback
        if temperature <= 0:
            return pool[0]
        order = list(range(len(pool)))
        random.Random(f"{self.seed}:{prompt}").shuffle(order)
        k = self._served[prompt]
        self._served[prompt] += 1
        return pool[order[k % len(pool)]]

    def generate(
        self,
        prompts: list[Messages],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> list[str]:
        """The next candidate for each conversation's last user message."""
        texts = [next((m["content"] for m in reversed(p) if m["role"] == "user"), "") for p in prompts]
        return [self._answer(t, temperature, seed) for t in texts]

    def generate_text(
        self,
        raw_prompts: list[str],
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> list[str]:
        return [self._answer(t, temperature, seed) for t in raw_prompts]

    def close(self) -> None:
        """Nothing to release: the answers are in memory."""


BROKEN = (
    "```python\nprint(0)\n```",  # runs, answers wrongly
    "```python\nimport sys\nprint(sys.stdin.read(\n```",  # does not parse
    "I would use dynamic programming here.",  # no code at all
)


def known_candidates(problem: Problem, good: int, slow: int, broken: int) -> list[str]:
    """``good`` copies of the reference, ``slow`` of the problem's slower correct solution (or the reference when
    it has none) and ``broken`` wrong answers, fenced as a model would answer."""
    slower = problem.before or next((s for s in problem.labelled if s.complexity != problem.complexity), None)
    slow_source = slower.source if slower else problem.reference
    return (
        [fence(problem.reference)] * good
        + [fence(slow_source)] * slow
        + [BROKEN[i % len(BROKEN)] for i in range(broken)]
    )
