"""The policy as a ReAct agent through the generation backend, and `forge synth search --n 200` end to end."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from forge.chat import format_assistant_text
from forge.config import BaseModelConfig
from forge.data.jsonl import read_jsonl
from forge.data.schemas import ChatSample, SearchQA, SearchTrajectory
from forge.generation.transformers_backend import TransformersBackend
from forge.search.agents import ReActAgent, parse_assistant
from forge.search.critic import judge_trajectory
from forge.search.walks import answer_set
from forge.training.base_model import build_model


def test_parse_assistant_reads_the_backends_format():
    text = format_assistant_text("", "I should search.", [{"name": "search", "arguments": {"query": "Hans Zimmer"}}])
    msg = parse_assistant(text)
    assert msg.reasoning == "I should search." and msg.tool_calls[0].arguments == {"query": "Hans Zimmer"}
    unknown = parse_assistant(format_assistant_text("hmm", None, [{"name": "browse", "arguments": {}}]))
    assert not unknown.tool_calls and "browse" in unknown.content  # kept as text: the critic sees no valid call
    assert parse_assistant("Paris").content == "Paris" and not parse_assistant("Paris").tool_calls
    # One call per turn: the first known call is the action, the rest are dropped.
    two = parse_assistant(format_assistant_text("", None, [{"name": "visit", "arguments": {"page": "Lucca"}},
                                                        {"name": "search", "arguments": {"query": "Lucca"}}]))
    assert [c.name for c in two.tool_calls] == ["visit"] and two.content == ""
    assert parse_assistant("<think> </think>").content == "(empty)"


def test_react_agent_drives_the_policy_through_the_backend(tokenizer, qas, tools):
    model = build_model(BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2,
                                        intermediate_size=128, seed=1), tokenizer)
    agent = ReActAgent(TransformersBackend(model, tokenizer, batch_size=4, device="cpu"), max_turns=2,
                       max_new_tokens=24)
    trajs = agent.run_many(qas[:4], tools)
    assert len(trajs) == 4
    for traj, qa in zip(trajs, qas[:4], strict=True):
        assert traj.agent == "policy" and traj.messages[0].content == qa.question
        assert traj.messages[1].role == "assistant"
        SearchTrajectory.model_validate(traj.model_dump())  # the same format as the scripted agents'
        verdicts = judge_trajectory(traj, qa, tools.graph)
        assert len(verdicts) == len(traj.assistant_indices())
        assert not traj.correct and not verdicts[-1].passed  # an untrained model answers nothing right


@pytest.fixture(scope="module")
def synth_run(tmp_path_factory, workspace, monkeypatch_module):
    root = tmp_path_factory.mktemp("root")
    (root / "corpora").symlink_to(workspace.corpora)
    monkeypatch_module.setenv("FORGE_ROOT", str(root))
    from forge.cli import app

    result = CliRunner().invoke(app, ["synth", "search", "--n", "200", "--agents", "planner"])
    assert result.exit_code == 0, result.output
    return root / "data" / "search"


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_synth_search_yields_200_unique_qas_and_filtered_pools(synth_run, graph):
    qas = read_jsonl(synth_run / "qa.jsonl", SearchQA, max_bad_ratio=0.0).rows
    assert len(qas) >= 200 and len({q.id for q in qas}) == len(qas)
    assert all(answer_set(graph, q.walk) == {q.answer_id} for q in qas)  # re-checked against the graph
    assert all(q.gold_path and q.walk["params"]["hops"] == len(q.gold_relations) for q in qas)
    trajs = read_jsonl(synth_run / "trajectories.jsonl", SearchTrajectory, max_bad_ratio=0.0).rows
    assert sum(t.correct for t in trajs) / len(trajs) >= 0.9
    samples = {d: read_jsonl(synth_run / "pools" / f"{d}.jsonl", ChatSample).rows for d in ("deep_search", "tool_use")}
    assert samples["deep_search"] and samples["tool_use"]
    assert all(any(c.name == "python" for m in r.messages for c in m.tool_calls) for r in samples["tool_use"])
    masked = [m for rows in samples.values() for r in rows for m in r.messages if m.role == "assistant" and not m.loss]
    assert masked  # failing turns travel as loss=False
    assert json.loads((synth_run / "pools" / "deep_search.jsonl").read_text().splitlines()[0])["tools"]
