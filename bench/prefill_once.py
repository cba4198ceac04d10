"""Benchmark: the recipe's group sampling with transformers' prefill against one prefill per distinct prompt.

    .venv/bin/python bench/prefill_once.py [--rounds 5] [--out bench/results/prefill_once.json]

A GRPO batch holds each prompt ``num_generations`` times in a row, and an agentic step's first turn holds each
question once per episode of its group; transformers' ``generate`` runs the prompt's forward (the prefill) for every
row. ``forge.attention.prefill_each_prompt_once`` (installed by ``use_fast_decoding``: every training stage and the
transformers backend) runs it for the distinct rows and copies their cache out. This samples with the tiny
profile's model (random weights), the recipe's attention, cache and autocast on both sides, only the prefill
different, alternating per round in one process:

- ``grpo``: 2 prompts × 8 rows, left-padded prompts of 100–160 tokens, 48 new tokens (the point- and pair-wise
  GRPO stages: 16 rows a generation batch);
- ``code``: 2 prompts × 8 rows, prompts of 150–200, 96 new tokens (code RL's rollouts);
- ``agentic``: 4 questions × 4 episodes, first-turn prompts of 350–450 tokens, 96 new tokens (an agentic RL step's
  first turn; its later turns differ row by row and take transformers' prefill).

Every row samples all its new tokens (no stop token), so both sides do the same work. Per scenario: the median
seconds per side, the ratio, tokens/s, and the share of rows that sampled the same tokens on both sides (the
distinct rows are a smaller matrix product: the same logits to rounding, so a rare row may sample differently).
Writes the JSON with the machine and its load.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_attention import alternate_comparing, bench_setup, prompts, timed_generate, timings, write_report

SCENARIOS = {  # name: (distinct prompts, rows per prompt, shortest prompt, longest prompt, new tokens)
    "grpo": (2, 8, 100, 160, 48),
    "code": (2, 8, 150, 200, 96),
    "agentic": (4, 4, 350, 450, 96),
}


def sample(model, scenario: tuple, bf16: bool, seed: int):
    """Seconds to sample the scenario's batch (each distinct prompt repeated in consecutive rows), and the tokens."""
    distinct, group, shortest, longest, new = scenario
    ids, mask = prompts(distinct, shortest, longest)
    return timed_generate(model, ids.repeat_interleave(group, 0), mask.repeat_interleave(group, 0), new, bf16, seed)


def main() -> None:
    args, model = bench_setup(__doc__.splitlines()[0], "bench/results/prefill_once.json")
    from transformers.generation import GenerationMixin

    from forge.attention import _transformers_prefill, prefill_each_prompt_once, use_fast_decoding
    from forge.hardware import bf16_pays_off

    use_fast_decoding()
    prefills = {"every_row": _transformers_prefill, "once": prefill_each_prompt_once}
    bf16 = bf16_pays_off()
    load_before = os.getloadavg()
    results = {}
    for name, scenario in SCENARIOS.items():
        distinct, group, shortest, longest, new = scenario

        def run(side: str, seed: int, scenario=scenario):
            GenerationMixin._prefill = prefills[side]
            return sample(model, scenario, bf16, seed)

        try:
            seconds, same = alternate_comparing(run, list(prefills), args.rounds)
        finally:
            use_fast_decoding()
        results[name] = {"distinct_prompts": distinct, "rows_per_prompt": group, "prompt_tokens": [shortest, longest],
                         "new_tokens": new, "bf16_autocast": bf16,
                         **timings(seconds, distinct * group * new, "every_row", "once"),
                         "same_tokens_share": round(same, 3)}
        median = results[name]["median_s"]
        print(f"{name:8s} every row {median['every_row']:.2f} s  once {median['once']:.2f} s  "
              f"{results[name]['speedup']:.2f}x  rows with the same tokens {same:.2f}")
    write_report(args.out, "group sampling with transformers' prefill against forge.attention.prefill_each_prompt_once",
                 f".venv/bin/python bench/prefill_once.py --rounds {args.rounds}", load_before, results)


if __name__ == "__main__":
    main()
