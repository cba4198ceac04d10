"""Benchmark: the recipe's sampling before and after Forge's CPU decode attention and GRPO's sampling under autocast.

    .venv/bin/python bench/decode_attention.py [--rounds 5] [--out bench/results/decode_attention.json]

``forge.attention.use_fast_decoding`` (called by every training stage and the transformers backend)
sends each sampled token's attention (one query over the KV cache, on a CPU) through two matrix products instead
of PyTorch's flash kernel, and Forge's GRPO trainers (forge/training/grpo.py ``MixedSamplingGRPOTrainer``) sample
under the bf16 autocast their training forwards run under where ``runtime.bf16: auto`` turns it on. This samples
with the tiny profile's model (random weights) at the shapes the recipe samples at, ``before`` (SDPA; GRPO outside
autocast, as TRL does) against ``after`` (the decode attention; GRPO under autocast where bf16 pays off here),
alternating per round in one process:

- ``grpo``: 16 rows, left-padded prompts of 100–160 tokens, 48 new tokens (the point- and pair-wise GRPO stages);
- ``code``: 16 rows, prompts of 150–200, 96 new tokens (code RL's rollouts);
- ``eval``: 32 rows, prompts of 60–160, 96 new tokens, fp32 on both sides (the transformers backend: an
  evaluation suite's batch, the code RL filters and check);
- ``agentic``: 16 rows, prompts of 400–900 (an episode's context with tool responses), 96 new tokens, under bf16
  autocast on both sides where it pays off here (the agentic loop has always sampled under it).

Every row samples all its new tokens (no stop token), so both sides do the same work. Per scenario: the median
seconds per side, the ratio, tokens/s, and how far one decode step's logits are from SDPA's in the same precision
(max abs difference). Writes the JSON with the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bf16_cpu import REPO, VOCAB, tiny_model

SCENARIOS = {  # name: (rows, shortest prompt, longest prompt, new tokens, autocast before, autocast after)
    "grpo": (16, 100, 160, 48, False, True),
    "code": (16, 150, 200, 96, False, True),
    "eval": (32, 60, 160, 96, False, False),
    "agentic": (16, 400, 900, 96, True, True),
}


def prompts(rows: int, shortest: int, longest: int):
    """Left-padded random prompts, lengths spread between ``shortest`` and ``longest``."""
    import torch

    g = torch.Generator().manual_seed(rows * longest)
    ids = torch.randint(2, VOCAB, (rows, longest), generator=g)
    mask = torch.ones_like(ids)
    for row in range(rows):
        mask[row, : (longest - shortest) * row // max(rows - 1, 1)] = 0
    return ids.masked_fill(mask == 0, 0), mask


def timed_generate(model, ids, mask, new: int, bf16: bool, seed: int, **kwargs):
    """Seconds to sample ``new`` tokens for every row (no stop token) from seed ``seed``, under bf16 autocast if
    ``bf16``, and the tokens; ``kwargs`` go to ``generate``."""
    import torch

    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, top_k=0, max_new_tokens=new,
                             min_new_tokens=new, pad_token_id=0, **kwargs)
    return time.perf_counter() - start, out


def sample(model, scenario: tuple, seed: int) -> float:
    rows, shortest, longest, new, bf16 = scenario
    return timed_generate(model, *prompts(rows, shortest, longest), new, bf16, seed)[0]


def step_difference(model, scenario: tuple, ours, theirs) -> float:
    """Max |logit difference| of one decode step (after the prompt) between the two attentions."""
    import torch
    from transformers import AttentionInterface, DynamicCache

    rows, shortest, longest, _, bf16 = scenario
    ids, mask = prompts(rows, shortest, longest)
    out = []
    for fn in (theirs, ours):
        AttentionInterface.register("sdpa", fn)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            cache = DynamicCache()
            first = model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
            token = first.logits[:, -1:].argmax(-1)
            step = model(input_ids=token, attention_mask=torch.cat([mask, torch.ones_like(token)], 1),
                         past_key_values=cache, use_cache=True)
        out.append(step.logits[:, -1].float())
    return float((out[0] - out[1]).abs().max())


def alternate(run, sides: list[str], rounds: int) -> dict[str, list[float]]:
    """``run(side, seed)`` → seconds: each side once to warm up, then ``rounds`` rounds, the sides' order reversed
    every other round."""
    for side in sides:
        run(side, 0)
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    for r in range(rounds):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            seconds[side].append(run(side, r))
    return seconds


def alternate_comparing(sample, sides: list[str], rounds: int) -> tuple[dict[str, list[float]], float]:
    """``sample(side, seed)`` → (seconds, sampled tokens): :func:`alternate`'s seconds, and the share of rows that
    sampled the same tokens on every side with the same seed."""
    tokens: dict = {}
    same: list[float] = []

    def run(side: str, seed: int) -> float:
        elapsed, tokens[side] = sample(side, seed)
        if len(tokens) == len(sides):  # every side sampled with this seed
            first, *rest = tokens.values()
            same.append(min((first == other).all(-1).float().mean().item() for other in rest))
            tokens.clear()
        return elapsed

    seconds = alternate(run, sides, rounds)
    return seconds, sum(same) / len(same)


def bench_setup(description: str, default_out: str):
    """``--rounds`` and ``--out`` parsed, torch on every core, and the tiny profile's model (random weights)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / default_out))
    args = parser.parse_args()

    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    return args, tiny_model().eval()


def timings(seconds: dict[str, list[float]], tokens: int, baseline: str, candidate: str) -> dict:
    """Per side the seconds, their median and tokens/s; the baseline's median over the candidate's."""
    median = {side: statistics.median(s) for side, s in seconds.items()}
    return {"seconds": {side: [round(x, 3) for x in s] for side, s in seconds.items()},
            "median_s": {side: round(m, 3) for side, m in median.items()},
            "tokens_per_s": {side: round(tokens / m, 1) for side, m in median.items()},
            "speedup": round(median[baseline] / median[candidate], 3)}


def write_report(out: str, benchmark: str, command: str, load_before: tuple, scenarios: dict) -> None:
    """The JSON report with the machine (platform, torch, bf16 unit) and its load before and after."""
    import torch

    from forge.hardware import bf16_pays_off, cpu_bf16_unit

    report = {
        "benchmark": benchmark, "command": command, "date": time.strftime("%Y-%m-%d"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                    "bf16_unit": cpu_bf16_unit(), "bf16_pays_off": bf16_pays_off(),
                    "load_avg_before": [round(x, 2) for x in load_before],
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "scenarios": scenarios,
    }
    Path(out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")


def main() -> None:
    args, model = bench_setup(__doc__.splitlines()[0], "bench/results/decode_attention.json")
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from forge.attention import decode_attention
    from forge.hardware import bf16_pays_off

    attention = {"before": sdpa_attention_forward, "after": decode_attention}
    bf16 = bf16_pays_off()
    load_before = os.getloadavg()
    results = {}
    for name, (rows, shortest, longest, new, before, after) in SCENARIOS.items():
        shapes = {"before": (rows, shortest, longest, new, before and bf16),
                  "after": (rows, shortest, longest, new, after and bf16)}

        def run(side: str, seed: int, shapes=shapes) -> float:
            AttentionInterface.register("sdpa", attention[side])
            return sample(model, shapes[side], seed=seed)

        seconds = alternate(run, list(attention), args.rounds)
        results[name] = {
            "rows": rows, "prompt_tokens": [shortest, longest], "new_tokens": new,
            "bf16_autocast": {side: shape[-1] for side, shape in shapes.items()},
            **timings(seconds, rows * new, "before", "after"),
            "step_logits_max_abs_diff": step_difference(model, shapes["after"], decode_attention,
                                                        sdpa_attention_forward),
        }
        median = results[name]["median_s"]
        print(f"{name:8s} before {median['before']:.2f} s  after {median['after']:.2f} s  "
              f"{results[name]['speedup']:.2f}x  logits differ by {results[name]['step_logits_max_abs_diff']:.1e}")
    AttentionInterface.register("sdpa", sdpa_attention_forward)
    write_report(args.out, "sampling before / after Forge's CPU decode attention (forge/attention.py) and GRPO "
                 "sampling under the training autocast (forge/training/grpo.py)",
                 f".venv/bin/python bench/decode_attention.py --rounds {args.rounds}", load_before, results)


if __name__ == "__main__":
    main()
