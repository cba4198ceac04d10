"""HumanEval harness: canonical solutions all pass, broken ones all fail, quickly, inside the sandbox.

.venv/bin/pytest tests/evals/test_humaneval.py -q
"""

import time

import pytest

from forge.code.sandbox import isolation_report
from forge.config import HumanEvalConfig
from forge.evals.humaneval import (
    build_chat_prompt,
    evaluate_completions,
    extract_code,
    generate_completions,
    load_problems,
)

PROBLEMS = load_problems()
CFG = HumanEvalConfig(timeout_s=3.0, workers=2)
LOOPING = {"HumanEval/0", "HumanEval/53", "HumanEval/100", "HumanEval/163"}

# A full function (fenced, as a chat model answers) that wraps the canonical solution and perturbs every value
# it returns: the logic runs, only the answers are wrong.
PERTURBED = """Here is my solution:

```python
{prompt}{solution}

def _perturb(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1.5
    if isinstance(value, str):
        return value + "?"
    if isinstance(value, (list, tuple)):
        return type(value)(list(value) + [None])
    return None


_canonical = {name}


def {name}(*args, **kwargs):
    return _perturb(_canonical(*args, **kwargs))
```
"""


def broken_completion(i, problem):
    if problem.task_id in LOOPING:
        return "    while True:\n        pass\n"  # body continuation that never returns
    if i % 2:
        return "    return None\n"  # body continuation with the wrong logic
    return PERTURBED.format(prompt=problem.prompt, solution=problem.canonical_solution, name=problem.entry_point)


@pytest.fixture(autouse=True, scope="module")
def _strong_sandbox():
    if not isolation_report().strong:
        pytest.skip("the sandbox refuses to run on a host without uid and network isolation")


def test_loads_all_164_problems():
    assert len(PROBLEMS) == 164 and len({p.task_id for p in PROBLEMS}) == 164
    assert all(f"def {p.entry_point}" in p.prompt + p.canonical_solution for p in PROBLEMS)
    assert load_problems(limit=5) == PROBLEMS[:5]


def test_chat_prompt_carries_the_function_in_a_python_block():
    (message,) = build_chat_prompt(PROBLEMS[0])
    assert message["role"] == "user"
    assert f"```python\n{PROBLEMS[0].prompt.rstrip()}\n```" in message["content"]


@pytest.mark.parametrize(
    "completion, expected_tail",
    [
        # a body continuation (base-model style) is appended to the prompt as is
        ("    return 1\n", "    return 1\n"),
        # the first python block wins over a later one and over the prose around it
        ("Sure:\n```python\ndef f(x):\n    return 2\n```\nor\n```python\ndef f(x):\n    return 3\n```", "return 2\n"),
        # a bare fence is used when there is no python one
        ("```\ndef f(x):\n    return 4\n```", "return 4\n"),
        # a fence cut off by the token limit runs to the end
        ("```python\ndef f(x):\n    return 5", "return 5"),
        # a fenced body without the def is still a continuation of the prompt
        ("```python\n    return 6\n```", '"""\n    return 6\n'),
    ],
)
def test_extract_code(completion, expected_tail):
    problem = PROBLEMS[0].__class__("T/0", 'def f(x):\n    """doc"""\n', "f", "", "")
    program = extract_code(problem, completion)
    assert program.startswith(problem.prompt) and program.endswith(expected_tail)
    compile(program, "program", "exec")


def test_canonical_solutions_all_pass_within_a_minute():
    start = time.monotonic()
    report = evaluate_completions(PROBLEMS, [p.canonical_solution for p in PROBLEMS], CFG)
    elapsed = time.monotonic() - start
    failures = [(r.task_id, r.status, r.error[-200:]) for r in report.rows if not r.passed]
    assert (report.passed, report.n, report.pass_at_1) == (164, 164, 1.0), failures
    assert elapsed < 60, f"{elapsed:.1f} s"


def test_broken_solutions_all_fail_and_loops_time_out():
    start = time.monotonic()
    completions = [broken_completion(i, p) for i, p in enumerate(PROBLEMS)]
    report = evaluate_completions(PROBLEMS, completions, CFG)
    elapsed = time.monotonic() - start
    assert report.passed == 0, [r.task_id for r in report.rows if r.passed]
    assert report.pass_at_1 == 0.0
    statuses = {r.task_id: r.status for r in report.rows}
    assert {t for t, s in statuses.items() if s == "timeout"} == LOOPING
    assert all(r.error for r in report.rows)
    assert elapsed < 60, f"{elapsed:.1f} s"
    assert len(report.table()) == 164 and set(report.table()[0]) == {"task_id", "passed", "status", "seconds", "error"}


class EchoCanonical:
    """A real backend stand-in at the interface boundary: answers each prompt with the canonical solution of the
    problem whose prompt it contains, the way a chat model replies (prose + a fenced block)."""

    def __init__(self, problems):
        self.by_prompt = {p.prompt.rstrip(): p for p in problems}
        self.calls = []

    def generate(self, messages, *, max_new_tokens, temperature):
        self.calls.append((len(messages), max_new_tokens, temperature))
        out = []
        for (message,) in messages:
            body = message["content"].split("```python\n", 1)[1].rsplit("\n```", 1)[0]
            p = self.by_prompt[body]
            out.append(f"Sure.\n```python\n{p.prompt}{p.canonical_solution}```\n")
        return out


def test_generate_then_evaluate_in_batches():
    problems = PROBLEMS[:20]
    backend = EchoCanonical(problems)
    cfg = HumanEvalConfig(batch_size=8, max_new_tokens=64)
    completions = generate_completions(backend, problems, cfg)
    assert backend.calls == [(8, 64, 0.0), (8, 64, 0.0), (4, 64, 0.0)]
    assert evaluate_completions(problems, completions, cfg).passed == 20
