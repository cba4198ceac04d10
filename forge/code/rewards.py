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

    from forge.code.rewards import CodeRewards
    rewards = CodeRewards(problems)
    trainer = GRPOTrainer(..., reward_funcs=rewards.funcs(), args=GRPOConfig(reward_weights=CodeRewards.weights(2)))
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import Any

from forge.chat import completion_text
from forge.code.complexity import judge_complexity, time_reward
from forge.code.judge import build_program, judge_correctness
from forge.code.problems import Problem, load_problems
from forge.code.runner import default_workers


@dataclass(frozen=True)
class RewardParts:
    format: float
    correctness: float  # the pass rate
    time: float  # gated: 0 below pass rate 1


@cache
def _default_problems() -> dict[str, Problem]:
    return {p.id: p for p in load_problems(("forge", "humaneval", "mbpp"))}


def score_completion(
    problem: Problem,
    completion: str,
    format_weight: float = 0.2,
    time_weight: float = 1.0,
    judge_backend=None,
    **judge_options,
) -> RewardParts:
    """The reward parts of one completion (see the module docstring); which parts count is the stage's weights."""
    verdict = judge_correctness(problem, completion, **judge_options)
    r_format = format_weight if verdict.format_ok else 0.0
    r_time = 0.0
    if verdict.all_passed and problem.complexity and problem.generate is not None:
        program, lang, _ = build_program(problem, completion)
        measured = judge_complexity(program, problem, backend=judge_backend, lang=lang)
        r_time = time_weight * time_reward(measured, problem.complexity)
    return RewardParts(r_format, verdict.pass_rate, r_time)


class CodeRewards:
    """The code RL reward as TRL reward functions, one per part, so TRL logs each part per step
    (``rewards/r_format/mean``, ``rewards/r_correctness/mean``, ``rewards/r_time/mean``) and sums them with the
    stage's weights: stage 1 weighs R_time 0 (it is measured, not rewarded: Figure 4 draws it across both stages),
    stage 2 weighs it 1.

    A batch is judged once, concurrently in the sandbox, when the first part is asked for; the other parts read
    the same verdicts. Verdicts are kept per (problem, completion): a policy that repeats an answer is not
    re-judged (the complexity judge times a program at six sizes, ~0.5 s for a quadratic drill answer).

        rewards = CodeRewards(problems)
        trainer = GRPOTrainer(..., reward_funcs=rewards.funcs(), args=GRPOConfig(reward_weights=rewards.weights(1)))
    """

    PARTS = (("r_format", "format"), ("r_correctness", "correctness"), ("r_time", "time"))  # TRL name, field

    def __init__(
        self,
        problems: dict[str, Problem] | None = None,
        format_weight: float = 0.2,
        time_weight: float = 1.0,
        workers: int | None = None,
        judge_connect: Callable[[], Any] | None = None,
        **judge_options,
    ) -> None:
        self.problems = problems
        self.format_weight, self.time_weight = format_weight, time_weight
        self.workers, self.judge_options = workers, judge_options
        # Connects to a complexity judge model where the rewards are computed (a picklable callable: an endpoint's
        # client does not pickle, so each rank of a launched stage connects its own); None: timed runs judge.
        self.judge_connect = judge_connect
        self.judge_backend = None  # the connection, made on first use
        self._verdicts: dict[tuple[str, str], RewardParts] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "judge_backend": None}

    def _judge(self):
        if self.judge_backend is None and self.judge_connect is not None:
            self.judge_backend = self.judge_connect()
        return self.judge_backend

    @staticmethod
    def weights(stage: int) -> list[float]:
        if stage not in (1, 2):
            raise ValueError(f"code RL has stages 1 and 2, not {stage}")
        return [1.0, 1.0, 0.0 if stage == 1 else 1.0]

    def parts(self, completions, problem_id=None) -> list[RewardParts]:
        """Every completion's reward parts (stage-2 gating: R_time only at pass rate 1)."""
        if problem_id is None or len(problem_id) != len(completions):
            raise ValueError("code rewards need a `problem_id` column with one id per completion")
        table = self.problems if self.problems is not None else _default_problems()
        missing = sorted({pid for pid in problem_id if pid not in table})
        if missing:
            raise KeyError(f"unknown problem ids: {', '.join(missing[:5])}")
        keys = [(pid, completion_text(c)) for pid, c in zip(problem_id, completions, strict=True)]
        todo = list(dict.fromkeys(k for k in keys if k not in self._verdicts))

        judge = self._judge()

        def one(key: tuple[str, str]) -> RewardParts:
            pid, text = key
            return score_completion(table[pid], text, self.format_weight, self.time_weight, judge,
                                    **self.judge_options)

        with ThreadPoolExecutor(max_workers=self.workers or default_workers()) as pool:
            self._verdicts.update(zip(todo, pool.map(one, todo)))
        return [self._verdicts[k] for k in keys]

    def funcs(self) -> list[Callable[..., list[float]]]:
        """The three parts as TRL reward functions (named for TRL's per-function logs). They share this object's
        verdicts, also after pickling to the ranks of a launched stage (forge/training/launch.py)."""
        return [RewardPart(self, name, attr) for name, attr in self.PARTS]


class RewardPart:
    """One part of :class:`CodeRewards` as a TRL reward function: an object rather than a closure, so it pickles."""

    def __init__(self, rewards: CodeRewards, name: str, attr: str) -> None:
        self.rewards, self.__name__, self.attr = rewards, name, attr

    def __call__(self, prompts, completions, problem_id=None, **kwargs) -> list[float]:
        return [getattr(p, self.attr) for p in self.rewards.parts(completions, problem_id)]
