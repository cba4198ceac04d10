"""Code data from the judge (paper 2.3.2): SFT candidates filtered to correct and time-optimal ones, and RL
problems filtered on-policy by difficulty.

SFT: sample N candidates per problem; keep those that pass every test and whose measured class meets the
reference's optimal class; when none meets it, keep those of the best class measured among the correct ones
("time-optimal, or among the best complexity class"). Problems without an input generator (HumanEval, MBPP)
keep every correct candidate.

RL: n = 8 rollouts per problem; stage 1 counts rollouts that pass every test, stage 2 rollouts that pass and
meet the complexity bound; keep problems with k in [1, 5].

    from forge.code.data import sample_sft, filter_rl
    sft = sample_sft(backend, problems, n_candidates=4)
    rl = filter_rl(backend, problems, stage=1)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from forge.code.complexity import RANK, judge_complexity
from forge.code.judge import build_program, judge_correctness
from forge.code.problems import Problem
from forge.code.runner import default_workers
from forge.data.schemas import ChatSample, Message
from forge.fanout import fan_map

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    problem_id: str
    completion: str
    pass_rate: float
    format_ok: bool
    complexity: str = ""  # measured class of a fully correct candidate ("" when not measured)

    @property
    def correct(self) -> bool:
        return self.pass_rate == 1.0

    def meets(self, bound: str) -> bool:
        """Correct, and its measured class at or below ``bound`` (a problem's optimal class; never when it has
        none)."""
        limit = RANK.get(bound)
        return self.correct and limit is not None and RANK.get(self.complexity, 99) <= limit


def _sample(backend, problems: Sequence[Problem], n: int, temperature: float, max_new_tokens: int, seed: int):
    """n completions per problem. Each problem's prompt is repeated n times side by side and the rows go out in
    slices of whole groups, one ``generate`` call per slice (as many problems as the backend's batch holds; all of
    them for a backend that schedules its own batches), each call with its own seed: the transformers backend then
    prefills a repeated prompt once (forge/attention.py) while every row draws its own tokens. On 2 cores, 44 drills
    x 8 took 1.57x less time than in 8 rounds of the 44 prompts at 16 a call (bench/backend_batch.py, a Zen 4)."""
    prompts = [[{"role": "user", "content": p.prompt()}] for p in problems]
    per_call = max(1, getattr(backend, "batch_size", n * len(problems)) // n)
    calls = -(-len(problems) // per_call)
    out: dict[str, list[str]] = {}
    for call, start in enumerate(range(0, len(problems), per_call)):
        part = problems[start : start + per_call]
        rows = [prompt for prompt in prompts[start : start + per_call] for _ in range(n)]
        texts = backend.generate(rows, max_new_tokens=max_new_tokens, temperature=temperature,
                                 seed=seed * calls + call)
        if len(texts) != len(rows):
            raise RuntimeError(f"backend returned {len(texts)} completions for {len(rows)} prompts")
        for i, p in enumerate(part):
            out[p.id] = texts[i * n : (i + 1) * n]
        log.info("sampled %d of %d problems x %d", start + len(part), len(problems), n)
    return out


def judge_candidates(
    problems: Sequence[Problem],
    completions: dict[str, list[str]],
    measure_time: bool,
    workers: int | None = None,
    judge_backend=None,
) -> dict[str, list[Candidate]]:
    """Correctness of every completion, and the class of the correct ones (``measure_time``): from the judge
    model when ``judge_backend`` is given, else measured. A completion repeated for a problem is judged once."""
    by_id = {p.id: p for p in problems}
    jobs = list(dict.fromkeys((pid, c) for pid, texts in completions.items() for c in texts))

    def one(job) -> Candidate:
        pid, completion = job
        problem = by_id[pid]
        verdict = judge_correctness(problem, completion)
        cls = ""
        if measure_time and verdict.all_passed and problem.generate is not None:
            program, lang, _ = build_program(problem, completion)
            cls = judge_complexity(program, problem, backend=judge_backend, lang=lang).complexity
        return Candidate(pid, completion, verdict.pass_rate, verdict.format_ok, cls)

    # In batches on the flow's Ray cluster when it has one (forge/fanout.py), else on threads here; a judge model's
    # client stays in this process.
    verdicts = fan_map(one, jobs, name="code-judge-batch", workers=workers or default_workers(),
                       here=judge_backend is not None)
    judged = dict(zip(jobs, verdicts))
    return {pid: [judged[(pid, c)] for c in texts] for pid, texts in completions.items()}


def select_time_optimal(problem: Problem, candidates: Sequence[Candidate]) -> list[Candidate]:
    """Correct candidates meeting the reference class, else those of the best class measured (deduplicated)."""
    correct = [c for c in candidates if c.correct and c.format_ok]
    if problem.generate is None or not problem.complexity:
        chosen = correct
    else:
        measured = [c for c in correct if c.complexity in RANK]
        meeting = [c for c in measured if RANK[c.complexity] <= RANK[problem.complexity]]
        if meeting:
            chosen = meeting
        elif measured:
            best = min(RANK[c.complexity] for c in measured)
            chosen = [c for c in measured if RANK[c.complexity] == best]
        else:
            chosen = []
    seen, unique = set(), []
    for c in chosen:
        if c.completion not in seen:
            seen.add(c.completion)
            unique.append(c)
    return unique


@dataclass
class SFTResult:
    samples: list[ChatSample]
    candidates: dict[str, list[Candidate]] = field(repr=False)

    def pass_rates(self) -> list[float]:
        return [c.pass_rate for cands in self.candidates.values() for c in cands]


def sample_sft(
    backend,
    problems: Sequence[Problem],
    n_candidates: int = 4,
    temperature: float = 0.8,
    max_new_tokens: int = 512,
    seed: int = 0,
    judge_backend=None,
) -> SFTResult:
    """SFT chat samples (user prompt, chosen assistant answer) from N candidates per problem."""
    completions = _sample(backend, problems, n_candidates, temperature, max_new_tokens, seed)
    judged = judge_candidates(problems, completions, measure_time=True, judge_backend=judge_backend)
    samples = []
    for p in problems:
        for cand in select_time_optimal(p, judged[p.id]):
            messages = [Message(role="user", content=p.prompt()), Message(role="assistant", content=cand.completion)]
            samples.append(ChatSample.build(domain="code", messages=messages, source=f"code-sft:{p.id}"))
    return SFTResult(samples, judged)


class RLRow(BaseModel):
    """One problem's filter verdict: a row of the versioned filter output (data/code/rl-stage<N>/)."""

    model_config = ConfigDict(frozen=True)

    problem_id: str
    prompt: str
    k: int  # rollouts meeting the stage's criterion
    n: int
    kept: bool
    pass_rates: list[float]
    complexity: str  # the reference's class (the bound stage 2 checks)

    def as_dict(self) -> dict:
        return self.model_dump()


def filter_rl(
    backend,
    problems: Sequence[Problem],
    stage: int = 1,
    n_rollouts: int = 8,
    k_range: tuple[int, int] = (1, 5),
    temperature: float = 1.0,
    max_new_tokens: int = 512,
    seed: int = 0,
    judge_backend=None,
) -> list[RLRow]:
    """One row per problem with its k of n; ``kept`` when k is within ``k_range`` (inclusive)."""
    if stage not in (1, 2):
        raise ValueError(f"code RL has stages 1 and 2, not {stage}")
    completions = _sample(backend, problems, n_rollouts, temperature, max_new_tokens, seed)
    judged = judge_candidates(problems, completions, measure_time=stage == 2, judge_backend=judge_backend)
    rows = []
    for p in problems:
        cands = judged[p.id]
        if stage == 1:
            k = sum(c.correct for c in cands)
        else:
            k = sum(c.meets(p.complexity) for c in cands)
        kept = k_range[0] <= k <= k_range[1]
        rows.append(RLRow(problem_id=p.id, prompt=p.prompt(), k=k, n=len(cands), kept=kept,
                          pass_rates=[c.pass_rate for c in cands], complexity=p.complexity))
    return rows


def most_informative(rows: Sequence[RLRow], limit: int) -> list[RLRow]:
    """The ``limit`` rows whose k of n is nearest n/2, in their own order: a group of n rollouts with k solves has
    reward variance k(n−k)/n², the most at k = n/2, so these give GRPO the most non-zero advantages. Code RL trains on
    them when the filter keeps more than ``GRPOSettings.max_prompts`` (ties: earlier rows first)."""
    ranked = sorted(range(len(rows)), key=lambda i: abs(2 * rows[i].k - rows[i].n))[:limit]
    return [rows[i] for i in sorted(ranked)]


@dataclass(frozen=True)
class PolicyCheck:
    """How a policy answers a fixed problem set (n samples each): the stage-1 / stage-2 comparison of §2.3.3.

    Shares come with their binomial standard errors: at the tiny profile's 22 problems x 8 samples a share's error
    is ~0.04-0.06, as large as the rise stage 2 is after, so a comparison reads its difference against them."""

    samples: int
    correct: int  # samples passing every test
    optimal: int  # of those, the ones whose measured class meets the problem's bound
    format_ok: float

    @classmethod
    def of(cls, answers: Sequence[tuple[Candidate, str]]) -> PolicyCheck:
        """The check of :func:`judged_answers`' answers: how many pass and how many are optimal."""
        kinds = [kind for _, kind in answers]
        return cls(len(answers), len(answers) - kinds.count("wrong"), kinds.count("optimal"),
                   sum(c.format_ok for c, _ in answers) / max(1, len(answers)))

    @property
    def solved(self) -> float:
        return self.correct / max(1, self.samples)

    @property
    def optimal_share(self) -> float:
        return self.optimal / max(1, self.correct)

    @property
    def optimal_answers(self) -> float:
        """The share of all samples that pass and meet the bound: the optimal share can rise while this falls, when
        slower correct answers turn wrong rather than optimal (docs/architecture.md, "Where this differs from the
        original design card")."""
        return self.optimal / max(1, self.samples)

    @property
    def optimal_answers_se(self) -> float:
        return share_se(self.optimal_answers, self.samples)

    @property
    def solved_se(self) -> float:
        return share_se(self.solved, self.samples)

    @property
    def optimal_share_se(self) -> float:
        return share_se(self.optimal_share, self.correct)

    def metrics(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_solved": self.solved, f"{prefix}_solved_se": self.solved_se,
                f"{prefix}_optimal_share": self.optimal_share, f"{prefix}_optimal_share_se": self.optimal_share_se,
                f"{prefix}_optimal_answers": self.optimal_answers,
                f"{prefix}_format_ok": self.format_ok}


def share_se(share: float, n: int) -> float:
    """The standard error of a share of ``n`` independent samples (0 when there are none)."""
    return (share * (1 - share) / n) ** 0.5 if n else 0.0


def compare_checks(before: PolicyCheck, after: PolicyCheck) -> dict[str, float]:
    """The stage-2 must-show as numbers: the optimal share's rise and the solved share's change, each with the
    standard error of a difference of two independent shares (the two checkpoints sample apart), and the change of
    the share of samples that are optimal answers (what the two together came to)."""
    out = {}
    for name, share in (("check_optimal_rise", "optimal_share"), ("check_solved_change", "solved"),
                        ("check_optimal_answers_change", "optimal_answers")):
        out[name] = getattr(after, share) - getattr(before, share)
        out[f"{name}_se"] = (getattr(before, f"{share}_se") ** 2 + getattr(after, f"{share}_se") ** 2) ** 0.5
    return out


def judged_answers(
    backend,
    problems: Sequence[Problem],
    n: int,
    temperature: float,
    max_new_tokens: int,
    seed: int = 0,
    judge_backend=None,
) -> list[tuple[Candidate, str]]:
    """Sample ``n`` answers per problem and judge them, the correct ones' class by the judge model when
    ``judge_backend`` is given, else timed: each answer with its kind, ``optimal`` (passes every test and its class
    meets the problem's bound), ``slow`` (passes, above the bound or with none) or ``wrong``."""
    completions = _sample(backend, problems, n, temperature, max_new_tokens, seed)
    bound = {p.id: p.complexity for p in problems}
    judged = judge_candidates(problems, completions, measure_time=True, judge_backend=judge_backend)
    return [(c, "optimal" if c.meets(bound[c.problem_id]) else "slow" if c.correct else "wrong")
            for cands in judged.values() for c in cands]
