"""The cached Solution Refinement and CoT Reconstruction tasks, run (``.fn``) against a teacher endpoint: a real
local OpenAI-compatible server serving a tiny model, configured as ``generation.openai_base_url``."""

from __future__ import annotations

import json
from pathlib import Path

from forge.config import BaseModelConfig, GenerationConfig, RefinementConfig
from forge.data.jsonl import read_jsonl, write_jsonl
from forge.data.schemas import ChatSample, Message, PreferencePair
from forge.generation.openai_server import make_server, start_in_thread
from forge.generation.transformers_backend import TransformersBackend
from forge.stages import Checkpoint, DataMix
from forge.training.base_model import build_model
from forge.training.checkpoints import save_atomically
from tasks.refinement import cot_reconstruction_task, solution_refinement_task


def test_refinement_tasks_through_teacher_endpoint(tokenizer, tmp_path, workspace):
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128, seed=7)
    model = build_model(cfg, tokenizer)
    policy = save_atomically(model, tokenizer, tmp_path / "policy")
    mix = tmp_path / "mix"
    mix.mkdir()
    rows = [ChatSample.build(domain="general", source="test", messages=[
        Message(role="user", content=f"Question {i}: why is the sky blue?"),
        Message(role="assistant", content=f"Rayleigh scattering, answer {i}.")]) for i in range(3)]
    write_jsonl(mix / "train-000.jsonl", rows)
    write_jsonl(mix / "heldout.jsonl", [])
    server = make_server(TransformersBackend(model, tokenizer, device="cpu"), port=0)
    start_in_thread(server)
    try:
        host, port = server.server_address
        generation = GenerationConfig(backend="openai", openai_base_url=f"http://{host}:{port}/v1")
        refine_cfg = RefinementConfig(enabled=True, items=3, max_new_tokens=10, domains=["general"])
        checkpoint = Checkpoint(model_dir=str(policy))
        data = DataMix(mix_dir=str(mix), data_md5="md5")
        out = solution_refinement_task.fn(cfg=refine_cfg, iterations=2, generation=generation, seed=0,
                                          policy=checkpoint, data=data)
        cot = cot_reconstruction_task.fn(cfg=refine_cfg, generation=generation, seed=0, policy=checkpoint,
                                         refined=out)
    finally:
        server.shutdown()
    traces = [json.loads(line) for line in Path(out.traces_path).read_text().splitlines()]
    assert out.counts["items"] == len(traces) == 3
    assert all(len(t["critiques"]) == len(t["revisions"]) == 2 for t in traces)
    assert {t["draft"] for t in traces} == {r.messages[-1].content for r in rows}
    pairs = read_jsonl(out.pairs_path, PreferencePair).rows
    assert len(pairs) == out.counts["pairs"] == sum(t["final"].strip() != t["draft"].strip() for t in traces)
    refined = read_jsonl(cot.path, ChatSample).rows
    assert len(refined) == cot.counts["rows"] and all(r.parents and r.source == "solution-refinement" for r in refined)
    assert str(workspace.home) in out.traces_path
