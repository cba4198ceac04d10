"""Benchmark: what ``torch.compile`` would buy the tiny profile's training on this CPU, and what it costs first.

    .venv/bin/python bench/compile_cpu.py [--steps 8] [--rounds 4] [--batch 16 --length 256] [--out FILE]

Why (issue 18): the tiny recipe is mostly small training steps (a 4-layer, 256-wide Llama), where elementwise work and
dispatch weigh as much as the matrix products, which is what inductor fuses. Forge trains eagerly; this measures a
training step (forward, backward, AdamW, bf16 autocast where ``runtime.bf16: auto`` turns it on) of the tiny model at
the pre-training shape, eager against ``torch.compile(model)``, sides alternating block by block in one process, and
the compiled model's first step twice: with an empty inductor cache (a fresh clone's first run) and in a second
process that finds the first's cache (a re-run on the same machine). Writes bench/results/compile_cpu.json (--out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def train_step(model, opt, x, bf16: bool) -> None:
    """One optimiser step of the tiny model on token rows ``x`` (labels = inputs), under bf16 autocast when asked."""
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        model(input_ids=x, labels=x).loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def first_step_seconds(batch: int, length: int) -> float:
    """One compiled training step from a new process: compilation plus the step (run by ``--first-step``)."""
    import torch
    from bf16_cpu import tiny_model

    from forge.hardware import bf16_pays_off

    torch.set_num_threads(os.cpu_count())  # runtime.threads' default, 0: every core
    model = torch.compile(tiny_model().train())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(5, 4096, (batch, length))
    started = time.perf_counter()
    train_step(model, opt, x, bf16_pays_off())
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="steps a block")
    parser.add_argument("--rounds", type=int, default=4, help="blocks a side")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "compile_cpu.json")
    parser.add_argument("--first-step", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_step:
        print(json.dumps(first_step_seconds(args.batch, args.length)))
        return

    import torch
    from bf16_cpu import tiny_model

    from forge.data.versioning import cpu_kind
    from forge.hardware import bf16_pays_off

    torch.set_num_threads(os.cpu_count())
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONPATH": str(REPO)}
        cmd = [sys.executable, __file__, "--first-step", "--batch", str(args.batch), "--length", str(args.length)]
        cold, warm = (json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
                      for _ in range(2))
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        bf16 = bf16_pays_off()
        x = torch.randint(5, 4096, (args.batch, args.length))
        sides = {}
        for name in ("eager", "compiled"):
            model = tiny_model().train()
            sides[name] = (torch.compile(model) if name == "compiled" else model,
                           torch.optim.AdamW(model.parameters(), lr=1e-4), [])
        for model, opt, _ in sides.values():
            train_step(model, opt, x, bf16)  # the compiled side compiles here (from the cache the subprocesses filled)
        for _ in range(args.rounds):
            for model, opt, blocks in sides.values():
                started = time.perf_counter()
                for _ in range(args.steps):
                    train_step(model, opt, x, bf16)
                blocks.append(1000 * (time.perf_counter() - started) / args.steps)
    ms = {name: round(statistics.median(blocks), 1) for name, (_, _, blocks) in sides.items()}
    speedup = ms["eager"] / ms["compiled"]
    pretrain_steps = 270  # configs/tiny.yaml base.max_steps
    report = {
        "benchmark": "compile_cpu",
        "command": f"python bench/compile_cpu.py --steps {args.steps} --rounds {args.rounds} --batch {args.batch} "
                   f"--length {args.length}",
        "machine": {"cpus": os.cpu_count(), "cpu_kind": cpu_kind(), "python": platform.python_version(),
                    "torch": torch.__version__, "bf16_autocast": bf16,
                    "load_avg_before": load_before, "load_avg_after": os.getloadavg()},
        "shape": [args.batch, args.length],
        "ms_per_step": ms,
        "ms_per_step_blocks": {name: [round(b, 1) for b in blocks] for name, (_, _, blocks) in sides.items()},
        "speedup": round(speedup, 2),
        "first_compiled_step_s": {"empty_cache": round(cold, 1), "warm_cache": round(warm, 1)},
        "pretraining_270_steps_s": {
            "eager": round(pretrain_steps * ms["eager"] / 1000, 1),
            "compiled_fresh_machine": round(cold + (pretrain_steps - 1) * ms["compiled"] / 1000, 1),
            "compiled_warm_cache": round(warm + (pretrain_steps - 1) * ms["compiled"] / 1000, 1)},
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
