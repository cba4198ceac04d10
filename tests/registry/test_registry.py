"""Tracking, registration, aliases, the promotion gate and rollback against a real (SQLite) MLflow store.

    .venv/bin/pytest tests/registry/test_registry.py -q

The store is the test session's scratch workspace (tests/conftest.py), or PostgreSQL where a test takes ``store``
(tests/registry/conftest.py); each test uses its own model name.
"""

import json

import mlflow
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from forge.config import HumanEvalConfig, PromotionConfig, load_profile
from registry.models import (
    get_alias_version,
    load_model,
    register_checkpoint,
    set_alias,
    set_version_metrics,
    version_metrics,
)
from registry.promotion import HISTORY_TAG, RollbackError, promote, rollback
from registry.tracking import (
    DATA_MD5_TAG,
    EXPERIMENT,
    FLOW_RUN_ID_TAG,
    GIT_COMMIT_TAG,
    PROFILE_TAG,
    STAGE_TAG,
    git_commit,
    init_mlflow,
    log_config,
    log_curve,
    log_table,
    start_stage_run,
)

POLICY = PromotionConfig()


def make_checkpoint(path, tokenizer, seed):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def register(tmp_path, tokenizer, name, seed, metrics, stage="sft"):
    ckpt = make_checkpoint(tmp_path / f"ckpt-{seed}", tokenizer, seed)
    with start_stage_run(stage, tags={PROFILE_TAG: "tiny", DATA_MD5_TAG: "abc123.dir"}) as run:
        version = register_checkpoint(ckpt, name, run_id=run.info.run_id, tags={STAGE_TAG: stage, PROFILE_TAG: "tiny"})
    set_version_metrics(name, version, metrics)
    return version


def test_init_mlflow_is_idempotent_and_keeps_artifacts_in_the_workspace(client, workspace):
    again = init_mlflow(workspace)
    experiment = again.get_experiment_by_name(EXPERIMENT)
    assert experiment.artifact_location == workspace.mlflow_artifacts.resolve().as_uri()
    assert mlflow.get_tracking_uri() == workspace.mlflow_uri == mlflow.get_registry_uri()
    assert len([e for e in again.search_experiments() if e.name == EXPERIMENT]) == 1


def test_git_commit(tmp_path, workspace):
    assert git_commit(tmp_path) == "unknown"
    commit = git_commit(workspace.root)
    assert len(commit.split("+")[0]) == 40 and commit.split("+")[1:] in ([], ["dirty"])


def test_stage_runs_nest_and_carry_lineage_and_artifacts(client, workspace):
    with (
        start_stage_run("recipe", tags={FLOW_RUN_ID_TAG: "flow-123"}) as parent,
        start_stage_run("sft", tags={DATA_MD5_TAG: "d41d8cd9.dir"}) as child,
    ):
        params = log_config(HumanEvalConfig(limit=3))
        log_curve("loss", [0, 1, 2, 3], [3.0, 2.5, 2.2, 2.1], ylabel="loss")
        log_table(
            [{"task_id": "a", "passed": True}, {"task_id": "b", "passed": False, "status": "timeout"}],
            "evals/humaneval.json", metrics={"pass_at_1": 0.5},
        )
        log_table([{"task_id": "a", "score": float("nan")}], "evals/other.json")
    # a run started elsewhere (another process) nests under an explicit parent id
    with start_stage_run("eval", parent_run_id=parent.info.run_id) as sibling:
        pass
    run = client.get_run(child.info.run_id)
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert client.get_run(sibling.info.run_id).data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert run.data.tags[STAGE_TAG] == "sft" and run.data.tags[DATA_MD5_TAG] == "d41d8cd9.dir"
    assert run.data.tags[GIT_COMMIT_TAG] == git_commit()
    assert run.data.params["limit"] == "3" == params["limit"] and run.data.params["timeout_s"] == "5.0"
    files = {f.path for f in client.list_artifacts(child.info.run_id)} | {
        f.path for d in ("curves", "evals") for f in client.list_artifacts(child.info.run_id, d)
    }
    assert {"config.json", "curves/loss.png", "evals/humaneval.json"} <= files
    local = mlflow.artifacts.download_artifacts(run_id=child.info.run_id, artifact_path="curves/loss.png")
    with open(local, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert run.info.artifact_uri.startswith(workspace.mlflow_artifacts.resolve().as_uri())
    table_file = mlflow.artifacts.download_artifacts(run_id=child.info.run_id, artifact_path="evals/humaneval.json")
    with open(table_file) as f:
        table = json.load(f)
    assert table["columns"] == ["task_id", "passed", "status"] and len(table["data"]) == 2
    # what MLflow itself reads: its table loader (by the run's table tag) and the metrics logged with the table
    loaded = mlflow.load_table("evals/humaneval.json", run_ids=[child.info.run_id])
    assert loaded["task_id"].tolist() == ["a", "b"] and loaded["status"].tolist()[1] == "timeout"
    assert mlflow.load_table("evals/other.json", run_ids=[child.info.run_id])["score"].isna().all()  # NaN: null
    assert run.data.metrics["pass_at_1"] == 0.5


def test_register_alias_gate_rollback_and_load(store, tokenizer, tmp_path, model_name):
    client = store
    v1 = register(
        tmp_path, tokenizer, model_name, seed=1, metrics={"humaneval_pass_at_1": 0.30, "sft_heldout_loss": 2.0}
    )
    mv = client.get_model_version(model_name, v1)
    assert mv.tags[STAGE_TAG] == "sft" and mv.tags[PROFILE_TAG] == "tiny" and mv.tags[GIT_COMMIT_TAG] == git_commit()
    assert client.get_run(mv.run_id).data.tags[DATA_MD5_TAG] == "abc123.dir"
    assert version_metrics(model_name, v1) == {"humaneval_pass_at_1": 0.30, "sft_heldout_loss": 2.0}
    assert get_alias_version(model_name, "champion") is None
    with pytest.raises(RollbackError, match="no previous champion"):
        rollback(client, model_name)

    # first candidate: no champion, promoted
    set_alias(model_name, "candidate", v1)
    assert promote(client, model_name, POLICY).promote
    assert get_alias_version(model_name, "champion") == v1

    # a regression beyond tolerance: refused, the champion stays, the refusal is recorded on the candidate
    v2 = register(
        tmp_path, tokenizer, model_name, seed=2, metrics={"humaneval_pass_at_1": 0.20, "sft_heldout_loss": 1.9}
    )
    set_alias(model_name, "candidate", v2)
    decision = promote(client, model_name, POLICY)
    assert not decision.promote and not decision.compared["humaneval_pass_at_1"]["ok"]
    assert get_alias_version(model_name, "champion") == v1
    tags = client.get_model_version(model_name, v2).tags
    assert tags["promotion.decision"] == "refused" and tags["promotion.compared_to"] == v1
    assert any("humaneval_pass_at_1" in r for r in json.loads(tags["promotion.reasons"])) and tags["promotion.at"]

    # an improvement: promoted, the old champion becomes previous-champion
    v3 = register(
        tmp_path, tokenizer, model_name, seed=3, metrics={"humaneval_pass_at_1": 0.35, "sft_heldout_loss": 1.8}
    )
    set_alias(model_name, "candidate", v3)
    assert promote(client, model_name, POLICY).promote
    assert (get_alias_version(model_name, "champion"), get_alias_version(model_name, "previous-champion")) == (v3, v1)
    assert client.get_model_version(model_name, v3).tags["promotion.decision"] == "promoted"

    # and another one (v4 within tolerance of v3, passed by explicit version)
    v4 = register(
        tmp_path, tokenizer, model_name, seed=4, metrics={"humaneval_pass_at_1": 0.34, "sft_heldout_loss": 1.8}
    )
    assert promote(client, model_name, POLICY, version=v4).promote
    assert json.loads(client.get_registered_model(model_name).tags[HISTORY_TAG]) == [v1, v3]

    # the champion loads by alias with transformers and generates; it is v4's weights, not another version's
    model, tok = load_model(f"models:/{model_name}@champion")
    reference, _ = load_model(tmp_path / "ckpt-4")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reference.state_dict().values()))
    inputs = tok("def add(a, b):", return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape[1] > inputs["input_ids"].shape[1]
    assert isinstance(tok.decode(out[0][inputs["input_ids"].shape[1] :]), str)

    # rollbacks walk the history back: v4 -> v3 -> v1, then there is nothing left
    assert rollback(client, model_name) == v3
    assert (get_alias_version(model_name, "champion"), get_alias_version(model_name, "previous-champion")) == (v3, v1)
    assert client.get_model_version(model_name, v3).tags["rollback.replaced"] == v4
    assert rollback(client, model_name) == v1
    assert get_alias_version(model_name, "champion") == v1
    assert get_alias_version(model_name, "previous-champion") is None
    with pytest.raises(RollbackError):
        rollback(client, model_name)
    name_only, _ = load_model(model_name)  # a bare name loads the champion
    assert name_only.config.hidden_size == 32


def test_promote_without_candidate_is_a_clear_error(client, tokenizer, tmp_path, model_name):
    register(tmp_path, tokenizer, model_name, seed=5, metrics={"humaneval_pass_at_1": 0.1})
    with pytest.raises(ValueError, match="no version given and no 'candidate' alias"):
        promote(client, model_name, POLICY)


def test_register_refuses_a_dir_without_tokenizer(client, tmp_path, model_name):
    LlamaForCausalLM(
        LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4)
    ).save_pretrained(tmp_path / "bare")
    with start_stage_run("sft") as run, pytest.raises(FileNotFoundError, match="tokenizer_config.json"):
        register_checkpoint(tmp_path / "bare", model_name, run_id=run.info.run_id)


def test_cli_promote_refuses_a_regression_and_rollback_explains_itself(client, tokenizer, tmp_path, model_name):
    from typer.testing import CliRunner

    from forge.cli import app

    runner = CliRunner()
    # every metric the tiny profile's gate declares: one it lacks would refuse even the first candidate
    gate = load_profile("tiny").promotion.metrics
    tiny = {m: (0.30 if g.direction == "higher" else 2.0) for m, g in gate.items()}
    v1 = register(tmp_path, tokenizer, model_name, seed=6, metrics=tiny)
    set_alias(model_name, "candidate", v1)
    first = runner.invoke(app, ["promote", "--model", model_name])
    assert first.exit_code == 0 and "promoted" in first.output
    again = runner.invoke(app, ["promote", "--model", model_name])  # an unchanged re-run proposes v1 again
    assert again.exit_code == 0 and "already champion" in again.output
    assert client.get_model_version(model_name, v1).tags["promotion.decision"] == "promoted"  # record kept
    v2 = register(tmp_path, tokenizer, model_name, seed=7, metrics={**tiny, "humaneval_pass_at_1": 0.10})
    set_alias(model_name, "candidate", v2)
    worse = runner.invoke(app, ["promote", "--model", model_name])
    assert worse.exit_code == 1 and "refused" in worse.output and "humaneval_pass_at_1" in worse.output
    assert get_alias_version(model_name, "champion") == v1
    nothing = runner.invoke(app, ["rollback", "--model", model_name])  # v1 was the first champion
    assert nothing.exit_code == 1 and "previous champion" in nothing.output.lower()


def test_gate_reads_only_the_declared_metrics_of_real_versions(client, tokenizer, tmp_path, model_name):
    """Versions in the registry carrying an undeclared ``metric.*`` tag (a stage's rollout diagnostics): it neither
    blocks a candidate that lacks it nor passes one that regressed on a declared metric."""
    declared = {"humaneval_pass_at_1": 0.30, "sft_heldout_loss": 2.0}
    v1 = register(tmp_path, tokenizer, model_name, seed=11, metrics={**declared, "reward_last20": 0.9})
    assert promote(client, model_name, POLICY, version=v1).promote
    v2 = register(tmp_path, tokenizer, model_name, seed=12, metrics=declared)  # lacks reward_last20
    decision = promote(client, model_name, POLICY, version=v2)
    assert decision.promote and "reward_last20" not in decision.compared, decision.reasons
    assert get_alias_version(model_name, "champion") == v2
    worse = {"humaneval_pass_at_1": 0.10, "sft_heldout_loss": 2.0, "reward_last20": 100.0}
    v3 = register(tmp_path, tokenizer, model_name, seed=13, metrics=worse)
    assert not promote(client, model_name, POLICY, version=v3).promote
    assert get_alias_version(model_name, "champion") == v2
    reasons = json.loads(client.get_model_version(model_name, v3).tags["promotion.reasons"])
    assert any(r.startswith("ignored") and "reward_last20" in r for r in reasons)
