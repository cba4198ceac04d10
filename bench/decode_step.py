"""Where a sampled token's time goes: the tiny model's decode step at a sampling stage's batch, in fp32 (how the
generation backend samples: the reward models' pairs, refinement, code RL's filters and check) and under bf16
autocast (how GRPO and agentic RL sample where ``runtime.bf16`` resolves true).

    .venv/bin/python bench/decode_step.py [--batch 48] [--prompt 96] [--new 96] [--rounds 3]

Per precision, alternating in one process, ms a token (wall and CPU, the prefill included):
``generate`` with ``top_p`` 0.95 (the profile's ``generation.top_p``, which the reward models' pairs take), with
``top_p`` 1.0 (every other sampling stage), and a bare loop of the model's forward with the same cache and draw and
nothing of ``generate`` around it; then a torch profile of the bare loop's decode steps, the operators' shares. Fresh
weights at the tiny profile's shape (the time does not depend on what was learned), the fast decoding paths on
(forge/attention.py). Writes bench/results/decode_step.json.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from bf16_cpu import REPO, tiny_model  # bench/ is on sys.path when a bench script runs
from code_rl_stage2 import machine
from torch.profiler import ProfilerActivity, profile

from forge.attention import GrowingCache, use_fast_decoding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=48)
    parser.add_argument("--prompt", type=int, default=96)
    parser.add_argument("--new", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    use_fast_decoding()
    model = tiny_model().eval()
    vocab = model.config.vocab_size
    ids = torch.randint(5, vocab, (args.batch, args.prompt), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)

    def generate(top_p: float):
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new, min_new_tokens=args.new,
                       do_sample=True, temperature=0.6, top_p=top_p, top_k=0, eos_token_id=[1], pad_token_id=0)

    def bare():
        cache = GrowingCache()
        out = model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        seen, position = mask, torch.full((args.batch, 1), args.prompt)
        for step in range(args.new - 1):
            token = torch.multinomial(torch.softmax(out.logits[:, -1].float() / 0.6, -1), 1)
            seen = torch.cat([seen, torch.ones((args.batch, 1), dtype=seen.dtype)], 1)
            out = model(input_ids=token, attention_mask=seen, position_ids=position + step, past_key_values=cache,
                        use_cache=True)

    sides = {"generate_top_p_0.95": lambda: generate(0.95), "generate_top_p_1.0": lambda: generate(1.0),
             "bare_forward_loop": bare}
    report = {"benchmark": "decode_step", "command": f"python bench/decode_step.py --batch {args.batch} --prompt "
              f"{args.prompt} --new {args.new} --rounds {args.rounds}",
              "machine": {**machine(os.getloadavg()), "torch_threads": torch.get_num_threads()},
              "precisions": {}}
    for precision in ("fp32", "bf16"):
        mixed = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
        timings: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        with torch.inference_mode(), mixed:
            for run in sides.values():
                run()  # warm
            for _ in range(args.rounds):
                for name, run in sides.items():
                    wall, cpu = time.perf_counter(), time.process_time()
                    run()
                    timings[name].append({"wall_ms_per_token": round((time.perf_counter() - wall) / args.new * 1e3, 2),
                                          "cpu_ms_per_token": round((time.process_time() - cpu) / args.new * 1e3, 2)})
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                bare()
        ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        total = sum(e.self_cpu_time_total for e in ops)
        median = {name: sorted(r["wall_ms_per_token"] for r in runs)[len(runs) // 2] for name, runs in timings.items()}
        report["precisions"][precision] = {
            "rounds": timings, "median_wall_ms_per_token": median,
            "bare_loop_operators_share": {e.key: round(e.self_cpu_time_total / total, 3) for e in ops[:8]}}
        print(precision, json.dumps(median), flush=True)
        print("  bare loop, operators' share of CPU:", json.dumps(report["precisions"][precision]
                                                                   ["bare_loop_operators_share"]), flush=True)
    out = REPO / "bench" / "results" / "decode_step.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
