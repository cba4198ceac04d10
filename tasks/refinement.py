"""Prefect tasks for §2.1.1's data steps: Solution Refinement, then CoT Reconstruction, each cached.

The backend is the teacher endpoint when ``generation.openai_base_url`` is set (an OpenAI-compatible server,
e.g. vLLM serving a large model), else the given policy checkpoint through transformers. Outputs go to
``<home>/refined/<digest>/``: ``traces.jsonl`` (draft, every critique and revision, final), ``pairs.jsonl``
(refined-over-draft ``PreferencePair`` rows for the point-wise RM) and, after reconstruction, ``rows.jsonl``
(``ChatSample`` SFT rows with the rebuilt reasoning).
"""

from __future__ import annotations

import json
from pathlib import Path

from forge.config import GenerationConfig, RefinementConfig
from forge.hashing import value_digest
from forge.workspace import Workspace
from tasks._cache import cached_task


def _backend(generation: GenerationConfig, model_dir: str):
    from forge.generation import get_backend, local_backend

    if generation.openai_base_url:
        return get_backend("openai", base_url=generation.openai_base_url)
    return local_backend(generation.backend, model_dir)


@cached_task(name="solution-refinement", modules=("forge.data.refinement", "forge.training.grpo", "forge.data.jsonl"))
def solution_refinement_task(
    cfg: RefinementConfig, iterations: int, generation: GenerationConfig, model_dir: str, mix_dir: str,
    data_md5: str, seed: int,
) -> dict:
    """Critique → revision rounds over SFT answers from the mix; returns the traces and pairs files and counts."""
    from transformers import AutoTokenizer

    from forge.atomic import atomic_write_text
    from forge.data.jsonl import read_jsonl, write_jsonl
    from forge.data.refinement import refine_solutions, refined_outputs, trace_to_dict
    from forge.data.schemas import ChatSample
    from forge.training.grpo import build_rl_prompts

    ws = Workspace.from_env()
    rows = [r for shard in sorted(Path(mix_dir).glob("train-*.jsonl")) for r in read_jsonl(shard, ChatSample).rows]
    by_answer = {}
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = build_rl_prompts(rows, tokenizer, max_prompts=cfg.items, max_prompt_tokens=cfg.max_prompt_length,
                               seed=seed, domains=cfg.domains)
    for row in rows:
        by_answer.setdefault((row.messages[-1].content or ""), row)
    items = [(by_answer[p["reference"]], p["prompt"], p["reference"]) for p in prompts]
    traces = refine_solutions(_backend(generation, model_dir), items, iterations=iterations,
                              max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=seed)
    out = ws.home / "refined" / value_digest(cfg, iterations, generation, model_dir, data_md5, seed)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "traces.jsonl", "".join(json.dumps(trace_to_dict(t)) + "\n" for t in traces))
    _, pairs = refined_outputs(traces)
    write_jsonl(out / "pairs.jsonl", pairs)
    changed = sum(t.final.strip() != t.draft.strip() for t in traces)
    return {"traces": str(out / "traces.jsonl"), "pairs": str(out / "pairs.jsonl"),
            "counts": {"items": len(traces), "changed": changed, "pairs": len(pairs)}}


@cached_task(name="cot-reconstruction", modules=("forge.data.refinement", "forge.data.jsonl"))
def cot_reconstruction_task(
    cfg: RefinementConfig, generation: GenerationConfig, model_dir: str, traces_path: str, seed: int
) -> dict:
    """Rebuild a reasoning trace for each refined answer; writes the refined SFT rows next to the traces."""
    from forge.data.jsonl import write_jsonl
    from forge.data.refinement import reconstruct_cot, refined_outputs, trace_from_dict

    path = Path(traces_path)
    traces = [trace_from_dict(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    reconstruct_cot(_backend(generation, model_dir), traces, max_new_tokens=cfg.max_new_tokens,
                    temperature=cfg.temperature, seed=seed)
    rows, _ = refined_outputs(traces)
    write_jsonl(path.parent / "rows.jsonl", rows)
    return {"rows": str(path.parent / "rows.jsonl"), "count": len(rows)}
