"""The verdict every evaluation scorer returns for one row: correct or not, why not, and what it read.

    from forge.evals.score import Score
    Score(correct=False, reason="wrong letter: C, expected B", extracted="C")

``extracted`` is what the scorer took from the raw model output (a final answer, a letter, the parsed calls), so a
scored file shows what was compared; ``reason`` is None exactly when the row is correct.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Score:
    correct: bool
    reason: str | None = None
    extracted: Any = None

    @classmethod
    def right(cls, extracted: Any = None) -> Score:
        return cls(True, None, extracted)

    @classmethod
    def wrong(cls, reason: str, extracted: Any = None) -> Score:
        return cls(False, reason, extracted)
