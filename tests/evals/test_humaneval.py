"""HumanEval harness: canonical solutions all pass, broken ones all fail, quickly, inside the sandbox.

.venv/bin/pytest tests/evals/test_humaneval.py -q
"""


import pytest
import torch

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


def test_canonical_solutions_all_pass():  # (their speed: bench/code_judge.py)
    report = evaluate_completions(PROBLEMS, [p.canonical_solution for p in PROBLEMS], CFG)
    failures = [(r.task_id, r.status, r.error[-200:]) for r in report.rows if not r.passed]
    assert (report.passed, report.n, report.pass_at_1) == (164, 164, 1.0), failures


def test_broken_solutions_all_fail_and_loops_time_out():
    completions = [broken_completion(i, p) for i, p in enumerate(PROBLEMS)]
    report = evaluate_completions(PROBLEMS, completions, CFG)
    assert report.passed == 0, [r.task_id for r in report.rows if r.passed]
    assert report.pass_at_1 == 0.0
    statuses = {r.task_id: r.status for r in report.rows}
    assert {t for t, s in statuses.items() if s == "timeout"} == LOOPING
    assert all(r.error for r in report.rows)
    assert len(report.table()) == 164 and set(report.table()[0]) == {"task_id", "passed", "status", "seconds", "error"}


def test_chat_style_answers_are_extracted_and_pass():
    """A chat model answers with prose and a fenced block holding the whole function: that must be judged."""
    problems = PROBLEMS[:20]
    completions = [f"Sure, here it is.\n```python\n{p.prompt}{p.canonical_solution}```\nDone." for p in problems]
    assert evaluate_completions(problems, completions, HumanEvalConfig()).passed == 20


def test_generate_with_the_transformers_backend_then_evaluate(tokenizer):
    """The real generation path: a (random, tiny) Llama behind TransformersBackend, batched, judged in the sandbox."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from forge.generation.transformers_backend import TransformersBackend

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    ))
    problems = PROBLEMS[:10]
    cfg = HumanEvalConfig(batch_size=4, max_new_tokens=8)
    completions = generate_completions(TransformersBackend(model, tokenizer, batch_size=4), problems, cfg)
    assert len(completions) == 10 and all(isinstance(c, str) for c in completions)
    report = evaluate_completions(problems, completions, cfg)
    assert report.n == 10 and len(report.rows) == 10
    assert report.passed == 0  # 8 random tokens do not implement a HumanEval function
