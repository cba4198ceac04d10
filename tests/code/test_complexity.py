"""The empirical complexity judge: ≥ 90% of ≥ 40 labelled solutions classified right, stable class over reruns
for O(n) and O(n²) references; the fit on synthetic curves; model-verdict parsing; R_time.

.venv/bin/pytest tests/code/test_complexity.py -q
"""

import math
import random

import pytest

from forge.code.complexity import ComplexityVerdict, classify, estimate_complexity, parse_class, time_reward
from forge.code.problems import CLASSES, forge_problems
from forge.code.runner import default_workers
from forge.code.sandbox import isolation_report

FORGE = {p.id: p for p in forge_problems()}
LABELLED = [(p, s) for p in FORGE.values() for s in p.labelled]
needs_sandbox = pytest.mark.skipif(not isolation_report().strong, reason="the sandbox refuses on this host")


@pytest.mark.parametrize("cls", CLASSES)
def test_fit_recovers_each_class_from_noisy_synthetic_timings(cls):
    from forge.code.complexity import GROWTH

    rng = random.Random(cls)
    sizes = (
        [10, 11, 12, 13, 14, 15]
        if cls == "O(2^n)"
        else [2**k for k in (8, 16, 24, 32, 40, 48)]
        if cls in ("O(1)", "O(log n)")
        else [500 * 2**k for k in range(6)]
    )
    scale = 1e-3 / GROWTH[cls](sizes[-1])
    points = [(n, 2e-4 + 50 * scale * GROWTH[cls](n) * (1 + 0.05 * rng.random())) for n in sizes]
    assert classify(points)[0] == cls


def test_flat_timings_are_constant_even_with_a_step():
    points = [(2**k, t) for k, t in zip((8, 16, 24, 32, 40, 48), (1.0e-4, 1.2e-4, 1.3e-4, 1.4e-4, 1.4e-4, 1.4e-4))]
    assert classify(points)[0] == "O(1)"


def test_a_problems_timing_inputs_are_drawn_once_and_the_same_as_drawn_afresh():
    from forge.code.complexity import timing_inputs

    problem = next(iter(FORGE.values()))
    timing_inputs.cache_clear()
    first = timing_inputs(problem.id, problem.generate, problem.sizes, 0)
    again = timing_inputs(problem.id, problem.generate, problem.sizes, 0)
    assert again is first and timing_inputs.cache_info().hits == 1
    rng = random.Random(f"{problem.id}:time:0")  # what measure() drew for every program before the cache
    assert first == tuple(problem.generate(n, rng) for n in problem.sizes)
    assert timing_inputs(problem.id, problem.generate, problem.sizes, 1) != first  # another seed, other inputs


@needs_sandbox
def test_labelled_solutions_are_classified_at_least_90_percent_right():
    from concurrent.futures import ThreadPoolExecutor

    assert len(LABELLED) >= 40
    with ThreadPoolExecutor(default_workers()) as pool:
        verdicts = list(
            pool.map(lambda ps: estimate_complexity(ps[1].source, ps[0], sizes=ps[1].sizes or None), LABELLED)
        )
    # A verdict is a timing fit, and two judged at once on 2 shared cores time each other: one that misses is
    # measured again alone, once (a judge that is wrong, not unlucky, misses twice).
    verdicts = [
        v if v.complexity == s.complexity else estimate_complexity(s.source, p, sizes=s.sizes or None)
        for (p, s), v in zip(LABELLED, verdicts)
    ]
    wrong = [
        (p.id, s.solve.__name__, s.complexity, v.complexity)
        for (p, s), v in zip(LABELLED, verdicts)
        if v.complexity != s.complexity
    ]
    assert len(wrong) <= 0.1 * len(LABELLED), wrong
    assert all(0.0 <= v.confidence <= 1.0 for v in verdicts)


@needs_sandbox
@pytest.mark.parametrize("problem_id", ["forge/max_subarray", "forge/edit_distance"])
def test_same_class_in_nine_of_ten_reruns(problem_id):
    from concurrent.futures import ThreadPoolExecutor

    problem = FORGE[problem_id]

    def fit(seed: int) -> str:
        return estimate_complexity(problem.reference, problem, sizes=problem.sizes[:5], seed=seed).complexity

    with ThreadPoolExecutor(default_workers()) as pool:
        classes = list(pool.map(fit, range(10)))
    # Ten fits two at a time on 2 shared cores, another test worker beside them: as in the labelled test, a fit that
    # misses is measured again alone, once (edit distance read O(n log n) twice in ten in CI on 2026-11-28). A judge
    # that is unstable, not unlucky, misses twice.
    classes = [c if c == problem.complexity else fit(seed) for seed, c in enumerate(classes)]
    assert classes.count(problem.complexity) >= 9, classes


@needs_sandbox
def test_a_solution_too_slow_for_the_sizes_is_unknown_and_earns_no_time_reward():
    problem = FORGE["forge/max_subarray"]
    slow = problem.labelled[1].source  # O(n^2) at sizes meant for O(n)
    verdict = estimate_complexity(slow, problem, time_limit_s=0.05, repeats=1)
    assert verdict.timed_out_at is not None and verdict.complexity == "unknown"
    assert time_reward(verdict, problem.complexity) == 0.0


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("The time complexity is O(n log n).", "O(n log n)"),  # plain statement
        ("Sorting is O(n log n) but the loop makes it O(n^2)", "O(n^2)"),  # the last class named wins
        ("O(N²) overall", "O(n^2)"),  # unicode superscript, upper-case N
        ("it runs in O(2^n)", "O(2^n)"),  # exponential
        ("O(1)", "O(1)"),  # constant
        ("linear time", None),  # no class named
    ],
)
def test_parse_class(answer, expected):
    assert parse_class(answer) == expected


@pytest.mark.parametrize(
    "measured, reference, reward",
    [
        ("O(n)", "O(n)", 1.0),  # matches the optimal bound
        ("O(log n)", "O(n)", 1.0),  # better than the reference (e.g. a smarter solution) still counts
        ("O(n log n)", "O(n)", 0.5),  # one class above the bound
        ("O(n^2)", "O(n)", 0.0),  # two classes above
        ("unknown", "O(n)", 0.0),  # could not be measured (too slow for the sizes)
    ],
)
def test_time_reward(measured, reference, reward):
    assert time_reward(ComplexityVerdict(measured, 1.0, "empirical"), reference) == reward
    assert not math.isnan(reward)


@needs_sandbox
def test_model_judge_is_used_when_configured_and_falls_back_to_measuring():
    from forge.code.complexity import judge_complexity
    from tests.code.candidates import CandidatePoolBackend

    problem = FORGE["forge/max_subarray"]
    says_quadratic = CandidatePoolBackend({}, fallback="Two nested loops, so O(n^2).")
    verdict = judge_complexity(problem.reference, problem, backend=says_quadratic)
    assert (verdict.complexity, verdict.method) == ("O(n^2)", "model")
    mute = CandidatePoolBackend({}, fallback="I am not sure.")
    verdict = judge_complexity(problem.reference, problem, backend=mute, repeats=2)
    assert verdict.method == "empirical" and verdict.complexity in CLASSES
