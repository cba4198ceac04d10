"""Code data: the RL difficulty filter keeps problems with k in [1, 5] of 8 (solved in stage 1, meeting the
complexity bound in stage 2), SFT keeps correct and time-optimal candidates; the cached tasks write versioned
data and log pass-rate histograms. Candidates come from a real backend over known solutions.

.venv/bin/pytest tests/code/test_code_data.py -q
"""

import json
from pathlib import Path

import pytest

from forge.code.candidates import BROKEN, CandidatePoolBackend, known_candidates
from forge.code.data import RLRow, filter_rl, most_informative, sample_sft
from forge.code.judge import fence
from forge.code.problems import forge_problems
from forge.code.sandbox import isolation_report

FORGE = {p.id: p for p in forge_problems()}
pytestmark = pytest.mark.skipif(not isolation_report().strong, reason="the sandbox refuses on this host")


def pool(problem, good, broken):
    return [fence(problem.reference)] * good + [BROKEN[i % 3] for i in range(broken)]


def test_candidate_backend_is_greedy_at_zero_and_walks_the_pool_when_sampling():
    backend = CandidatePoolBackend({"q": ["a", "b", "c"]}, fallback="?")
    msgs = [[{"role": "user", "content": "q"}]]
    assert backend.generate(msgs) == ["a"] and backend.generate([[{"role": "user", "content": "x"}]]) == ["?"]
    drawn = [backend.generate(msgs, temperature=1.0, seed=3)[0] for _ in range(3)]
    assert sorted(drawn) == ["a", "b", "c"]


def test_stage1_filter_keeps_problems_solved_in_one_to_five_of_eight():
    ids = ["forge/count_distinct", "forge/majority", "forge/balanced_brackets", "forge/two_sum", "forge/lcs"]
    goods = [1, 8, 0, 5, 6]  # k per problem
    problems = [FORGE[i] for i in ids]
    backend = CandidatePoolBackend({p.prompt(): pool(p, g, 8 - g) for p, g in zip(problems, goods)})
    rows = filter_rl(backend, problems, stage=1)
    assert [(r.k, r.n) for r in rows] == [(g, 8) for g in goods]
    assert [r.problem_id for r in rows if r.kept] == ["forge/count_distinct", "forge/two_sum"]


def test_stage2_filter_counts_rollouts_meeting_the_complexity_bound():
    problem = FORGE["forge/max_subarray"]  # O(n) reference; the O(n^2) brute force is correct but too slow
    slow = fence(problem.labelled[1].source)
    backend = CandidatePoolBackend({problem.prompt(): [fence(problem.reference)] * 2 + [slow] * 6})
    (stage1,) = filter_rl(backend, [problem], stage=1)
    (stage2,) = filter_rl(backend, [problem], stage=2)
    if stage2.k != 2:
        # The two programs' classes are timing fits, and beside another test worker one can misread (this test
        # has failed that way): measured again, once, as tests/code/test_complexity.py does. A wrong count misses
        # twice.
        (stage2,) = filter_rl(backend, [problem], stage=2)
    assert (stage1.k, stage1.kept) == (8, False)  # everything passes: too easy for stage 1
    assert (stage2.k, stage2.kept) == (2, True)  # only two meet O(n): kept for the time-reward stage


def test_sft_keeps_only_correct_time_optimal_candidates():
    maxsub = FORGE["forge/max_subarray"]  # O(n) reference; the O(n^2) brute force is correct but too slow
    only_slow = FORGE["forge/twice_subsequence"]  # Appendix C.2: only the "before" is offered
    backend = CandidatePoolBackend({
        maxsub.prompt(): known_candidates(maxsub, good=1, slow=2, broken=1),
        only_slow.prompt(): [fence(only_slow.before.source)] * 2 + [BROKEN[0]],
    })
    result = sample_sft(backend, [maxsub, only_slow], n_candidates=4)
    kept = {s.source: s.messages[-1].content for s in result.samples}
    assert kept[f"code-sft:{maxsub.id}"] == fence(maxsub.reference)  # the O(n) one, once (deduplicated)
    # whatever class the "before" measures, it is the best correct candidate there: kept
    assert kept[f"code-sft:{only_slow.id}"] == fence(only_slow.before.source)
    assert len(result.samples) == 2 and all(s.domain == "code" for s in result.samples)
    assert sorted(result.pass_rates()).count(1.0) == 6  # 4 draws each from pools of 4 and 3 (one wraps)


def test_cached_tasks_write_versioned_data_and_histograms(workspace, tmp_path, monkeypatch, tiny_policy):
    import mlflow

    from forge.config import CodeDataConfig, CodeRLConfig, GenerationConfig
    from forge.data.versioning import data_status_clean
    from forge.stages import Checkpoint
    from registry.tracking import StageContext, init_mlflow
    from tasks.code import code_rl_filter_task, code_sft_task

    monkeypatch.setenv("FORGE_ROOT", str(tmp_path))
    init_mlflow(workspace)
    cfg = CodeDataConfig(limit=4, n_candidates=2, known_good=1, known_slow=0, known_broken=1)
    sft = code_sft_task.fn(ctx=StageContext(), cfg=cfg)
    rows = Path(sft.path, "rows.jsonl").read_text().splitlines()
    assert len(rows) == 4 and sft.path.startswith(str(tmp_path / "data" / "code" / "sft" / "v-"))
    # The filter samples the policy itself: an untrained model solves nothing, so k = 0 and no problem is kept.
    rl_cfg = CodeRLConfig(sources=["drills"], num_rollouts=4, keep_k_max=3, max_new_tokens=8,
                          drills={"rl_per_op": 1})
    policy = Checkpoint(model_dir=str(tiny_policy), model_name="forge-policy", version="1")
    rl = code_rl_filter_task.fn(ctx=StageContext(), cfg=rl_cfg, generation=GenerationConfig(), seed=0, stage=1,
                                policy=policy)
    manifest = json.loads(Path(rl.path, "manifest.json").read_text())
    assert rl.counts["rows"] == 0 and manifest["rows"] == 0 and manifest["policy"] == "forge-policy/1"
    assert rl.path.startswith(str(tmp_path / "rl-data" / "code" / "rl-stage1" / "v-"))
    assert rl.data_md5 and data_status_clean(tmp_path, "rl-data")  # versioned apart from data/
    assert manifest["metrics"]["code_rl_stage1_problems"] == 11.0 and manifest["metrics"]["code_rl_stage1_mean_k"] == 0
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(rl.run_id, "plots")}
    assert artifacts == {"plots/code_rl_stage1_problem_pass_rate.png", "plots/code_rl_stage1_rollout_pass_rate.png"}


def test_code_rl_trains_on_the_kept_problems_nearest_half_solved_in_their_own_order():
    rows = [RLRow(problem_id=f"p{i}", prompt="", k=k, n=8, kept=True, pass_rates=[], complexity="O(n)")
            for i, k in enumerate([1, 4, 5, 3, 2, 4])]
    # k 4 and 4 first; k 5 and k 3 are as far from 4: the earlier row (k 5) takes the last place
    assert [r.problem_id for r in most_informative(rows, 3)] == ["p1", "p2", "p5"]
    assert most_informative(rows, 10) == rows
