"""End to end: `forge run` in a scratch checkout, killed in the middle of SFT, resumed, then run again.

One module-scoped scenario (it is the expensive part of the suite, ~3–5 minutes on 2 cores) with several tests
reading its outcome: resume without redoing finished stages, a second run that trains nothing, the champion
loading by alias, mix shares, a clean DVC status, lineage tags on the SFT run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forge.workspace import REPO_ROOT
from tests.flows.checkout import forge, forge_env, make_checkout, run_and_kill, run_status

pytestmark = [pytest.mark.slow, pytest.mark.cost(700)]
PROFILE = REPO_ROOT / "configs" / "ci.yaml"
TRAINING_STAGES = ("pretrain", "sft-1-ctx-128", "sft-2-ctx-256", "sft-3-ctx-512", "rm-pointwise", "grpo-pointwise",
                   "rm-pairwise", "grpo-pairwise", "code-warmup", "code-rl-filter-1", "code-rl-stage1",
                   "code-rl-filter-2", "code-rl-stage2", "agentic-warmup", "agentic-rl")


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    root = make_checkout(tmp_path_factory.mktemp("checkout"))

    # Run 1: kill the whole process group once the second SFT stage has written a complete trainer checkpoint
    # (a torn one is covered by tests/training/test_checkpoints.py).
    run_and_kill(root, PROFILE, ".sft-1-*.work/checkpoint-*/trainer_state.json")
    after_kill = run_status(root)
    status_after_kill = forge(root, "status", timeout=60).stdout

    # Run 2: resume.
    second = forge(root, "run", "--profile", str(PROFILE))
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    after_resume = run_status(root)

    # Run 3: everything cached.
    third = forge(root, "run", "--profile", str(PROFILE))
    assert third.returncode == 0, third.stdout[-4000:] + third.stderr[-4000:]
    return {"root": root, "after_kill": after_kill, "after_resume": after_resume, "third": run_status(root),
            "second_out": second.stdout,
            "status_after_kill": status_after_kill}


def test_killed_run_is_reported_crashed_with_finished_stages(scenario):
    stages = scenario["after_kill"]["stages"]
    assert stages["pretrain"]["state"] == "completed"
    assert stages["sft-1-ctx-128"]["state"] == "completed"
    assert stages["sft-2-ctx-256"]["state"] == "running"  # as recorded when it was killed
    assert "crashed" in scenario["status_after_kill"]  # the killed process is gone: status says so


def test_resume_redoes_no_finished_stage(scenario):
    stages = scenario["after_resume"]["stages"]
    assert scenario["after_resume"]["state"] == "completed"
    for name in ("tokenizer", "pretrain", "pools", "sft-1-ctx-128"):
        assert stages[name]["state"] == "cached", (name, stages[name])
    assert stages["sft-2-ctx-256"]["state"] == "completed"
    assert stages["sft-3-ctx-512"]["state"] == "completed"
    # What each stage cost this process (forge/usage.py): a training stage spends CPU and holds a model.
    assert stages["sft-3-ctx-512"]["cpu_s"] > 0 and stages["sft-3-ctx-512"]["peak_rss_mb"] > 100
    assert "resum" in scenario["second_out"].lower()  # the trainer continued from its checkpoint


def test_second_run_trains_nothing(scenario):
    stages = scenario["third"]["stages"]
    evals = ("eval-humaneval", "eval-code", "eval-math", "eval-science", "eval-tool_use", "eval-alignment",
             "eval-deep_search")
    for name in TRAINING_STAGES + evals:
        assert stages[name]["state"] == "cached", (name, stages[name])
    # Only the bookkeeping ran again (not a timing: the two runs' wall times were within 1% beside another worker,
    # a cached run's fixed start-up cost being most of a CI-profile run's), and no stage registered a new version.
    assert {n for n, s in stages.items() if s["state"] != "cached"} <= {"dvc", "eval-report", "promote"}
    resumed = scenario["after_resume"]["stages"]
    assert [stages[n].get("version") for n in TRAINING_STAGES] == [resumed[n].get("version") for n in TRAINING_STAGES]


def test_the_plan_lists_exactly_the_stages_the_run_ran(scenario):
    """`forge plan` (forge/plan.py) names what a run will do; the CI profile's run is the check that it does."""
    from forge.config import load_profile
    from forge.plan import recipe_plan

    planned = [row.stage for row in recipe_plan(load_profile(PROFILE))]
    assert sorted(planned) == sorted(scenario["third"]["stages"])
    assert all(row.launcher == "task process" for row in recipe_plan(load_profile(PROFILE)))  # test_dist.py launches


def test_champion_loads_and_generates(scenario):
    code = (
        "from registry.models import load_model\n"
        "from registry.tracking import init_mlflow\n"
        "from forge.workspace import configure_environment\n"
        "init_mlflow(configure_environment())\n"
        "model, tok = load_model('models:/forge-policy@champion')\n"
        "ids = tok.apply_chat_template([{'role': 'user', 'content': 'What is 2 + 3?'}], add_generation_prompt=True,"
        " return_tensors='pt', return_dict=True)\n"
        "out = model.generate(**ids, max_new_tokens=8, do_sample=False)\n"
        "print('NEW_TOKENS', out.shape[1] - ids['input_ids'].shape[1])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=forge_env(scenario["root"]), cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split("NEW_TOKENS")[1]) > 0


def test_mix_shares_within_tolerance(scenario):
    manifest = json.loads((scenario["root"] / "data" / "mixes" / "sft-ci" / "manifest.json").read_text())
    for domain, row in manifest["domains"].items():
        assert abs(row["actual_share"] - row["target_share"]) <= 0.015, (domain, row)


def test_refined_rows_are_in_the_versioned_mix(scenario):
    """§2.1.1 ran before SFT: the rows it changed replaced theirs in the mix DVC versioned, as its manifest counts."""
    from forge.data.mix import read_mix

    mix_dir = scenario["root"] / "data" / "mixes" / "sft-ci"
    refinement = json.loads((mix_dir / "manifest.json").read_text())["refinement"]
    train, _ = read_mix(mix_dir)
    refined = [r for r in train if r.source.endswith(("+solution-refinement", "+cot-reconstruction"))]
    assert refinement["items"] == 8 and len(refined) == refinement["rows_refined"] <= 8
    assert all(r.parents for r in refined)
    for name in ("solution-refinement", "cot-reconstruction"):
        assert scenario["third"]["stages"][name]["state"] == "cached", name


def test_dvc_status_clean(scenario):
    from forge.data.versioning import data_status_clean

    assert data_status_clean(scenario["root"])
    assert (scenario["root"] / "data.dvc").exists()


def test_sft_run_carries_lineage(scenario):
    import mlflow

    from forge.data.versioning import read_data_md5

    uri = f"sqlite:///{scenario['root'] / '.forge' / 'mlflow' / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    exp = client.get_experiment_by_name("forge")
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`forge.stage` = 'sft'")
    assert runs, "no SFT run"
    flow_ids = {scenario["after_kill"]["flow_run_id"], scenario["after_resume"]["flow_run_id"]}
    for run in runs:
        tags = run.data.tags
        assert tags["forge.data_md5"] == read_data_md5(scenario["root"])  # the data.dvc the run versioned
        assert len(tags["forge.data_md5"].removesuffix(".dir")) == 32  # DVC's md5 of the data/ directory
        assert len(tags["forge.git_commit"].split("+")[0]) == 40
        assert tags["forge.flow_run_id"]
    assert flow_ids & {r.data.tags["forge.flow_run_id"] for r in runs}
    version = client.get_model_version_by_alias("forge-policy", "champion")
    assert version.tags["forge.data_md5"] == runs[0].data.tags["forge.data_md5"]


def test_prefect_run_holds_logs_artifacts_and_links_to_mlflow(scenario):
    import sqlite3

    import mlflow

    from forge.data.versioning import read_data_md5

    run = scenario["after_resume"]
    run_id = run["flow_run_id"]
    db = sqlite3.connect(scenario["root"] / ".forge" / "prefect" / "prefect.db")
    name, tags = db.execute("SELECT name, tags FROM flow_run WHERE id = ?", (run_id,)).fetchone()
    assert name == f"recipe·ci·{run_id[:8]}"
    assert {"profile:ci", f"data:{read_data_md5(scenario['root'])[:8]}"} <= set(json.loads(tags))
    # Forge's INFO lines reach the run: every stage's start and end, and training steps with their ETA.
    logs = [m for (m,) in db.execute("SELECT message FROM log WHERE flow_run_id = ? AND level = 20", (run_id,))]
    for stage in run["stages"]:
        assert any(m.startswith(f"stage {stage}: started") for m in logs), stage
        assert any(m.startswith((f"stage {stage}: done", f"stage {stage}: cached")) for m in logs), stage
    assert any(m.startswith("sft/ctx-512/step") and "loss" in m and "ETA" in m for m in logs)
    # One artifact per stage, linking to the stage's MLflow run.
    artifacts = dict(db.execute("SELECT key, data FROM artifact WHERE flow_run_id = ?", (run_id,)).fetchall())
    assert {f"stage-{stage}".replace("_", "-") for stage in run["stages"]} <= set(artifacts)
    sft = run["stages"]["sft-3-ctx-512"]
    assert f"/runs/{sft['run_id']}" in artifacts["stage-sft-3-ctx-512"] and "eval_loss_after" in artifacts[
        "stage-sft-3-ctx-512"]
    # And back: the MLflow parent run has the same name and the Prefect run's page.
    uri = f"sqlite:///{scenario['root'] / '.forge' / 'mlflow' / 'mlflow.db'}"
    parent = mlflow.MlflowClient(tracking_uri=uri).get_run(run["mlflow_run_id"])
    assert parent.info.run_name == name
    assert parent.data.tags["forge.prefect_url"] == f"http://127.0.0.1:4200/runs/flow-run/{run_id}"


def test_status_lists_every_run_and_shows_any_of_them(scenario):
    root = scenario["root"]
    runs = forge(root, "status", "--runs", "--json", timeout=60)
    assert runs.returncode == 0, runs.stdout + runs.stderr
    listed = json.loads(runs.stdout)
    assert [r["state"] for r in listed] == ["completed", "completed", "crashed"]  # newest first
    killed, resumed = scenario["after_kill"], scenario["after_resume"]
    assert [r["flow_run_id"] for r in listed[1:]] == [resumed["flow_run_id"], killed["flow_run_id"]]
    assert listed[0]["promotion"]["outcome"] in ("promoted", "refused", "already champion")
    assert listed[0]["data_md5"] == listed[1]["data_md5"] == listed[2]["data_md5"]  # killed after the data stage
    table = forge(root, "status", "--runs", timeout=60).stdout
    assert "crashed" in table and resumed["name"].removeprefix("recipe·") in table
    # One run by a prefix of its id: its header and its stages.
    one = forge(root, "status", "--run", killed["flow_run_id"][:8], timeout=60)
    assert one.returncode == 0 and killed["name"] in one.stdout and "crashed" in one.stdout
    assert "sft-2-ctx-256" in one.stdout and "total" in one.stdout
    unknown = forge(root, "status", "--run", "zzzz", timeout=60)
    assert unknown.returncode == 1 and "no run matches 'zzzz'" in unknown.stdout


def test_champion_is_the_final_rl_policy_with_lineage(scenario):
    """champion = agentic RL → agentic warm-up → code RL 2 → code RL 1 → code warm-up → pair-wise GRPO → point-wise GRPO →
    SFT → base; both RMs registered."""
    import mlflow

    uri = f"sqlite:///{scenario['root'] / '.forge' / 'mlflow' / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    version = client.get_model_version_by_alias("forge-policy", "champion")
    chain = []
    while True:
        chain.append(version.tags["forge.stage"])
        name, number = version.tags["forge.parent_version"].split("/")
        if name != "forge-policy":
            break
        version = client.get_model_version(name, number)
    assert chain == ["agentic-rl", "agentic-warmup", "code-rl-stage2", "code-rl-stage1", "code-warmup", "grpo-pairwise",
                     "grpo-pointwise", "sft"]
    assert name == "forge-base"
    # The gate compares every metric a version carries: a GRPO policy carries evaluations only, never its
    # rollout diagnostics (reward under its own RM, truncation rate), which are not comparable across versions.
    champion = client.get_model_version_by_alias("forge-policy", "champion")
    gated = {k.removeprefix("metric.") for k in champion.tags if k.startswith("metric.")}
    assert "sft_heldout_loss" in gated and "humaneval_pass_at_1" in gated
    assert not {m for m in gated if m.startswith(("reward", "overlong", "repetition", "rm_score"))}, gated
    for rm in ("forge-rm-pointwise", "forge-rm-pairwise"):
        versions = client.search_model_versions(f"name = '{rm}'")
        assert versions and versions[0].tags["forge.parent_version"].startswith("forge-policy/")
    stages = scenario["after_resume"]["stages"]
    assert all(stages[s]["state"] == "completed" for s in ("rm-pointwise", "grpo-pointwise", "rm-pairwise",
                                                           "grpo-pairwise", "code-rl-stage1", "code-rl-stage2",
                                                           "agentic-rl"))
    warmup = client.get_run(stages["code-warmup"]["run_id"])
    assert int(warmup.data.params["rows_replayed"]) > 0  # SFT-mix rows replayed beside the drills (warmup_replay)
    # Code RL stage 2 draws Figure 4 and compares itself with stage 1 on held-out drills.
    stage2 = client.get_run(stages["code-rl-stage2"]["run_id"])
    assert {"check_before_solved", "check_after_solved", "check_after_optimal_answers", "check_optimal_answers_change",
            "r_correctness_last20"} <= set(stage2.data.metrics)
    m = stage2.data.metrics  # the rise is the difference of the two checks, with its standard error
    assert m["check_optimal_rise"] == pytest.approx(m["check_after_optimal_share"] - m["check_before_optimal_share"])
    assert m["check_optimal_rise_se"] >= 0
    plots = {a.path for a in client.list_artifacts(stage2.info.run_id, "plots")}
    assert "plots/figure4_code_rl.png" in plots
    # Agentic RL on the link task: a warm-up on other heads' scripted solutions, then RL and its held-out check.
    warm = client.get_run(stages["agentic-warmup"]["run_id"]).data
    assert warm.metrics["links_loss_after"] < warm.metrics["links_loss_before"] and warm.params["task"] == "links"
    agentic = client.get_run(stages["agentic-rl"]["run_id"]).data.metrics
    assert agentic["check_questions"] == 4
    assert agentic["check_success_change"] == pytest.approx(agentic["check_success_after"]
                                                            - agentic["check_success_before"])
    table = json.loads(Path(client.download_artifacts(stages["agentic-rl"]["run_id"], "check_by_relation.json"))
                       .read_text())
    assert sum(row["asked"] for row in table.values()) == 4 and len(table) == agentic["check_relations"]
    assert sum(row["after"] for row in table.values()) == round(4 * agentic["check_success_after"])
    assert agentic["check_relations_answered_after"] == sum(row["after"] > 0 for row in table.values())
    assert "plots/check_by_relation.png" in {a.path for a in client.list_artifacts(stages["agentic-rl"]["run_id"],
                                                                                  "plots")}


def test_candidate_matrix_records_every_domain_and_gates(scenario):
    """The `evaluate-candidate` deployment's flow (`forge eval matrix`): every suite recorded on @candidate (the
    version the recipe proposed), the report plotted, the gate's decision on the version; then `forge eval compare`
    pairs the candidate's items with the champion's."""
    root = scenario["root"]
    out = forge(root, "eval", "matrix", "--profile", str(PROFILE))
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert "forge-policy/" in out.stdout and ("promoted" in out.stdout or "refused" in out.stdout)
    # Its Prefect is the checkout's (not ~/.prefect, where another checkout's cached reports would be served).
    import sqlite3

    db = sqlite3.connect(root / ".forge" / "prefect" / "prefect.db")
    assert db.execute("SELECT count(*) FROM flow_run JOIN flow ON flow.id = flow_run.flow_id"
                      " WHERE flow.name = 'evaluate-registered'").fetchone()[0] == 1
    code = (
        "import json\n"
        "from mlflow import MlflowClient\n"
        "from registry.tracking import init_mlflow\n"
        "from forge.workspace import configure_environment\n"
        "client = init_mlflow(configure_environment())\n"
        "v = client.get_model_version_by_alias('forge-policy', 'candidate')\n"
        "print('TAGS', json.dumps(v.tags))\n"
    )
    tags = subprocess.run([sys.executable, "-c", code], env=forge_env(root), cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert tags.returncode == 0, tags.stderr[-3000:]
    tags = json.loads(tags.stdout.split("TAGS", 1)[1])
    for suite in ("humaneval", "code", "math", "science", "tool_use", "alignment", "deep_search"):
        assert f"eval.{suite}.run_id" in tags, suite
    for metric in ("math_accuracy", "science_accuracy", "tool_use_accuracy", "alignment_win_rate",
                   "deep_search_accuracy"):
        assert 0.0 <= float(tags[f"metric.{metric}"]) <= 1.0
    assert tags["promotion.decision"] in ("promoted", "refused")
    compared = forge(root, "eval", "compare", "@champion", "@candidate", timeout=300)
    assert compared.returncode == 0, compared.stdout[-3000:] + compared.stderr[-3000:]
    for domain in ("math", "science", "alignment", "deep_search"):
        assert domain in compared.stdout


def test_a_second_run_in_the_checkout_is_refused_while_one_holds_it(scenario):
    from forge.data.versioning import data_status_clean, read_data_md5
    from forge.workspace import Workspace, run_lock

    root = scenario["root"]
    before = read_data_md5(root)
    with run_lock(Workspace(root=root, home=root / ".forge"), "another-profile"):
        out = forge(root, "run", "--profile", str(PROFILE), timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "another recipe run is using this checkout's data/" in out.stdout and "another-profile" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr
    assert read_data_md5(root) == before and data_status_clean(root)


def test_data_checkout_restores_the_data_a_model_was_trained_on(scenario):
    import mlflow

    from forge.data.versioning import data_status_clean, read_data_md5

    root = scenario["root"]
    uri = f"sqlite:///{root / '.forge' / 'mlflow' / 'mlflow.db'}"
    champion = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri).get_model_version_by_alias(
        "forge-policy", "champion")
    trained_on = champion.tags["forge.data_md5"]
    manifest = next((root / "data" / "mixes").glob("*/manifest.json"))
    edited = manifest.read_text() + "\n"
    manifest.write_text(edited)  # data/ rewritten since (another profile's run, a person)
    assert not data_status_clean(root)
    out = forge(root, "data", "checkout", "models:/forge-policy@champion", timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert read_data_md5(root) == trained_on and data_status_clean(root)
    kept = out.stdout.split("kept as ")[1].split()[0]  # what data/ held was versioned first, not lost
    back = forge(root, "data", "checkout", kept, timeout=300)
    assert back.returncode == 0 and manifest.read_text() == edited
    assert forge(root, "data", "checkout", f"models:/forge-policy/{champion.version}", timeout=300).returncode == 0
    assert read_data_md5(root) == trained_on and data_status_clean(root)
    missing = forge(root, "data", "checkout", "models:/forge-policy/999", timeout=120)
    assert missing.returncode == 1 and "no such registered version" in missing.stdout


def test_two_profiles_in_one_checkout_each_keep_their_data(scenario):
    # Another profile (here the CI one with another mix: name and sample, and without the code RL stages, which
    # this test does not need) runs in the same checkout after the first: each run's models name their own data
    # version, and either comes back whole.
    import mlflow

    from forge.data.versioning import data_status_clean, read_data_md5

    root = scenario["root"]
    uri = f"sqlite:///{root / '.forge' / 'mlflow' / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    first = client.get_model_version_by_alias("forge-policy", "champion")
    other = forge(root, "run", "--profile", str(PROFILE), "--set", "mix.name=sft-ci-other", "--set", "mix.seed=1",
                  "--set", "code_rl.enabled=false")
    assert other.returncode == 0, other.stdout[-3000:] + other.stderr[-3000:]
    newest = max(client.search_model_versions("name = 'forge-policy'"), key=lambda v: int(v.version))
    mine, theirs = first.tags["forge.data_md5"], newest.tags["forge.data_md5"]
    assert theirs == read_data_md5(root) != mine
    for version, md5 in ((first.version, mine), (newest.version, theirs)):
        out = forge(root, "data", "checkout", f"models:/forge-policy/{version}", timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        assert read_data_md5(root) == md5 and data_status_clean(root)
