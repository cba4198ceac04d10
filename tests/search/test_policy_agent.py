"""The policy as a ReAct agent in deep-search synthesis (§2.2.1, "multiple agent frameworks"): with
``deep_search.policy_agent`` a model joins the scripted agents on every QA of a shard, through the same tools, and its
trajectories pass the same critic; off, the shard is what the scripted agents alone write."""

from __future__ import annotations

import pytest

from forge.config import BaseModelConfig, DeepSearchConfig
from forge.data.jsonl import read_jsonl
from forge.data.schemas import SearchTrajectory
from forge.generation.transformers_backend import TransformersBackend
from forge.search.synthesize import synthesize_shard
from forge.training.base_model import build_model
from forge.workspace import Workspace
from tasks.search import synthesize_shard_task

SHARD = {"num_questions": 3, "num_shards": 1, "walk_length_min": 2, "walk_length_max": 3, "agents": ["planner"],
         "recency_window_days": 3653}


@pytest.fixture
def scratch_ws(workspace, tmp_path) -> Workspace:
    """A checkout of its own (the shard writes under data/), sharing the session's home and its search index."""
    (tmp_path / "corpora").symlink_to(workspace.corpora, target_is_directory=True)
    return Workspace(root=tmp_path, home=workspace.home)


def _trajectories(result: dict) -> list[SearchTrajectory]:
    return read_jsonl(result["traj_path"], SearchTrajectory, max_bad_ratio=0.0).rows


def test_the_policy_agent_joins_the_scripted_agents_and_meets_the_same_critic(scratch_ws, tokenizer):
    model = build_model(BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2,
                                        intermediate_size=128, seed=3), tokenizer)
    cfg = DeepSearchConfig(**SHARD, policy_agent=True, policy_agent_max_tool_calls=2, policy_agent_max_new_tokens=16)
    result = synthesize_shard(scratch_ws, cfg, 0, TransformersBackend(model, tokenizer, batch_size=4, device="cpu"))
    trajs = _trajectories(result)
    by_agent = {a: [t for t in trajs if t.agent == a] for a in ("planner", "policy")}
    assert len(by_agent["policy"]) == len(by_agent["planner"]) == result["qas"] == 3
    assert {t.qa_id for t in by_agent["policy"]} == {t.qa_id for t in by_agent["planner"]}  # every QA, both agents
    for traj in by_agent["policy"]:
        assert len(traj.verdicts) == len(traj.assistant_indices())  # each policy turn judged by the critic
        assert not traj.correct and not traj.verdicts[-1].passed  # an untrained model: nothing for the SFT pools
    assert sum(t.correct for t in by_agent["planner"]) >= 2

    # Off (the default), the same shard holds the planner's trajectories alone, byte for byte.
    off = synthesize_shard(scratch_ws, DeepSearchConfig(**SHARD), 0)
    assert [t.model_dump() for t in _trajectories(off)] == [t.model_dump() for t in by_agent["planner"]]


def test_a_policy_agent_without_a_model_is_refused_by_name(scratch_ws, monkeypatch):
    monkeypatch.setenv("FORGE_ROOT", str(scratch_ws.root))
    with pytest.raises(ValueError, match="deep_search.policy_agent needs deep_search.teacher_base_url"):
        synthesize_shard_task.fn(cfg=DeepSearchConfig(**SHARD, policy_agent=True), shard=0, corpora="-")
