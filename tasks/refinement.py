"""Prefect tasks for §2.1.1's data steps: Solution Refinement, then CoT Reconstruction, each cached.

Run by the RL flow when ``refinement.enabled`` (off in every shipped profile): the refined-over-draft pairs join
the point-wise RM's data. The rebuilt SFT rows (``rows.jsonl``) are not read by any stage yet: putting them into
the SFT mix before SFT is the "SFT data construction" step of the code/agentic RL work (docs/architecture.md,
"Built, not yet in the recipe").

The backend is the teacher endpoint when ``generation.openai_base_url`` is set (an OpenAI-compatible server,
e.g. vLLM serving a large model), else the policy checkpoint. Outputs go to ``<home>/refined/<digest>/``:
``traces.jsonl`` (draft, every critique and revision, final), ``pairs.jsonl`` (refined-over-draft
``PreferencePair`` rows) and, after reconstruction, ``rows.jsonl`` (``ChatSample`` rows with the rebuilt reasoning).
"""

from __future__ import annotations

import json
from pathlib import Path

from forge.config import GenerationConfig, RefinementConfig
from forge.hashing import value_digest
from forge.stages import Checkpoint, DataFile, DataMix, Refinement
from forge.workspace import Workspace
from tasks._cache import cached_task


@cached_task(name="solution-refinement", modules=("forge.data.refinement", "forge.training.pairs", "forge.data.mix"))
def solution_refinement_task(
    *, cfg: RefinementConfig, iterations: int, generation: GenerationConfig, seed: int, policy: Checkpoint,
    data: DataMix,
) -> Refinement:
    """Critique → revision rounds over SFT answers from the mix; the traces and the refined-over-draft pairs."""
    from transformers import AutoTokenizer

    from forge.atomic import atomic_write_text
    from forge.data.jsonl import write_jsonl
    from forge.data.mix import read_mix
    from forge.data.refinement import refine_solutions, refined_outputs, refinement_items, trace_to_dict
    from forge.generation import teacher_or_local
    from forge.training.pairs import build_rl_prompts

    ws = Workspace.from_env()
    rows, _ = read_mix(data.mix_dir)
    tokenizer = AutoTokenizer.from_pretrained(policy.model_dir)
    prompts = build_rl_prompts(rows, tokenizer, max_prompts=cfg.items, max_prompt_tokens=cfg.max_prompt_length,
                               seed=seed, domains=cfg.domains)
    traces = refine_solutions(teacher_or_local(generation, policy.model_dir), refinement_items(rows, prompts),
                              iterations=iterations, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                              seed=seed)
    out = ws.home / "refined" / value_digest(cfg, iterations, generation, policy.model_dir, data.data_md5, seed)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "traces.jsonl", "".join(json.dumps(trace_to_dict(t)) + "\n" for t in traces))
    _, pairs = refined_outputs(traces)
    write_jsonl(out / "pairs.jsonl", pairs)
    counts = {"items": len(traces), "changed": sum(t.final.strip() != t.draft.strip() for t in traces),
              "pairs": len(pairs)}
    return Refinement(traces_path=str(out / "traces.jsonl"), pairs_path=str(out / "pairs.jsonl"), counts=counts,
                      metrics={f"refinement_{k}": v for k, v in counts.items()})


@cached_task(name="cot-reconstruction", modules=("forge.data.refinement", "forge.data.jsonl"))
def cot_reconstruction_task(
    *, cfg: RefinementConfig, generation: GenerationConfig, seed: int, policy: Checkpoint, refined: Refinement
) -> DataFile:
    """Rebuild a reasoning trace for each refined answer; writes the refined SFT rows next to the traces."""
    from forge.data.jsonl import write_jsonl
    from forge.data.refinement import reconstruct_cot, refined_outputs, trace_from_dict
    from forge.generation import teacher_or_local

    path = Path(refined.traces_path)
    traces = [trace_from_dict(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    reconstruct_cot(teacher_or_local(generation, policy.model_dir), traces, max_new_tokens=cfg.max_new_tokens,
                    temperature=cfg.temperature, seed=seed)
    rows, _ = refined_outputs(traces)
    write_jsonl(path.parent / "rows.jsonl", rows)
    return DataFile(path=str(path.parent / "rows.jsonl"), counts={"rows": len(rows)})
