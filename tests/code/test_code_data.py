"""Code data: the RL difficulty filter keeps problems with k in [1, 5] of 8 (solved in stage 1, meeting the
complexity bound in stage 2), SFT keeps correct and time-optimal candidates; the cached tasks write versioned
data and log pass-rate histograms. The selection's candidates come from a backend over known solutions
(tests/code/candidates.py); the recipe's stage samples a real model.

.venv/bin/pytest tests/code/test_code_data.py -q
"""

import json
from pathlib import Path

import pytest

from forge.code.data import RLRow, filter_rl, most_informative, sample_sft
from forge.code.judge import fence
from forge.code.problems import forge_problems
from forge.code.sandbox import isolation_report
from tests.code.candidates import BROKEN, CandidatePoolBackend, known_candidates

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


def _taught(model_dir: Path, out: Path, prompt: str, answer: str, steps: int = 150) -> Path:
    """``model_dir``'s model trained until it writes ``answer`` to ``prompt`` (a real model that knows one answer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    chat = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
    ids = torch.tensor([tok(tok.apply_chat_template(chat, tokenize=False), add_special_tokens=False)["input_ids"]])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_code_sft_data_keeps_what_the_model_answers_correctly_and_adds_it_to_the_code_pool(
        workspace, tmp_path, monkeypatch, tiny_policy):
    """§2.3.2 through the recipe's stage: the base model (no teacher endpoint here) samples answers to MBPP train
    tasks; the one task it was taught the reference of is kept, the other is not, and the code pool grows by it."""
    import mlflow

    from forge.code.problems import load_problems
    from forge.config import CodeJudgeConfig, CodeSFTConfig, GenerationConfig
    from forge.data.jsonl import read_jsonl, write_jsonl
    from forge.data.schemas import ChatSample, Message
    from forge.stages import Base, Pools
    from forge.workspace import REPO_ROOT
    from registry.tracking import StageContext, init_mlflow
    from tasks.code import code_sft_task

    monkeypatch.setenv("FORGE_ROOT", str(tmp_path))
    (tmp_path / "corpora").symlink_to(REPO_ROOT / "corpora")
    init_mlflow(workspace)
    _, second = load_problems(["mbpp-train"], limit=2)  # mbpp/1 and mbpp/2
    model = _taught(tiny_policy, tmp_path / "taught", second.prompt(), fence(second.reference))
    code = tmp_path / "code.jsonl"
    mine = ChatSample.build(domain="code", source="mine", messages=[Message(role="user", content="hi"),
                                                                    Message(role="assistant", content="hello")])
    write_jsonl(code, [mine.model_dump(mode="json")])
    pools = Pools(files={"code": str(code)}, digest="d0")
    cfg = CodeSFTConfig(enabled=True, limit=2, n_candidates=2, temperature=0.0, max_new_tokens=96)
    out = code_sft_task.fn(ctx=StageContext(), cfg=cfg, judge=CodeJudgeConfig(), generation=GenerationConfig(), seed=0,
                           base=Base(model_dir=str(model), tokenizer_dir=str(model)), pools=pools)

    rows = read_jsonl(out.files["code"], ChatSample, max_bad_ratio=0.0).rows
    assert [r.source for r in rows] == ["mine", f"code-sft:{second.id}"]  # greedy twice: one row, deduplicated
    assert rows[1].messages[1].content == fence(second.reference) and out.digest != pools.digest
    assert out.metrics["code_sft_candidates"] == 4 and out.metrics["code_sft_kept"] == 1
    assert out.metrics["code_sft_problems_covered"] == 1  # mbpp/1, the task it was not taught, kept nothing
    assert read_jsonl(code, ChatSample).rows == [mine]  # the input pool is left as it was
    logged = mlflow.get_run(out.run_id).data.metrics
    assert logged["code_sft_kept"] == 1 and logged["code_sft_problems"] == 2
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(out.run_id, "plots")}
    assert artifacts == {"plots/code_sft_candidate_pass_rate.png"}


def test_code_sft_and_code_rl_refuse_problems_the_evaluation_scores():
    from forge.config import ConfigError, load_profile, profile_path

    with pytest.raises(ConfigError) as err:
        load_profile("nanbeige-4.1-3b", {"eval.code.sources": ["mbpp", "forge"]})
    # Put at the field it names, with the file's line of code_rl (it sets no sources: the section's line), not <root>
    line = next(i for i, t in enumerate(profile_path("nanbeige-4.1-3b").read_text().splitlines(), 1)
                if t.startswith("code_rl:"))
    assert str(err.value).startswith(f"{profile_path('nanbeige-4.1-3b')}:{line}: code_rl.sources: forge would train on "
                                     "problems the code evaluation scores")
    with pytest.raises(ConfigError, match=r"tiny\.yaml: code_sft\.sources \(from overrides\): humaneval would train"):
        load_profile("tiny", {"code_sft.enabled": True, "code_sft.sources": ["mbpp-train", "humaneval"]})
    assert load_profile("tiny", {"code_sft.enabled": True}).code_sft.sources == ["mbpp-train"]


def test_cached_filter_writes_versioned_data_and_histograms(workspace, tmp_path, monkeypatch, tiny_policy):
    import mlflow

    from forge.config import CodeJudgeConfig, CodeRLConfig, GenerationConfig
    from forge.data.versioning import data_status_clean
    from forge.stages import Checkpoint
    from registry.tracking import StageContext, init_mlflow
    from tasks.code import code_rl_filter_task, shared_config

    monkeypatch.setenv("FORGE_ROOT", str(tmp_path))
    init_mlflow(workspace)
    # The filter samples the policy itself: an untrained model solves nothing, so k = 0 and no problem is kept.
    rl_cfg = CodeRLConfig(sources=["drills"], num_rollouts=4, keep_k_max=3, max_new_tokens=8,
                          drills={"rl_per_op": 1})
    policy = Checkpoint(model_dir=str(tiny_policy), model_name="forge-policy", version="1")
    rl = code_rl_filter_task.fn(ctx=StageContext(), cfg=shared_config(rl_cfg), judge=CodeJudgeConfig(),
                                generation=GenerationConfig(), seed=0, stage=1, policy=policy)
    manifest = json.loads(Path(rl.path, "manifest.json").read_text())
    assert rl.counts["rows"] == 0 and manifest["rows"] == 0 and manifest["policy"] == "forge-policy/1"
    assert rl.path.startswith(str(tmp_path / "rl-data" / "code" / "rl-stage1" / "v-"))
    assert rl.data_md5 and data_status_clean(tmp_path, "rl-data")  # versioned apart from data/
    assert manifest["metrics"]["code_rl_stage1_problems"] == 11.0 and manifest["metrics"]["code_rl_stage1_mean_k"] == 0
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(rl.run_id, "plots")}
    assert artifacts == {"plots/code_rl_stage1_problem_pass_rate.png", "plots/code_rl_stage1_rollout_pass_rate.png"}


def test_a_code_rl_stage_is_keyed_on_its_own_settings_only():
    """Changing stage 2's learning rate (or the warm-up) re-ran both filters and stage 1's training, a minute and a
    half of `forge run` for nothing: each task takes only its share of code_rl, which is what its cache key hashes
    (the filters: the shared settings; a stage: those and its own GRPO settings)."""
    from forge.config import CodeRLConfig, CodeRLStage
    from tasks.code import shared_config, stage_config

    base = CodeRLConfig(sources=["drills"], stage1={"learning_rate": 5e-5}, stage2={"learning_rate": 5e-5})
    other_stage2 = base.model_copy(update={"stage2": base.stage2.model_copy(update={"learning_rate": 1.5e-4}),
                                           "warmup_replay": 0.25})
    assert stage_config(other_stage2, 1) == stage_config(base, 1)
    assert stage_config(other_stage2, 2) != stage_config(base, 2)
    assert stage_config(other_stage2, 2).settings.learning_rate == 1.5e-4
    assert shared_config(other_stage2) == shared_config(base)  # neither filter re-runs
    shared = base.model_copy(update={"num_rollouts": 4, "keep_k_max": 3})
    assert stage_config(shared, 1) != stage_config(base, 1)  # what both stages read keys both
    assert stage_config(shared, 1).keep_k_max == 3 and shared_config(shared) != shared_config(base)
    with pytest.raises(ValueError, match="keep_k_min <= keep_k_max <= num_rollouts"):
        CodeRLStage(stage=1, settings=base.stage1, keep_k_max=9)


def test_code_rl_trains_on_the_kept_problems_nearest_half_solved_in_their_own_order():
    rows = [RLRow(problem_id=f"p{i}", prompt="", k=k, n=8, kept=True, pass_rates=[], complexity="O(n)")
            for i, k in enumerate([1, 4, 5, 3, 2, 4])]
    # k 4 and 4 first; k 5 and k 3 are as far from 4: the earlier row (k 5) takes the last place
    assert [r.problem_id for r in most_informative(rows, 3)] == ["p1", "p2", "p5"]
    assert most_informative(rows, 10) == rows


def test_sampling_sends_each_problems_rows_together_whole_groups_a_call(tiny_policy):
    """``_sample`` sends a problem's n rows side by side, whole groups a call, each call its own seed: with a batch
    of 8 and groups of 4, problems 1-2, 3-4 and 5 go out in three calls, each the very call made here (that the
    rows of a group differ: tests/code/test_drills.py)."""
    from forge.code.data import _sample
    from forge.code.problems.drills import drill_problems
    from forge.generation.transformers_backend import TransformersBackend

    problems = drill_problems("rl", 1)[:5]
    backend = TransformersBackend(tiny_policy, batch_size=8, device="cpu")
    sampled = _sample(backend, problems, 4, temperature=1.0, max_new_tokens=8, seed=1)
    assert list(sampled) == [p.id for p in problems] and all(len(rows) == 4 for rows in sampled.values())
    for call, part in enumerate((problems[0:2], problems[2:4], problems[4:])):
        rows = [[{"role": "user", "content": p.prompt()}] for p in part for _ in range(4)]
        alone = backend.generate(rows, max_new_tokens=8, temperature=1.0, seed=1 * 3 + call)
        assert alone == [text for p in part for text in sampled[p.id]]
