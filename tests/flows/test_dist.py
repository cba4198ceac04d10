"""End to end, shaped like the GPU profile (tests/profiles/dist.yaml, issue 15): a base checkpoint read from a
directory on disk (not built), the user's own SFT data in three formats beside corpora/, every training stage
launched under `accelerate launch` (2 CPU ranks, the FSDP config). The run is killed inside a launched GRPO stage
(launcher and ranks with it) and resumed from that stage's checkpoint; the rest of the recipe then runs launched.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset

from tests.flows.checkout import forge, make_checkout, run_and_kill, run_status
from tests.processes import processes_naming

pytestmark = [pytest.mark.slow, pytest.mark.cost(650)]
PROFILE = Path(__file__).resolve().parents[1] / "profiles" / "dist.yaml"
# Each launched stage logs "<function>: launching 2 process(es)"; after the kill the resumed run launches these.
INTERMEDIATE = 352  # the test's base checkpoint's MLP width: no profile builds one like it
LAUNCHED_AFTER_KILL = {"run_grpo": 4, "train_pairwise_rm": 1, "run_sft_stage": 1, "train_agentic_stage": 1}


def write_own_data(root: Path, docs: list[dict]) -> None:
    """The files tests/profiles/dist.yaml names: ShareGPT-style chats (JSON Lines, gzipped; record 3 broken),
    prompt/response Parquet, and a datasets save_to_disk folder."""
    ext = root / "external"
    ext.mkdir()
    lines = [json.dumps({"conversation": [{"from": "human", "value": f"What do you know about {d['title']}?"},
                                          {"from": "gpt", "value": d["text"][:240]}]}) for d in docs[:40]]
    lines[2] = "{not json"
    (ext / "chats.jsonl.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    pq.write_table(pa.table({"instruction": [f"Summarize the page on {d['title']}." for d in docs[40:80]],
                             "output": [d["text"][:200] for d in docs[40:80]]}), ext / "qa.parquet")
    Dataset.from_dict({"q": [f"Look up {d['title']} and say what it is." for d in docs[80:120]],
                       "a": [d["text"][:160] for d in docs[80:120]]}).save_to_disk(str(ext / "lookups"))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, tokenizer, wiki_docs):
    from forge.config import BaseModelConfig
    from forge.training.base_model import build_model
    from forge.training.checkpoints import save_atomically

    root = make_checkout(tmp_path_factory.mktemp("dist"))
    # The team's base checkpoint: a save_pretrained directory with its tokenizer (random weights; this profile
    # checks the plumbing, the CI and tiny profiles the learning).
    base = BaseModelConfig(hidden_size=128, num_layers=2, num_heads=2, num_kv_heads=2,
                           intermediate_size=INTERMEDIATE, max_position_embeddings=1536)
    save_atomically(build_model(base, tokenizer), tokenizer, root / "checkpoints" / "base")
    write_own_data(root, wiki_docs[1000:1120])

    run_and_kill(root, PROFILE, ".grpo-pointwise-*.work/checkpoint-*/trainer_state.json")
    # The whole process group was killed, launcher included; torch elastic gives each rank a session of its own, so
    # only the parent-death signals (forge/training/launch.py) can take the ranks down with it.
    _, left = psutil.wait_procs(processes_naming(str(root / ".forge" / "models")), timeout=60)  # ranks name their job
    after_kill = run_status(root)
    second = forge(root, "run", "--profile", str(PROFILE))
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    return {"root": root, "left_after_kill": left, "after_kill": after_kill, "second": second.stdout + second.stderr,
            "after_resume": run_status(root)}


def test_the_base_is_read_from_its_directory_not_built(scenario):
    stages = scenario["after_resume"]["stages"]
    assert "pretrain" not in stages and "tokenizer" not in stages
    assert scenario["after_resume"]["state"] == "completed"
    base = scenario["root"] / "checkpoints" / "base"
    # Every policy the run trained grew from it: its shape and its tokenizer.
    policies = [p for p in (scenario["root"] / ".forge" / "models").iterdir() if not p.name.startswith((".", "rm-"))]
    assert len(policies) == 9  # 3 SFT stages, 2 GRPO, the code warm-up, 2 code RL, agentic RL
    judged = stages["code-sft-data"]["metrics"]  # §2.3.2: two candidates for each of two MBPP train tasks, judged
    assert judged["code_sft_problems"] == 2 and judged["code_sft_candidates"] == 4
    for policy in policies:
        assert json.loads((policy / "config.json").read_text())["intermediate_size"] == INTERMEDIATE, policy.name
        assert (policy / "tokenizer.json").read_bytes() == (base / "tokenizer.json").read_bytes(), policy.name


def test_the_plan_lists_the_stages_the_run_ran(scenario):
    from forge.config import load_profile
    from forge.plan import recipe_plan

    plan = recipe_plan(load_profile(PROFILE))
    # "base" is a plan row, not a stage: a checkpoint on disk is found before the stages start.
    assert sorted(r.stage for r in plan if r.stage != "base") == sorted(scenario["after_resume"]["stages"])
    trained = {"sft-1-ctx-128", "sft-2-ctx-256", "sft-3-ctx-512", "rm-pointwise", "grpo-pointwise", "rm-pairwise",
               "grpo-pairwise", "code-warmup", "code-rl-stage1", "code-rl-stage2", "agentic-rl"}
    assert {r.stage for r in plan if r.launcher.startswith("accelerate launch ×2")} == trained


def test_a_killed_launched_grpo_stage_resumes_from_its_checkpoint(scenario):
    assert not scenario["left_after_kill"], f"ranks outlived the killed run: {scenario['left_after_kill']}"
    assert scenario["after_kill"]["stages"]["grpo-pointwise"]["state"] == "running"  # as recorded when killed
    stages = scenario["after_resume"]["stages"]
    for name in ("pools", "mix", "sft-1-ctx-128", "sft-3-ctx-512", "rm-pointwise"):
        assert stages[name]["state"] == "cached", (name, stages[name])
    assert stages["grpo-pointwise"]["state"] == "completed"
    flat = "".join(scenario["second"].split())  # the line as logged, however the console wrapped it
    assert re.search(r"grpo-pointwise:resumingfrom\S*checkpoint-\d+", flat)


def test_every_training_stage_after_the_kill_ran_launched(scenario):
    launches = re.findall(r"(\w+): launching 2 process\(es\)", scenario["second"])
    assert {f: launches.count(f) for f in set(launches)} == LAUNCHED_AFTER_KILL
    for name in ("rm-pairwise", "grpo-pairwise", "code-warmup", "code-rl-stage1", "code-rl-stage2", "agentic-rl"):
        assert scenario["after_resume"]["stages"][name]["state"] == "completed", name
    # On CPUs the FSDP config cannot shard: the run says so rather than pretending.
    assert "applies on GPUs only" in scenario["second"]


def test_the_own_data_joined_the_pools_with_licences_and_its_bad_record_named(scenario):
    root = scenario["root"]
    listing = {s["path"]: s for s in json.loads((root / "data" / "pools" / "sources.json").read_text())}
    assert set(listing) == {"external/chats.jsonl.gz", "external/qa.parquet", "external/lookups"}
    assert listing["external/chats.jsonl.gz"]["rows"] == 39 and listing["external/chats.jsonl.gz"]["bad"] == 1
    assert listing["external/qa.parquet"]["rows"] == 40 and listing["external/lookups"]["rows"] == 40
    assert all(s["licence"] == "CC-BY-SA-4.0" for s in listing.values())
    bad = (root / ".forge" / "quarantine" / "pools.general.bad.jsonl").read_text()
    assert "external/chats.jsonl.gz:3" in bad
