"""Benchmark: transformers-backend generation, batched against one prompt at a time, side by side.

    .venv/bin/python bench/generation.py [--prompts 32] [--batch 16] [--max-new-tokens 64]

Same tiny-profile-sized Llama (fresh weights: the speed of generate() does not depend on what was learned), same
HH-RLHF prompts rendered with the chat template, greedy decoding with the KV cache. Generated tokens are counted
by re-tokenizing each completion. The two settings alternate twice and the better run counts (shared machine).
Batched and unbatched greedy outputs are also compared (they must be equal). Writes bench/results/generation.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from forge.config import load_profile
from forge.data import corpora as C
from forge.data.pools import hh_chat
from forge.generation.transformers_backend import TransformersBackend
from forge.training.base_model import build_model
from forge.training.pairs import prompt_and_reference
from forge.training.tokenizer import train_tokenizer

REPO = Path(__file__).resolve().parent.parent


def _prompts(n: int) -> list[list[dict]]:
    out = []
    for i, item in enumerate(C.load_hh(REPO / "corpora")):
        try:
            row = hh_chat(item, i)
        except ValueError:
            continue
        pr = prompt_and_reference(row) if row else None
        if pr and sum(len(m["content"]) for m in pr[0]) < 600:
            out.append(pr[0])
        if len(out) == n:
            break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    tiny = load_profile("tiny").base
    prompts = _prompts(args.prompts)
    tokenizer = train_tokenizer((m["content"] for p in _prompts(2000) for m in p), tiny.tokenizer)
    model = build_model(tiny, tokenizer)
    backends = {"unbatched": TransformersBackend(model, tokenizer, batch_size=1, device="cpu"),
                "batched": TransformersBackend(model, tokenizer, batch_size=args.batch, device="cpu")}
    runs: dict[str, list[dict]] = {k: [] for k in backends}
    outputs: dict[str, list[str]] = {}
    for _ in range(2):
        for name, backend in backends.items():
            started = time.perf_counter()
            texts = backend.generate(prompts, max_new_tokens=args.max_new_tokens, temperature=0.0)
            seconds = time.perf_counter() - started
            tokens = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
            runs[name].append({"tokens": tokens, "seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 1)})
            outputs[name] = texts
            print(name, runs[name][-1], flush=True)
    best = {k: max(v, key=lambda r: r["tokens_per_s"]) for k, v in runs.items()}
    result = {
        "benchmark": "generation",
        "command": f"python bench/generation.py --prompts {args.prompts} --batch {args.batch} "
                   f"--max-new-tokens {args.max_new_tokens}",
        "backend": "transformers (KV cache, left padding, greedy)",
        "model": {"hidden_size": tiny.hidden_size, "layers": tiny.num_layers, "vocab": len(tokenizer)},
        "prompts": len(prompts), "batch_size": args.batch, "max_new_tokens": args.max_new_tokens,
        "unbatched": best["unbatched"], "batched": best["batched"], "all_runs": runs,
        "batched_over_unbatched_tokens_per_s": round(best["batched"]["tokens_per_s"] / best["unbatched"]["tokens_per_s"], 3),
        "greedy_outputs_equal": outputs["batched"] == outputs["unbatched"],
        "machine": {"torch_threads": torch.get_num_threads(), "platform": platform.platform(),
                    "load": "2-core machine shared with other engineers' jobs; alternating runs, best of two"},
    }
    (REPO / "bench" / "results" / "generation.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("unbatched", "batched", "batched_over_unbatched_tokens_per_s",
                                             "greedy_outputs_equal")}, indent=2))


if __name__ == "__main__":
    main()
