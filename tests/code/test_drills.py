"""The drills (forge/code/problems/drills.py), the tiny profile's code RL family: every reference solves its
problems, every quadratic answer is correct but earns no R_time, every mistake fails a test; the SFT, RL and
evaluation splits share no problem; the weak teacher answers in the asked proportions. And the on-policy filter's
rollouts, sampled from a real model, differ (issue: one seed for all eight made them identical).

    .venv/bin/pytest tests/code/test_drills.py -q
"""

from __future__ import annotations

import pytest

from forge.code.data import PolicyCheck, _sample, compare_checks, judged_answers
from forge.code.judge import fence
from forge.code.problems import load_problems
from forge.code.problems.drills import OPS, OPS_BY_ID, drill_problems, drill_sft_rows, program
from forge.code.rewards import CodeRewards, score_completion
from forge.code.sandbox import isolation_report
from tests.code.candidates import CandidatePoolBackend

needs_sandbox = pytest.mark.skipif(not isolation_report().strong, reason="the sandbox refuses on this host")


def op_of(problem) -> str:
    return problem.id.split("/")[1]


@needs_sandbox
def test_reference_passes_quadratic_passes_without_time_reward_mistakes_fail():
    problems = drill_problems("rl", per_op=1)
    by_id = {p.id: p for p in problems}
    rewards = CodeRewards(by_id)
    answers, ids, kinds = [], [], []
    for p in problems:
        op = OPS_BY_ID[op_of(p)]
        for kind, body in [("fast", op.fast), ("slow", op.slow), *(("broken", b) for b in op.broken)]:
            if body is not None:
                answers.append(fence(program(body)))
                ids.append(p.id)
                kinds.append((p.id, kind))
    parts = rewards.parts(answers, problem_id=ids)
    # R_time is a timing fit, and answers judged at once on 2 shared cores (or beside another test) time each
    # other: a linear reference taken one class too slow is judged again alone, once, as in test_complexity.py
    # (a judge that is wrong, not unlucky, misses twice).
    parts = [
        score_completion(by_id[pid], answer) if kind == "fast" and part.time != 1.0 else part
        for answer, (pid, kind), part in zip(answers, kinds, parts, strict=True)
    ]
    for (pid, kind), part in zip(kinds, parts, strict=True):
        assert part.format > 0, (pid, kind)
        if kind == "fast":
            assert (part.correctness, part.time) == (1.0, 1.0), pid  # linear: the bound is met
        elif kind == "slow":
            assert (part.correctness, part.time) == (1.0, 0.0), pid  # correct, but two classes above O(n)
        else:
            assert part.correctness < 1.0, (pid, kind)


def test_splits_hold_different_problems_of_the_same_operations():
    splits = {s: drill_problems(s, per_op=5) for s in ("sft", "rl", "eval")}
    prompts = {s: {p.prompt() for p in ps} for s, ps in splits.items()}
    assert all(len(prompts[s]) == 5 * len(OPS) for s in splits)  # every problem's example differs
    assert not prompts["sft"] & prompts["rl"] and not prompts["rl"] & prompts["eval"]
    assert not prompts["sft"] & prompts["eval"]
    assert {op_of(p) for p in splits["rl"]} == {op.id for op in OPS}
    with pytest.raises(ValueError, match="unknown drill split"):
        drill_problems("test")


def test_weak_teacher_answers_in_the_asked_proportions():
    rows, kinds = drill_sft_rows(per_op=100, weights=(0.5, 0.3, 0.2), seed=0)
    assert len(rows) == 100 * len(OPS) == sum(kinds.values())
    quadratic_ops = sum(op.slow is not None for op in OPS)
    assert kinds["slow"] / (100 * quadratic_ops) == pytest.approx(0.3, abs=0.05)
    assert kinds["broken"] / len(rows) == pytest.approx(0.2, abs=0.04)
    assert all(r.domain == "code" and r.messages[-1].content.startswith("```python\n") for r in rows)
    sft_prompts = {r.messages[0].content for r in rows}
    assert not sft_prompts & {p.prompt() for p in drill_problems("rl", per_op=100)}


def test_rollouts_of_a_real_model_differ(tiny_policy):
    """Eight rollouts of one problem, sampled as the on-policy filter samples them (side by side in one call),
    are not eight copies."""
    from forge.generation.transformers_backend import TransformersBackend

    problems = drill_problems("rl", per_op=1, ops=("max", "distinct"))
    backend = TransformersBackend(tiny_policy, batch_size=8)
    rollouts = _sample(backend, problems, n=8, temperature=1.0, max_new_tokens=12, seed=0)
    for pid, texts in rollouts.items():
        assert len(texts) == 8 and len(set(texts)) >= 6, (pid, texts)
    again = _sample(backend, problems, n=8, temperature=1.0, max_new_tokens=12, seed=0)
    assert again == rollouts  # and the same seed gives the same eight


@needs_sandbox
def test_check_policy_reports_solved_and_optimal_shares():
    problems = drill_problems("eval", per_op=1, ops=("distinct", "max"))
    pools = {}
    for p in problems:
        op = OPS_BY_ID[op_of(p)]
        pools[p.prompt()] = [fence(program(op.fast)), fence(program(op.slow)), fence(program(op.broken[0])),
                             fence(program(op.fast))]

    def run_check() -> PolicyCheck:
        return PolicyCheck.of(judged_answers(CandidatePoolBackend(pools), problems, n=4, temperature=1.0,
                                             max_new_tokens=64))

    check = run_check()
    if check.optimal_share != pytest.approx(4 / 6):
        # The classes are timing fits, and beside another test worker one can misread (this test failed in CI on
        # 2026-11-28 with 2 of 6 optimal: one op's linear program read slower): measured again, once, as
        # tests/code/test_complexity.py does. Shares counted wrong miss twice.
        check = run_check()
    assert check.samples == 8 and check.solved == pytest.approx(6 / 8)
    assert check.optimal_share == pytest.approx(4 / 6)  # the two quadratic answers miss the bound
    assert check.optimal_answers == pytest.approx(4 / 8)  # of all samples
    assert check.solved_se == pytest.approx((6 / 8 * 2 / 8 / 8) ** 0.5)  # binomial, over the 8 samples
    assert check.optimal_share_se == pytest.approx((4 / 6 * 2 / 6 / 6) ** 0.5)  # over the 6 that passed


def test_a_comparison_of_two_checks_carries_the_error_of_its_difference():
    before, after = PolicyCheck(176, 110, 65, 1.0), PolicyCheck(176, 114, 63, 1.0)  # 0.59 -> 0.55, as on a Zen 4 host
    diff = compare_checks(before, after)
    assert diff["check_optimal_rise"] == pytest.approx(63 / 114 - 65 / 110)  # fell by 0.04
    assert diff["check_optimal_rise_se"] == pytest.approx(0.066, abs=0.001)  # larger than the fall
    assert diff["check_solved_change"] == pytest.approx(4 / 176)
    assert diff["check_optimal_answers_change"] == pytest.approx(-2 / 176)  # fewer optimal answers though more solved
    assert diff["check_optimal_answers_change_se"] == pytest.approx(
        (65 / 176 * 111 / 176 / 176 + 63 / 176 * 113 / 176 / 176) ** 0.5)
    same = compare_checks(after, after)
    assert same["check_optimal_rise"] == 0 and same["check_optimal_rise_se"] > 0
    assert PolicyCheck(0, 0, 0, 0.0).metrics("x")["x_optimal_share_se"] == 0  # no sample, no error (not a crash)


def test_drills_are_a_problem_source_of_code_rl():
    from forge.config import CodeRLConfig
    from tasks.code import rl_problems

    cfg = CodeRLConfig(sources=["drills"], drills={"rl_per_op": 2, "eval_per_op": 1})
    assert len(rl_problems(cfg)) == 2 * len(OPS) and len(rl_problems(cfg, "eval")) == len(OPS)
    forge_only = CodeRLConfig(sources=["forge"], limit=3)
    assert [p.id for p in rl_problems(forge_only)] == [p.id for p in load_problems(["forge"], limit=3)]
    assert rl_problems(forge_only, "eval") == []


def test_warmup_replays_the_asked_share_of_sft_mix_rows():
    """code_rl.warmup_replay: the warm-up trains on the drills plus SFT-mix rows making up that share of its rows,
    each mix row at most once, the same ones for the same seed."""
    from tasks.code import replay_rows

    mix = [f"mix-{i}" for i in range(500)]
    picked = replay_rows(mix, 300, 0.25, seed=0)
    assert len(picked) == 100 and len(set(picked)) == 100 and set(picked) <= set(mix)  # 100 / (300 + 100) = 0.25
    assert picked == replay_rows(mix, 300, 0.25, seed=0) != replay_rows(mix, 300, 0.25, seed=1)
    assert replay_rows(mix, 300, 0.0, seed=0) == []
    assert sorted(replay_rows(mix[:50], 300, 0.5, seed=0)) == sorted(mix[:50])  # fewer mix rows than asked: all
