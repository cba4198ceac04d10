"""Benchmark: one SFT stage in the task's process against the same stage launched as 2 ranks (forge/training/launch.py).

    .venv/bin/python bench/launch.py [--steps 40] [--rounds 2]

Both train a freshly built tiny-profile Llama (the profile's tokenizer, trained here on corpora/) on the tiny mix's
kind of rows (real Wikipedia Q/A from corpora/) at the tiny profile's first curriculum stage (256 tokens), with the
same global batch: 1 process × 16 rows against 2 ranks × 8 rows over gloo, alternating which goes first each round.
Reports seconds per run, the ratio, the launched run's start-up (seconds before its first step: accelerate, two
interpreters importing torch and transformers) and the largest relative gap between the two loss curves. On a
machine with as many cores as ranks the ranks only split the cores one process would use, so the ratio measures
what launching costs, not what it gains (that needs several GPUs). Writes bench/results/launch.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from forge.config import SFTConfig, TrainingRuntimeConfig, load_profile
from forge.data.pools import iter_pretraining_texts
from forge.data.schemas import ChatSample, Message
from forge.training.base_model import build_model
from forge.training.checkpoints import save_atomically
from forge.training.launch import run_training
from forge.training.sft import run_sft_stage
from forge.training.tokenizer import train_tokenizer

REPO = Path(__file__).resolve().parent.parent


def rows() -> tuple[list[ChatSample], list[ChatSample]]:
    with gzip.open(REPO / "corpora" / "wiki2_corpus" / "2wikimultihopqa_corpus.json.gz", "rt") as f:
        docs = json.load(f)[:1200]
    out = [ChatSample.build(domain="general", source="wiki2", messages=[
        Message(role="user", content=f"Tell me about {d['title']}."),
        Message(role="assistant", content=d["text"][:600])]) for d in docs]
    return out[:-32], out[-32:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    cfg = load_profile("tiny")
    tok = train_tokenizer(iter_pretraining_texts(REPO / "corpora", 1_000_000, 0), cfg.base.tokenizer)
    scratch = Path(tempfile.mkdtemp(prefix="bench-launch-"))
    base = save_atomically(build_model(cfg.base, tok), tok, scratch / "base")
    train, heldout = rows()
    first = cfg.sft.curriculum[0]
    runs: list[dict] = []
    for r in range(args.rounds):
        order = [1, 2] if r % 2 == 0 else [2, 1]
        for n in order:
            stage = first.model_copy(update={"max_steps": args.steps, "per_device_batch_size": 16 // n,
                                             "gradient_accumulation_steps": 1})
            sft = SFTConfig(curriculum=[stage], save_steps=args.steps, packing=False)
            runtime = TrainingRuntimeConfig(fused_lm_head=False, num_processes=n)
            steps_at: list[float] = []
            t = time.monotonic()
            result = run_training(run_sft_stage, runtime, scratch / f"out-{r}-{n}",
                                  log_metrics=lambda m, s, at=steps_at: at.append(time.monotonic()),
                                  model_dir=base, train_rows=train, eval_rows=heldout, stage=stage, sft=sft)
            runs.append({"round": r, "processes": n, "seconds": time.monotonic() - t,
                         "first_log_s": (steps_at[0] - t) if steps_at else None, "curve": result.train_curve,
                         "eval_loss_after": result.eval_loss_after, "tokens": result.tokens})
            print(f"round {r} · {n} process(es): {runs[-1]['seconds']:.1f} s, held-out {result.eval_loss_after:.4f}",
                  flush=True)
    one = [x for x in runs if x["processes"] == 1]
    two = [x for x in runs if x["processes"] == 2]
    gap = max(abs(b[1] - a[1]) / a[1] for x, y in zip(one, two) for a, b in zip(x["curve"], y["curve"]))
    summary = {
        "date": time.strftime("%Y-%m-%d"), "host": platform.node(), "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(), "steps": args.steps, "global_batch": 16, "max_length": first.max_length,
        "one_process_s": [round(x["seconds"], 1) for x in one], "two_ranks_s": [round(x["seconds"], 1) for x in two],
        "ratio_two_over_one": round(sum(x["seconds"] for x in two) / sum(x["seconds"] for x in one), 3),
        "largest_curve_gap_rel": round(gap, 5),
        "runs": runs,
    }
    out = REPO / "bench" / "results" / "launch.json"
    out.write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
