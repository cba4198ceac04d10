"""`forge lineage` against a real (SQLite) MLflow store and a real DVC snapshot: a base version, an SFT child and an
RL grandchild registered with the recipe's lineage tags, the ``data`` run with its manifest, the mix versioned by DVC.

    .venv/bin/pytest tests/registry/test_lineage.py -q
"""

import json
import shutil
import uuid

import mlflow
import pytest
from typer.testing import CliRunner

from forge.cli import app
from forge.data.versioning import ensure_dvc, version_data
from forge.workspace import Workspace
from registry.lineage import LineageError, trace
from registry.models import register_checkpoint, set_alias
from registry.tracking import (
    DATA_MD5_TAG,
    FLOW_RUN_ID_TAG,
    PARENT_VERSION_TAG,
    PROFILE_TAG,
    STAGE_TAG,
    StageContext,
    git_commit,
    init_mlflow,
)
from tests.registry.test_registry import make_checkpoint

MANIFEST = {"name": "t", "total_tokens": 300, "target_total_tokens": 300, "shards": ["train-0000-of-0001.jsonl"],
            "heldout_file": "heldout.jsonl", "sources": {}, "config": {},
            "domains": {"stem": {"rows": 2, "tokens": 200, "target_tokens": 200, "target_share": 0.66,
                                 "actual_share": 0.667, "heldout_rows": 0, "pool_rows": 2},
                        "code": {"rows": 1, "tokens": 100, "target_tokens": 100, "target_share": 0.34,
                                 "actual_share": 0.333, "heldout_rows": 0, "pool_rows": 1}}}
ROWS = [{"domain": "stem", "source": "gsm8k/train.jsonl.gz"}, {"domain": "stem", "source": "gsm8k/train.jsonl.gz"},
        {"domain": "code", "source": "mbpp/mbpp.jsonl.gz"}]


@pytest.fixture(scope="module")
def client(workspace):
    return init_mlflow(workspace)


@pytest.fixture(scope="module")
def snapshot(workspace, tmp_path_factory):
    """A checkout whose data/ (one mix: shard + manifest) DVC versioned and pushed; data/ is then deleted, so the
    snapshot can only be read back from the DVC store."""
    root = tmp_path_factory.mktemp("checkout")
    (root / "corpora").mkdir()
    shutil.copy(workspace.corpora / "PROVENANCE.md", root / "corpora")
    mix = root / "data" / "mixes" / "t"
    mix.mkdir(parents=True)
    (mix / "train-0000-of-0001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (mix / "manifest.json").write_text(json.dumps(MANIFEST))
    ws = Workspace(root=root, home=root / "home")
    ensure_dvc(root, ws.dvc_remote)
    md5 = version_data(root)
    shutil.rmtree(root / "data")
    return ws, md5


@pytest.fixture(scope="module")
def chain(client, snapshot, tokenizer, tmp_path_factory):
    """base ← sft ← rl, registered as the recipe does (tasks/training.py), and the ``data`` run of the md5."""
    _, md5 = snapshot
    tmp = tmp_path_factory.mktemp("ckpts")
    base_name, policy = f"test-base-{uuid.uuid4().hex[:8]}", f"test-policy-{uuid.uuid4().hex[:8]}"
    ctx = StageContext(tags={PROFILE_TAG: "tiny", FLOW_RUN_ID_TAG: f"flow-{uuid.uuid4().hex[:6]}"})
    with ctx.start_run("data", {STAGE_TAG: "data", DATA_MD5_TAG: md5}):
        mlflow.log_param("mix", "t")
        mlflow.log_dict(MANIFEST, "manifest.json")
    refs = []
    for i, (name, stage) in enumerate([(base_name, "base"), (policy, "sft"), (policy, "rl")]):
        tags = ctx.lineage({STAGE_TAG: stage} | ({PARENT_VERSION_TAG: refs[-1], DATA_MD5_TAG: md5} if refs else {}))
        with ctx.start_run(stage, tags) as run:
            version = register_checkpoint(make_checkpoint(tmp / stage, tokenizer, i), name, run_id=run.info.run_id,
                                          tags=tags, metrics={"loss": 2.0 - i})
        refs.append(f"{name}/{version}")
    set_alias(policy, "candidate", refs[-1].split("/")[1])
    return refs, ctx, md5


def test_chain_reaches_parent_and_base_with_the_runs_lineage(chain):
    refs, ctx, md5 = chain
    policy = refs[-1].split("/")[0]
    result = CliRunner().invoke(app, ["lineage", f"models:/{policy}@candidate", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [n["ref"] for n in report["chain"]] == refs[::-1]  # rl → sft → base
    rl, sft, base = report["chain"]
    assert rl["parent"] == sft["ref"] and sft["parent"] == base["ref"] and base["parent"] is None
    assert rl["aliases"] == ["candidate"] and rl["stage"] == "rl" and rl["metrics"] == {"loss": 0.0}
    assert rl["git_commit"] == git_commit() and rl["data_md5"] == md5 and md5.endswith(".dir")
    assert rl["flow_run_id"] == ctx.tags[FLOW_RUN_ID_TAG] and rl["profile"] == "tiny" and rl["run_id"]
    [data] = report["data"]  # sft and rl share one md5
    assert data["md5"] == md5 and data["dvc_file"] == "data.dvc" and data["data_run_id"]
    assert data["mixes"][0]["domains"]["stem"]["rows"] == 2  # the data run's manifest

    human = CliRunner().invoke(app, ["lineage", f"models:/{refs[1]}"])  # the sft version by number
    assert human.exit_code == 0, human.output
    assert refs[1] in human.output and refs[0] in human.output and refs[2] not in human.output
    assert "mix t" in human.output and "stem" in human.output


def test_data_of_a_version_comes_back_from_the_dvc_store_with_licences(client, chain, snapshot):
    refs, _, md5 = chain
    ws, _ = snapshot
    report = trace(ws, f"models:/{refs[-1]}", client=client)
    [data] = report["data"]
    assert data["md5"] == md5
    assert data["snapshot"] and "data" not in (p.name for p in ws.root.iterdir())  # read from DVC, not data/
    [mix] = data["mixes"]
    assert mix["name"] == "t" and mix["total_tokens"] == 300 and mix["domains"]["code"]["rows"] == 1
    by_source = {c["source"]: c for c in mix["corpora"]}
    assert by_source["gsm8k/train.jsonl.gz"]["rows"] == 2 and by_source["mbpp/mbpp.jsonl.gz"]["rows"] == 1
    assert by_source["gsm8k/train.jsonl.gz"]["licence"].startswith("MIT")  # corpora/PROVENANCE.md's table


def test_a_missing_version_or_registry_is_a_clear_error(client, chain, tmp_path, workspace):
    refs, _, _ = chain
    policy = refs[-1].split("/")[0]
    for uri in (f"models:/{policy}/999", f"models:/{policy}@nope", "models:/no-such-model/1"):
        result = CliRunner().invoke(app, ["lineage", uri])
        assert result.exit_code == 1 and uri in result.output and "no such registered version" in result.output
    with pytest.raises(LineageError, match="no model registry"):
        trace(Workspace(root=workspace.root, home=tmp_path / "empty"), f"models:/{refs[-1]}")
