"""Code RL rewards with TRL's reward-function signature (``f(prompts, completions, **kwargs) -> list[float]``).

Stage 1 (paper 2.3.3): R = R_format + PassRate.
Stage 2: R = R_format + R_correctness, plus R_time only when PassRate = 1:
- R_format = ``format_weight`` when the answer holds a fenced block that parses, else 0;
- R_correctness = the pass rate (fraction of the problem's tests passed);
- R_time = ``time_weight`` × :func:`forge.code.complexity.time_reward` of the solution's class against the
  reference's optimal class (1 at or below the bound, 0.5 one class above, else 0); 0 for problems without a
  reference class (HumanEval, MBPP).

The problem of each completion comes from the dataset column ``problem_id`` (TRL passes extra columns as keyword
arguments); completions may be plain strings or conversational message lists, read by
:func:`forge.chat.completion_text` (the last assistant message's content).

    from forge.code.rewards import make_code_reward
    reward = make_code_reward(stage=2)
    trainer = GRPOTrainer(..., reward_funcs=[reward])
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache

from forge.chat import completion_text
from forge.code.complexity import judge_complexity, time_reward
from forge.code.judge import build_program, judge_correctness
from forge.code.problems import Problem, load_problems
from forge.code.runner import default_workers


@dataclass(frozen=True)
class RewardParts:
    format: float
    correctness: float
    time: float
    pass_rate: float

    @property
    def total(self) -> float:
        return self.format + self.correctness + self.time


@cache
def _default_problems() -> dict[str, Problem]:
    return {p.id: p for p in load_problems(("forge", "humaneval", "mbpp"))}


def score_completion(
    problem: Problem,
    completion: str,
    stage: int,
    format_weight: float = 0.2,
    time_weight: float = 1.0,
    judge_backend=None,
    **judge_options,
) -> RewardParts:
    """The reward parts of one completion (see the module docstring)."""
    verdict = judge_correctness(problem, completion, **judge_options)
    r_format = format_weight if verdict.format_ok else 0.0
    r_time = 0.0
    if stage >= 2 and verdict.all_passed and problem.complexity and problem.generate is not None:
        program, lang, _ = build_program(problem, completion)
        measured = judge_complexity(program, problem, backend=judge_backend, lang=lang)
        r_time = time_weight * time_reward(measured, problem.complexity)
    return RewardParts(r_format, verdict.pass_rate, r_time, verdict.pass_rate)


def make_code_reward(
    stage: int,
    problems: dict[str, Problem] | None = None,
    format_weight: float = 0.2,
    time_weight: float = 1.0,
    judge_backend=None,
    workers: int | None = None,
    **judge_options,
) -> Callable[..., list[float]]:
    """A TRL reward function for code RL stage 1 or 2 (``problems`` defaults to Forge + HumanEval + MBPP)."""
    if stage not in (1, 2):
        raise ValueError(f"code RL has stages 1 and 2, not {stage}")

    def reward(prompts, completions, problem_id=None, **kwargs) -> list[float]:
        if problem_id is None or len(problem_id) != len(completions):
            raise ValueError("code rewards need a `problem_id` column with one id per completion")
        table = problems if problems is not None else _default_problems()
        missing = sorted({pid for pid in problem_id if pid not in table})
        if missing:
            raise KeyError(f"unknown problem ids: {', '.join(missing[:5])}")

        def one(pair) -> float:
            pid, completion = pair
            parts = score_completion(
                table[pid],
                completion_text(completion),
                stage,
                format_weight,
                time_weight,
                judge_backend,
                **judge_options,
            )
            return parts.total

        with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
            return list(pool.map(one, zip(problem_id, completions)))

    reward.__name__ = f"code_reward_stage{stage}"
    reward.__qualname__ = reward.__name__
    return reward
