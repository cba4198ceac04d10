"""Benchmark: the recipe's sampling with transformers' DynamicCache against Forge's GrowingCache.

    .venv/bin/python bench/kv_cache.py [--rounds 5] [--out bench/results/kv_cache.json]

``DynamicCache`` appends each sampled token's keys and values with ``torch.cat``, copying every layer's whole cache
per token; ``forge.attention.GrowingCache`` (what ``generate`` builds once ``use_fast_decoding`` ran: every
training stage and the transformers backend) writes them into room kept ahead. This samples with the tiny profile's
model (random weights) at the shapes ``bench/decode_attention.py`` names (GRPO, code RL, the backend's batches, the
agentic loop), with the attention and autocast the recipe samples under, the only difference the cache, alternating
per round in one process. Every row samples all its new tokens (no stop token). Per scenario: the median seconds
per side, the ratio, tokens/s, and whether both sides sampled the same tokens (same seed: they must). Writes the
JSON with the machine and its load.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_attention import (
    SCENARIOS,
    alternate_comparing,
    bench_setup,
    prompts,
    timed_generate,
    timings,
    write_report,
)


def sample(model, cache_class, scenario: tuple, seed: int):
    """Seconds to sample the scenario's batch with a fresh cache of ``cache_class``, and the tokens sampled."""
    rows, shortest, longest, new, bf16 = scenario
    return timed_generate(model, *prompts(rows, shortest, longest), new, bf16, seed,
                          past_key_values=cache_class(config=model.config))


def main() -> None:
    args, model = bench_setup(__doc__.splitlines()[0], "bench/results/kv_cache.json")
    from transformers import DynamicCache

    from forge.attention import GrowingCache, use_fast_decoding
    from forge.hardware import bf16_pays_off

    use_fast_decoding()
    caches = {"dynamic": DynamicCache, "growing": GrowingCache}
    bf16 = bf16_pays_off()
    load_before = os.getloadavg()
    results = {}
    for name, (rows, shortest, longest, new, _, autocast) in SCENARIOS.items():
        shape = (rows, shortest, longest, new, autocast and bf16)
        seconds, same = alternate_comparing(lambda side, seed, shape=shape: sample(model, caches[side], shape, seed),
                                            list(caches), args.rounds)
        results[name] = {"rows": rows, "prompt_tokens": [shortest, longest], "new_tokens": new,
                         "bf16_autocast": shape[-1], **timings(seconds, rows * new, "dynamic", "growing"),
                         "same_tokens": same == 1.0}
        median = results[name]["median_s"]
        print(f"{name:8s} dynamic {median['dynamic']:.2f} s  growing {median['growing']:.2f} s  "
              f"{results[name]['speedup']:.2f}x  same tokens: {same == 1.0}")
    write_report(args.out, "sampling with transformers' DynamicCache against forge.attention.GrowingCache",
                 f".venv/bin/python bench/kv_cache.py --rounds {args.rounds}", load_before, results)


if __name__ == "__main__":
    main()
