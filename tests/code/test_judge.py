"""Correctness judge (format check + pass rate) and the code RL rewards, table-driven.

.venv/bin/pytest tests/code/test_judge.py -q
"""

import pytest

from forge.code.judge import extract_code, fence, judge_correctness, parses
from forge.code.problems import forge_problems
from forge.code.problems.public import humaneval_problems
from forge.code.rewards import CodeRewards
from forge.code.runner import Test, defined_functions, run_tests
from forge.code.sandbox import isolation_report

FORGE = {p.id: p for p in forge_problems()}
HE = {p.id: p for p in humaneval_problems()}
PROBLEMS = FORGE | HE
needs_sandbox = pytest.mark.skipif(not isolation_report().strong, reason="the sandbox refuses on this host")

MAXSUB = FORGE["forge/max_subarray"]
KADANE = fence(MAXSUB.reference)
BRUTE = fence(MAXSUB.labelled[1].source)  # correct, O(n^2): fails the time bound O(n)
# Right on the examples and small tests only when all numbers are positive: partial pass rate.
TOTAL = fence("import sys\nd = sys.stdin.read().split()\nprint(sum(map(int, d[1:])))")


@pytest.mark.parametrize(
    "completion, lang, code_start",
    [
        ("```python\nprint(1)\n```", "python", "print(1)"),  # a python block
        ("text\n```cpp\nint main(){}\n```", "cpp", "int main"),  # a C++ block
        ("```\nprint(2)\n```", "python", "print(2)"),  # a bare fence defaults to python
        ("```python\nprint(3)", "python", "print(3)"),  # cut off by the length limit: runs to the end
        ("```json\n{}\n```\n```py\nprint(4)\n```", "python", "print(4)"),  # unknown languages are skipped
    ],
)
def test_extract_code(completion, lang, code_start):
    found = extract_code(completion)
    assert found.lang == lang and found.code.startswith(code_start)


@pytest.mark.parametrize(
    "code, lang, ok",
    [
        ("print(1)\n", "python", True),  # parses
        ("def f(:\n", "python", False),  # syntax error
        ("   \n", "python", False),  # empty
        ("int main() { return 0; }", "cpp", True),  # has main
        ("int helper() { return 0; }", "cpp", False),  # no main
    ],
)
def test_parses(code, lang, ok):
    assert parses(code, lang) is ok


@needs_sandbox
@pytest.mark.parametrize(
    "completion, format_ok, pass_rate",
    [
        (KADANE, True, 1.0),  # the reference, fenced
        (MAXSUB.reference, False, 1.0),  # right code, no fence: runs, but the format check fails
        ("```python\nprint(\n```", False, 0.0),  # does not parse
        ("I don't know.", False, 0.0),  # prose only
    ],
)
def test_correctness_verdicts(completion, format_ok, pass_rate):
    verdict = judge_correctness(MAXSUB, completion)
    assert (verdict.format_ok, verdict.pass_rate) == (format_ok, pass_rate)


@needs_sandbox
def test_partial_pass_rate_and_cpp():
    verdict = judge_correctness(MAXSUB, TOTAL)
    assert 0.0 < verdict.pass_rate < 1.0 and verdict.format_ok
    cpp = """```cpp
#include <iostream>
int main(){ long long n, x, best = -(1LL<<60), cur = 0; std::cin >> n;
  for (int i = 0; i < n; i++) { std::cin >> x; cur = cur < 0 ? x : cur + x; if (cur > best) best = cur; }
  std::cout << best << "\\n"; }
```"""
    verdict = judge_correctness(MAXSUB, cpp)
    assert (verdict.lang, verdict.pass_rate, verdict.format_ok) == ("cpp", 1.0, True)


def test_the_checker_finds_the_top_level_functions_by_a_line_scan():
    source = (
        "import math\n\nasync def fetch():\n    pass\n\n\ndef helper(x):\n    def inner():\n        pass\n"
        "    return x\n\n\ndef  add (a, b):\n    return helper(a) + b\n\n\ndef helper(x):\n    return x\n"
    )
    assert defined_functions(source) == ["fetch", "helper", "add"]  # not the nested one; a redefinition once
    assert defined_functions('text = """\ndef ghost():\n"""\n') == ["ghost"]  # a proxy that can only answer an error


@needs_sandbox
def test_the_checker_calls_every_top_level_function_and_reports_a_compile_error():
    checks = [Test.check("assert candidate(1, 2) == 3\nassert helper(4) == 4")]
    source = "def helper(x):\n    return x\n\n\ndef add(a, b):\n    return helper(a) + b\n"
    assert run_tests(source, checks, entry_point="add").all_passed
    # the submission's own error, not a missing name in the checker
    report = run_tests("def add(a, b):\n    return a +\n", checks, entry_point="add")
    assert report.passed == 0 and "SyntaxError" in report.outcomes[0].detail, report.outcomes


@needs_sandbox
def test_humaneval_body_continuation_and_full_function():
    p = HE["HumanEval/0"]
    assert judge_correctness(p, p.reference[len(p.prefix) :]).pass_rate == 1.0  # the body alone
    assert judge_correctness(p, fence(p.reference)).all_passed


@needs_sandbox
@pytest.mark.parametrize(
    "stage, completion, expected",
    [
        (1, "no code at all", 0.0),  # nothing extractable: no format, nothing passes
        (1, "```python\nprint(\n```", 0.0),  # a block that does not parse
        (1, KADANE, 1.2),  # format 0.2 + pass rate 1
        (1, BRUTE, 1.2),  # stage 1 does not look at time
        (2, KADANE, 2.2),  # format + correctness + R_time 1 (meets O(n))
        (2, BRUTE, 1.2),  # all pass but O(n^2), two classes above O(n): R_time 0
        (2, "```python\nprint(0)\n```", 0.2),  # parses, passes nothing: format only
    ],
)
def test_code_rewards(stage, completion, expected):
    def reward() -> float:
        funcs = CodeRewards(problems=PROBLEMS).funcs()  # a fresh one: CodeRewards keeps its verdicts
        assert [f.__name__ for f in funcs] == ["r_format", "r_correctness", "r_time"]
        conversational = [[{"role": "assistant", "content": completion}]]
        parts = [f(prompts=["p"], completions=conversational, problem_id=[MAXSUB.id])[0] for f in funcs]
        return sum(w * p for w, p in zip(CodeRewards.weights(stage), parts))

    got = reward()
    if stage == 2 and got != pytest.approx(expected):
        # R_time times the program: beside another pytest worker on a slow host Kadane was once taken for a class
        # too slow (CI, 2026-11-27). Judged again, once, as tests/code/test_complexity.py does: a judge that is
        # wrong, not unlucky, misses twice.
        got = reward()
    assert got == pytest.approx(expected)


@needs_sandbox
def test_time_reward_only_when_every_test_passes():
    (parts,) = CodeRewards(problems=PROBLEMS).parts([TOTAL], problem_id=[MAXSUB.id])
    assert parts.format == 0.2 and 0 < parts.correctness < 1  # a fraction of the tests pass
    assert parts.time == 0.0  # no R_time below pass rate 1, even though summing is O(n)


def test_rewards_refuse_without_problem_ids():
    r_format = CodeRewards(problems=PROBLEMS).funcs()[0]
    with pytest.raises(ValueError, match="problem_id"):
        r_format(prompts=["p"], completions=["x"])
    with pytest.raises(KeyError, match="unknown problem ids"):
        r_format(prompts=["p"], completions=["x"], problem_id=["nope"])


@needs_sandbox
def test_a_complexity_judge_model_sets_r_time_on_every_rank(tmp_path, monkeypatch):
    """With ``code_judge.complexity_model_url`` the class behind R_time is the model's answer (§2.3.1's instruct
    judge), not a timing; the reward functions pickle, as a launched stage sends them to its ranks, and each copy
    connects to the endpoint itself. The model here is Forge's OpenAI-compatible server over a backend that
    answers every question with O(n^2): Kadane, O(n) when timed, then earns no R_time."""
    import pickle

    from forge.generation.openai_server import make_server, start_in_thread
    from tasks.code import JudgeEndpoint
    from tests.code.candidates import CandidatePoolBackend

    monkeypatch.setenv("FORGE_ROOT", str(tmp_path))  # the endpoint's answers are kept under the home
    server = make_server(CandidatePoolBackend({}, fallback="Two nested loops, so O(n^2)."), model_name="judge")
    start_in_thread(server)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        rewards = CodeRewards(problems=PROBLEMS, judge_connect=JudgeEndpoint(url, "judge"))
        funcs = pickle.loads(pickle.dumps(rewards.funcs()))  # what a rank receives
        parts = [f(prompts=["p"], completions=[KADANE], problem_id=[MAXSUB.id])[0] for f in funcs]
        assert parts == [0.2, 1.0, 0.0]  # format, every test passed, but "O(n^2)" is two classes above O(n)
        assert rewards.judge_backend is None  # the original never connected: only the copy that judged did
    finally:
        server.shutdown()
        server.server_close()
