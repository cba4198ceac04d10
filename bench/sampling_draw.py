"""Benchmark: the recipe's sampling with torch's ``multinomial`` against Forge's (forge/attention.py).

    .venv/bin/python bench/sampling_draw.py [--rounds 5] [--out bench/results/sampling_draw.json]

``generate`` draws each sampled token with ``torch.multinomial(probs, 1)``, which on a CPU computes one exponential
variate per vocabulary entry in a serial loop, a logarithm each. ``forge.attention.multinomial`` (installed by
``use_fast_decoding``: every training stage and the transformers backend) draws the same 64-bit numbers and takes
their logarithms vectorized, the same tokens to the bit. This samples with the tiny profile's model (random
weights) at the shapes ``bench/decode_attention.py`` names (GRPO, code RL, the backend's batches, the agentic
loop), with the recipe's attention, cache, prefill, autocast and allocator settings (``use_fast_decoding``,
``keep_freed_memory``), the only difference the draw, alternating per round in one process. Every row samples all
its new tokens (no stop token). Per scenario: the median seconds per side, the ratio, tokens/s, and whether both
sides sampled the same tokens (same seed: they must). Then the draw alone, one call for 48 rows of the tiny
vocabulary, per side. Writes the JSON with the machine and its load.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bf16_cpu import VOCAB
from decode_attention import (
    SCENARIOS,
    alternate_comparing,
    bench_setup,
    prompts,
    timed_generate,
    timings,
    write_report,
)


def sample(model, scenario: tuple, seed: int):
    """Seconds to sample the scenario's batch, and the tokens sampled."""
    rows, shortest, longest, new, bf16 = scenario
    return timed_generate(model, *prompts(rows, shortest, longest), new, bf16, seed)


def draw_alone(draws: dict, rows: int = 48, calls: int = 200) -> dict[str, float]:
    """Microseconds per call of each side's draw on ``rows`` rows of the tiny vocabulary's probabilities."""
    import torch

    probs = torch.softmax(torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(0)) * 3, -1)
    micros = {}
    for side, draw in draws.items():
        draw(probs, 1)
        start = time.perf_counter()
        for _ in range(calls):
            draw(probs, 1)
        micros[side] = round((time.perf_counter() - start) / calls * 1e6, 1)
    return micros


def main() -> None:
    args, model = bench_setup(__doc__.splitlines()[0], "bench/results/sampling_draw.json")
    import torch

    from forge.attention import _torch_multinomial, multinomial, use_fast_decoding
    from forge.hardware import bf16_pays_off, keep_freed_memory

    keep_freed_memory()
    use_fast_decoding()
    draws = {"torch": _torch_multinomial, "forge": multinomial}
    bf16 = bf16_pays_off()
    load_before = os.getloadavg()
    results = {}
    for name, (rows, shortest, longest, new, _, autocast) in SCENARIOS.items():
        shape = (rows, shortest, longest, new, autocast and bf16)

        def run(side: str, seed: int, shape=shape):
            torch.multinomial = draws[side]
            return sample(model, shape, seed)

        seconds, same = alternate_comparing(run, list(draws), args.rounds)
        results[name] = {"rows": rows, "prompt_tokens": [shortest, longest], "new_tokens": new,
                         "bf16_autocast": shape[-1], **timings(seconds, rows * new, "torch", "forge"),
                         "same_tokens": same == 1.0}
        median = results[name]["median_s"]
        print(f"{name:8s} torch {median['torch']:.2f} s  forge {median['forge']:.2f} s  "
              f"{results[name]['speedup']:.2f}x  same tokens: {same == 1.0}")
    torch.multinomial = multinomial
    alone = [draw_alone(draws) for _ in range(args.rounds)]
    results["draw_48_rows_us"] = {side: statistics.median(a[side] for a in alone) for side in draws}
    print(f"one draw, 48 rows: {results['draw_48_rows_us']}")
    write_report(args.out, "sampling with torch.multinomial against forge.attention.multinomial",
                 f".venv/bin/python bench/sampling_draw.py --rounds {args.rounds}", load_before, results)


if __name__ == "__main__":
    main()
