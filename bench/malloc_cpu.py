"""Benchmark: training steps and sampling of the tiny model with glibc's default malloc against Forge's setting.

    .venv/bin/python bench/malloc_cpu.py [--steps 12] [--rounds 4]

Every training stage calls ``apply_runtime`` (forge/training/checkpoints.py), which calls
``forge.hardware.keep_freed_memory``: glibc then keeps freed blocks under 1 GiB for the next allocation instead of
unmapping them and faulting fresh, zeroed pages in on the next step. This measures what that buys: each block is a
fresh process (the setting cannot be undone in a process), one with the setting and one without, alternating, that
trains the tiny profile's model (random weights and tokens) through a ``Trainer`` built from Forge's
``common_trainer_args`` at the pre-training shape (16 x 256) and the last SFT stage's (4 x 1,024), then samples 48
tokens for 32 prompts of 100 (a GRPO step's generation). Per block: wall ms a step, user and system CPU ms a step,
minor page faults a step, and the process's peak RSS. Reported: the medians per side and default / kept ratios.
Writes bench/results/malloc_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bf16_cpu import REPO, SHAPES, VOCAB, run_trainer, tiny_model

SIDES = ("default", "kept")


def usage() -> tuple[float, float, float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime, r.ru_stime, r.ru_minflt


def per_step(start: tuple, end: tuple, steps: int) -> dict[str, float]:
    wall, user, system, faults = (b - a for a, b in zip(start, end, strict=True))
    return {"wall_ms": round(wall / steps * 1000, 1), "user_ms": round(user / steps * 1000, 1),
            "sys_ms": round(system / steps * 1000, 1), "minflt": round(faults / steps)}


def train(shape: tuple[int, int], steps: int, work: Path) -> dict[str, float]:
    """Per-step figures over ``steps`` optimiser steps of a fresh Trainer, after one warm-up step."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.marks: list[tuple] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.marks.append(usage())

    clock = Clock()
    run_trainer(shape, steps, work, clock)
    return per_step(clock.marks[0], clock.marks[-1], steps)


def sample(rounds: int) -> dict[str, float]:
    """Per-call figures of sampling 48 new tokens for 32 prompts of 100, after one warm-up call."""
    import torch

    model = tiny_model().eval()
    prompts = torch.randint(2, VOCAB, (32, 100), generator=torch.Generator().manual_seed(1))

    def once() -> None:
        with torch.no_grad():
            model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                           max_new_tokens=48, min_new_tokens=48)

    once()
    start = usage()
    for _ in range(rounds):
        once()
    return per_step(start, usage(), rounds)


def worker(side: str, steps: int) -> None:
    import transformers

    from forge.hardware import keep_freed_memory

    transformers.logging.set_verbosity_error()
    applied = keep_freed_memory() if side == "kept" else False
    work = Path(tempfile.mkdtemp(prefix="forge-malloc-"))
    out = {"applied": applied, "train": {name: train(shape, steps, work / name) for name, shape in SHAPES.items()},
           "sample": sample(3), "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="timed optimiser steps per shape and block")
    parser.add_argument("--rounds", type=int, default=4, help="blocks per side, alternating")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "malloc_cpu.json")
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.steps)

    from forge.data.versioning import cpu_kind

    load = os.getloadavg()
    blocks: dict[str, list[dict]] = {side: [] for side in SIDES}
    for r in range(args.rounds):
        for side in SIDES if r % 2 == 0 else tuple(reversed(SIDES)):
            done = subprocess.run([sys.executable, __file__, "--worker", side, "--steps", str(args.steps)],
                                  check=True, capture_output=True, text=True)
            block = json.loads(done.stdout.strip().splitlines()[-1])
            blocks[side].append(block)
            print(f"round {r} {side}: " + ", ".join(f"{name} {v['wall_ms']:.0f} ms (sys {v['sys_ms']:.0f}, "
                                                      f"{v['minflt']} faults)" for name, v in block["train"].items())
                  + f"; sampling {block['sample']['wall_ms']:.0f} ms; peak {block['peak_rss_mb']} MB", flush=True)

    def median(side: str, part: str, name: str | None, key: str) -> float:
        return statistics.median((b[part][name] if name else b[part])[key] for b in blocks[side])

    parts = [("train", name) for name in SHAPES] + [("sample", None)]
    summary = {f"{part} {name}" if name else part: {
        side: {key: median(side, part, name, key) for key in ("wall_ms", "user_ms", "sys_ms", "minflt")}
        for side in SIDES} for part, name in parts}
    result = {
        "benchmark": "the tiny model's Trainer steps and sampling, glibc's default malloc vs keep_freed_memory",
        "command": "python bench/malloc_cpu.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "cpu_kind": cpu_kind(),
                    "glibc": platform.libc_ver()[1], "load_avg_before": [round(x, 2) for x in load],
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "steps_per_block": args.steps,
        "blocks": blocks,
        "median_per_step": summary,
        "wall_ratio_default_over_kept": {k: round(v["default"]["wall_ms"] / v["kept"]["wall_ms"], 3)
                                         for k, v in summary.items()},
        "peak_rss_mb": {side: max(b["peak_rss_mb"] for b in blocks[side]) for side in SIDES},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("wall_ratio_default_over_kept", "peak_rss_mb")}, indent=2))


if __name__ == "__main__":
    main()
