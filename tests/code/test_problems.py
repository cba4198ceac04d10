"""The problem sets: Forge's stdin/stdout problems are well formed and their references pass their own tests in
the sandbox; the Appendix C pairs are present; HumanEval and MBPP load as function problems.

.venv/bin/pytest tests/code/test_problems.py -q
"""

import random

import pytest

from forge.code.judge import run_problem_tests
from forge.code.problems import CLASSES, forge_problems, load_problems
from forge.code.problems.public import humaneval_problems, mbpp_problems
from forge.code.runner import Submission, judge_many
from forge.code.sandbox import isolation_report

FORGE = forge_problems()
needs_sandbox = pytest.mark.skipif(not isolation_report().strong, reason="the sandbox refuses on this host")


def test_at_least_thirty_well_formed_stdio_problems():
    assert len(FORGE) >= 30 and len({p.id for p in FORGE}) == len(FORGE)
    for p in FORGE:
        assert p.kind == "stdio" and p.complexity in CLASSES and p.generate and len(p.sizes) >= 5, p.id
        assert len(p.tests) >= 6 and all(t.output for t in p.tests), p.id
        assert "python" in p.prompt() and p.statement.strip()
    assert {p.complexity for p in FORGE} == set(CLASSES)  # every class has a problem


def test_generators_are_deterministic_and_grow():
    for p in FORGE:
        small, large = p.sizes[0], p.sizes[-1]
        assert p.generate(small, random.Random(1)) == p.generate(small, random.Random(1)), p.id
        assert len(p.generate(large, random.Random(2))) >= len(p.generate(small, random.Random(2))), p.id


def test_appendix_c_pairs_have_slower_before_solutions():
    pairs = {p.id: p for p in FORGE if p.before is not None}
    expected = {
        "forge/kagamimochi": ("O(n log n)", "O(n)"),
        "forge/twice_subsequence": ("O(n log n)", "O(n)"),
        "forge/min_cost_sort": ("O(n^2)", "O(n log n)"),
    }
    assert {k: (v.before.complexity, v.complexity) for k, v in pairs.items()} == expected


def test_all_known_solutions_agree_with_the_reference():
    """Forge's own code (references, befores, labelled brute forces), checked in process on every test."""
    for p in FORGE:
        spec_solutions = [s.solve for s in p.labelled] + ([p.before.solve] if p.before else [])
        for test in p.tests:
            if p.complexity in ("O(1)", "O(log n)") and int(test.input.split()[0]) > 10_000:
                continue  # the O(n) brute forces of "n"-valued problems would loop to 10**12
            for solve in spec_solutions:
                assert solve(test.input).split() == test.output.split(), (p.id, solve.__name__, test.input[:80])


@needs_sandbox
def test_references_pass_their_tests_in_the_sandbox():
    reports = judge_many([Submission(p.reference, p.tests, {"time_limit_s": 5.0}) for p in FORGE])
    failing = {p.id: [o.status for o in r.outcomes] for p, r in zip(FORGE, reports) if not r.all_passed}
    assert not failing


@needs_sandbox
def test_appendix_c_before_and_after_both_pass_in_the_sandbox():
    for p in FORGE:
        if p.before:
            assert run_problem_tests(p, p.before.source).all_passed, p.id


def test_public_sets_load_as_function_problems():
    he, mbpp = humaneval_problems(), mbpp_problems()
    assert len(he) == 164 and all(p.kind == "function" and p.entry_point and p.prefix for p in he)
    assert len(mbpp) == 500 and all(p.tests and p.entry_point for p in mbpp)
    assert [p.source for p in load_problems(["forge", "mbpp"], limit=2)] == ["forge", "forge", "mbpp", "mbpp"]
    with pytest.raises(ValueError, match="unknown problem source"):
        load_problems(["leetcode"])


@needs_sandbox
def test_mbpp_reference_solutions_pass():
    sample = mbpp_problems()[::10]  # 50 of the 500, spread over the split
    reports = judge_many(
        [Submission(p.reference, p.tests, {"setup": p.setup, "entry_point": p.entry_point}) for p in sample]
    )
    passed = sum(r.all_passed for r in reports)
    # MBPP has a few references whose tests use classes the checker cannot proxy (objects never cross).
    assert passed >= 0.9 * len(sample), [(p.id, r.outcomes[0]) for p, r in zip(sample, reports) if not r.all_passed]
