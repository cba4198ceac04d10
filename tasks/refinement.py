"""Prefect tasks for §2.1.1's SFT data construction: Solution Refinement, then CoT Reconstruction and the refined mix.

Run by the data flow before SFT when ``refinement.enabled``: the mix stage writes a draft mix under the home, these
tasks refine answers drawn from its train rows and write the mix that SFT trains on (and DVC versions), with each
refined row in the place of its original and the refined-over-draft pairs beside it for the point-wise RM.

The backend is the teacher endpoint when ``generation.openai_base_url`` is set (an OpenAI-compatible server,
e.g. vLLM serving a large model), else the base model. Outputs go to ``<home>/refined/<digest>/``:
``traces.jsonl`` (draft, every critique with its verdict and revision, final), ``pairs.jsonl`` (refined-over-draft
``PreferencePair`` rows) and, after reconstruction, ``rows.jsonl`` (the ``ChatSample`` rows that replace theirs).
"""

from __future__ import annotations

import json
from pathlib import Path

from forge.config import GenerationConfig, MixConfig, RefinementConfig
from forge.hashing import value_digest
from forge.stages import Base, Mix, Refinement, Tokenizer
from forge.workspace import Workspace
from tasks._cache import cached_task


@cached_task(name="solution-refinement", modules=("forge.data.refinement", "forge.training.pairs", "forge.data.mix"))
def solution_refinement_task(
    *, cfg: RefinementConfig, iterations: int, generation: GenerationConfig, seed: int, base: Base, mix: Mix
) -> Refinement:
    """Critique → revision rounds over answers from the draft mix's train rows; the traces and the
    refined-over-draft pairs."""
    from transformers import AutoTokenizer

    from forge.atomic import atomic_write_text
    from forge.data.jsonl import write_jsonl
    from forge.data.mix import read_mix
    from forge.data.refinement import refine_solutions, refined_outputs, refinement_items, trace_to_dict
    from forge.generation import teacher_or_local
    from forge.training.pairs import build_rl_prompts

    ws = Workspace.from_env()
    rows, _ = read_mix(mix.mix_dir)
    tokenizer = AutoTokenizer.from_pretrained(base.tokenizer_dir)
    prompts = build_rl_prompts(rows, tokenizer, max_prompts=cfg.items, max_prompt_tokens=cfg.max_prompt_length,
                               seed=f"{seed}:solution-refinement", domains=cfg.domains)
    with teacher_or_local(generation, base.model_dir) as backend:
        traces = refine_solutions(backend, refinement_items(rows, prompts), iterations=iterations,
                                  max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=seed)
    out = ws.home / "refined" / value_digest(cfg, iterations, generation, base.model_dir, mix.manifest, seed)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "traces.jsonl", "".join(json.dumps(trace_to_dict(t)) + "\n" for t in traces))
    _, pairs = refined_outputs(traces)
    write_jsonl(out / "pairs.jsonl", pairs)
    counts = {"items": len(traces), "flagged": sum(t.flagged for t in traces),
              "answers_changed": sum(t.answer_changed for t in traces), "pairs": len(pairs)}
    return Refinement(traces_path=str(out / "traces.jsonl"), pairs_path=str(out / "pairs.jsonl"), counts=counts,
                      metrics={f"refinement_{k}": v for k, v in counts.items()})


@cached_task(name="cot-reconstruction", modules=("forge.data.refinement", "forge.data.jsonl", "forge.data.mix",
                                               "forge.chat"))
def cot_reconstruction_task(
    *, cfg: RefinementConfig, generation: GenerationConfig, seed: int, base: Base, refined: Refinement,
    mix_cfg: MixConfig, draft: Mix, tokenizer: Tokenizer,
) -> Mix:
    """Rebuild a reasoning trace for each final answer, then write the mix SFT trains on: the draft with these rows
    in the places of theirs, the refined-over-draft pairs beside it, and what each step changed in its manifest
    (``refinement``). One stage, not two: writing the mix takes under a second, and as a stage of its own it
    spent a tenth of that in Prefect (bench/recipe_profile.py)."""
    from transformers import AutoTokenizer

    from forge.chat import count_chat_tokens
    from forge.data.jsonl import read_jsonl, write_jsonl
    from forge.data.mix import write_refined_mix
    from forge.data.refinement import reconstruct_cot, refined_outputs, refinement_counts, trace_from_dict
    from forge.data.schemas import ChatSample, PreferencePair
    from forge.generation import teacher_or_local

    path = Path(refined.traces_path)
    traces = [trace_from_dict(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    with teacher_or_local(generation, base.model_dir) as backend:
        reconstruct_cot(backend, traces, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=seed)
    rows, _ = refined_outputs(traces)
    write_jsonl(path.parent / "rows.jsonl", rows)  # the rows that replace theirs, kept beside the traces

    tok = AutoTokenizer.from_pretrained(tokenizer.tokenizer_dir)
    out_dir = Workspace.from_env().mixes / mix_cfg.name
    counts = {**refinement_counts(traces), "pairs": refined.counts["pairs"]}
    manifest = write_refined_mix(Path(draft.mix_dir), out_dir, read_jsonl(path.parent / "rows.jsonl", ChatSample).rows,
                                 read_jsonl(refined.pairs_path, PreferencePair).rows,
                                 lambda s: count_chat_tokens(tok, s), counts)
    return Mix(mix_dir=str(out_dir), manifest=manifest.model_dump(mode="json"))
