"""Benchmark: one process with every core against one single-threaded process per core, on the tiny model.

    .venv/bin/python bench/ranks_cpu.py [--steps 8] [--rounds 3]

Why (issue 18): on 2 cores a stage can run as one process with 2 torch threads (the default) or as 2 launched ranks
of one thread each (``runtime.num_processes: 2``, forge/training/launch.py), each on half the batch. This measures
the work alone, without a launch's process start, model loads or gradient all-reduce: a training step (forward,
backward, AdamW, bf16 autocast where ``runtime.bf16: auto`` turns it on) of 16 x 256 tokens, and sampling 48 tokens
for 32 prompts of 100 (a GRPO step's generation), each as one process with every core against N concurrent processes
with one thread and 1/N of the batch, sides alternating. Reported: rows per second each way and their ratio.
Writes bench/results/ranks_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORK = {"train": (16, 256), "sample": (32, 100)}  # (rows, tokens a row) of the whole batch
NEW_TOKENS = 48


def worker(kind: str, rows: int, threads: int, steps: int) -> float:
    """Seconds a step of ``kind`` on ``rows`` rows takes here, after one warm-up step."""
    import torch

    sys.path.insert(0, str(REPO / "bench"))
    from bf16_cpu import tiny_model
    from compile_cpu import train_step

    from forge.hardware import bf16_pays_off

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, bf16 = tiny_model(), bf16_pays_off()
    x = torch.randint(5, 4096, (rows, WORK[kind][1]))
    if kind == "train":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step() -> None:
            train_step(model, opt, x, bf16)
    else:
        model.eval()

        def step() -> None:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=NEW_TOKENS,
                               min_new_tokens=NEW_TOKENS, do_sample=True, pad_token_id=0)

    step()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - started) / steps


def block(kind: str, processes: int, steps: int) -> float:
    """Rows a second of ``processes`` concurrent workers splitting the batch (each its own Python process)."""
    cores = os.cpu_count() or 1
    rows = WORK[kind][0] // processes
    threads = max(1, cores // processes)
    cmd = [sys.executable, __file__, "--worker", kind, str(rows), str(threads), str(steps)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    seconds = [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a worker failed: {cmd}")
    return WORK[kind][0] / max(seconds)  # the batch is done when the slowest part is


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, rows, threads, steps = args.worker
        print(worker(kind, int(rows), int(threads), int(steps)))
        return

    sys.path.insert(0, str(REPO))
    from forge.data.versioning import cpu_kind

    cores = os.cpu_count() or 1
    load_before = os.getloadavg()
    readings: dict[str, dict[str, list[float]]] = {kind: {"one_process": [], "per_core": []} for kind in WORK}
    for _ in range(args.rounds):
        for kind in WORK:
            readings[kind]["one_process"].append(block(kind, 1, args.steps))
            readings[kind]["per_core"].append(block(kind, cores, args.steps))
    report = {
        "benchmark": "ranks_cpu",
        "command": f"python bench/ranks_cpu.py --steps {args.steps} --rounds {args.rounds}",
        "machine": {"cpus": cores, "cpu_kind": cpu_kind(), "load_avg_before": load_before,
                    "load_avg_after": os.getloadavg()},
        "work": {"train": "16 x 256 tokens, forward + backward + AdamW", "sample": f"32 prompts x 100, {NEW_TOKENS} new"},
        "rows_per_s": {kind: {side: [round(v, 2) for v in vals] for side, vals in sides.items()}
                       for kind, sides in readings.items()},
        "per_core_over_one_process": {
            kind: round(statistics.median(s["per_core"]) / statistics.median(s["one_process"]), 2)
            for kind, s in readings.items()},
    }
    out = REPO / "bench" / "results" / "ranks_cpu.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["per_core_over_one_process"]), f"-> {out}")


if __name__ == "__main__":
    main()
