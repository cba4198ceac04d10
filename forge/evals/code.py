"""The code suite on Forge's judge: pass@1 (greedy, one completion per problem) over HumanEval, MBPP and Forge's
stdin/stdout problems, per source and overall.

    from forge.config import CodeSuiteConfig
    from forge.evals.code import evaluate_code_suite
    report = evaluate_code_suite(backend, CodeSuiteConfig(sources=["mbpp", "forge"], limit=20))
    report.metrics()   # {"code_pass_at_1": ..., "mbpp_pass_at_1": ..., "forge_pass_at_1": ...}

A problem counts as solved when every one of its tests passes; the mean pass rate is reported beside it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from forge.code.judge import judge_many
from forge.code.problems import Problem, load_problems
from forge.config import CodeSuiteConfig


@dataclass(frozen=True)
class CodeRow:
    problem_id: str
    source: str
    solved: bool
    pass_rate: float
    format_ok: bool
    statuses: str


@dataclass(frozen=True)
class CodeSuiteReport:
    rows: list[CodeRow]
    seconds: float

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        groups: dict[str, list[CodeRow]] = {}
        for r in self.rows:
            groups.setdefault(r.source, []).append(r)
        for name, rows in [("code", self.rows), *sorted(groups.items())]:
            if rows:
                out[f"{name}_pass_at_1"] = sum(r.solved for r in rows) / len(rows)
                out[f"{name}_mean_pass_rate"] = sum(r.pass_rate for r in rows) / len(rows)
        out["code_n"] = float(len(self.rows))
        return out

    def table(self) -> list[dict]:
        return [asdict(r) for r in self.rows]


def generate_answers(backend, problems: list[Problem], cfg: CodeSuiteConfig) -> list[str]:
    """One greedy answer per problem, in batches of ``cfg.batch_size``."""
    answers: list[str] = []
    for i in range(0, len(problems), cfg.batch_size):
        batch = [[{"role": "user", "content": p.prompt()}] for p in problems[i : i + cfg.batch_size]]
        out = backend.generate(batch, max_new_tokens=cfg.max_new_tokens, temperature=0.0)
        if len(out) != len(batch):
            raise RuntimeError(f"backend returned {len(out)} completions for {len(batch)} prompts")
        answers += out
    return answers


def score_answers(problems: list[Problem], answers: list[str], cfg: CodeSuiteConfig) -> CodeSuiteReport:
    """Judge one answer per problem (all tests of an answer in one sandboxed run, runs in parallel)."""
    start = time.monotonic()
    verdicts = judge_many(problems, answers, time_limit_s=cfg.time_limit_s, memory_mb=cfg.memory_mb)
    rows = [
        CodeRow(p.id, p.source, v.all_passed, v.pass_rate, v.format_ok, ",".join(sorted(set(v.statuses))))
        for p, v in zip(problems, verdicts)
    ]
    return CodeSuiteReport(rows, time.monotonic() - start)


def evaluate_code_suite(backend, cfg: CodeSuiteConfig) -> CodeSuiteReport:
    problems = load_problems(cfg.sources, limit=cfg.limit)
    return score_answers(problems, generate_answers(backend, problems, cfg), cfg)
