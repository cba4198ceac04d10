"""Measurement: what the KL coefficient buys in point-wise GRPO, side by side on one SFT checkpoint and one RM.

    .venv/bin/python bench/grpo_pointwise_kl.py [--home .forge] [--betas 0 0.04 0.2] [--profile tiny]

Runs the tiny profile's point-wise GRPO stage (same prompts, seed, steps, overlong penalty) once per KL
coefficient, starting each time from the recipe's last SFT checkpoint and scoring with its point-wise RM (both
found under ``--home`` after a ``forge run``; or pass ``--sft``/``--rm``/``--mix``). For each run it reports the
mean reward and the raw RM score over the first and last 20% of steps, the overlong-truncation rate, the mean
completion length, and the SFT held-out loss before and after: how far the policy drifted from the SFT data to
earn its reward. Writes bench/results/grpo_pointwise_kl.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from transformers import AutoTokenizer

from forge.config import load_profile
from forge.data.mix import read_mix
from forge.training.grpo import PointwiseRMReward, run_grpo
from forge.training.pairs import build_rl_prompts
from forge.training.reward_model import RewardScorer
from forge.training.sft import heldout_chat_loss

REPO = Path(__file__).resolve().parent.parent
KEYS = ("reward", "rm_score", "overlong_rate", "completions/mean_length", "kl")


def _newest(pattern: str, home: Path) -> Path:
    found = sorted(home.glob(pattern), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(f"no {pattern} under {home}: run `forge run --profile tiny` first or pass the path")
    return found[-1]


def _heldout_loss(model_dir: Path, heldout, cfg) -> float:
    """The SFT held-out chat loss, measured as the recipe's GRPO stages measure it (tasks/rl.py)."""
    return heldout_chat_loss(model_dir, heldout, cfg.sft, cfg.runtime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=REPO / ".forge")
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--betas", type=float, nargs="+", default=[0.0, 0.04, 0.2])
    parser.add_argument("--sft", type=Path, help="policy to start from (default: the newest last-stage SFT model)")
    parser.add_argument("--rm", type=Path, help="point-wise RM (default: the newest rm-pointwise model)")
    parser.add_argument("--mix", type=Path, help="SFT mix folder (default: data/mixes/<profile's mix>)")
    args = parser.parse_args()
    cfg = load_profile(args.profile)
    last = len(cfg.sft.curriculum) - 1
    sft_dir = args.sft or _newest(f"models/sft-{last}-*", args.home)
    rm_dir = args.rm or _newest("models/rm-pointwise-*", args.home)
    mix_dir = args.mix or REPO / "data" / "mixes" / cfg.mix.name
    train_rows, heldout = read_mix(mix_dir)
    tokenizer = AutoTokenizer.from_pretrained(sft_dir)
    pw = cfg.pointwise_rl
    prompts = build_rl_prompts(train_rows, tokenizer, max_prompts=pw.grpo.max_prompts,
                               max_prompt_tokens=pw.grpo.max_prompt_length, seed=cfg.seed)
    loss_before = _heldout_loss(sft_dir, heldout, cfg)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for beta in args.betas:
            grpo = pw.grpo.model_copy(update={"beta": beta})
            reward = PointwiseRMReward(RewardScorer(rm_dir, max_length=pw.rm.max_length), grpo.max_completion_length,
                                       [tokenizer.eos_token_id], pw.overlong_penalty)
            out = Path(tmp) / f"beta-{beta}"
            start = time.monotonic()
            res = run_grpo(sft_dir, prompts, [reward], grpo, cfg.runtime, out, seed=cfg.seed,
                           generation=cfg.generation)
            seconds = time.monotonic() - start
            row = {"beta": beta, "seconds": round(seconds, 1),
                   "sft_heldout_loss_after": round(_heldout_loss(out, heldout, cfg), 4)}
            for key in KEYS:
                if res.series(key)[1]:
                    row[key] = {"first20": round(res.window_mean(key, 0.0, 0.2), 4),
                                "last20": round(res.window_mean(key, 0.8, 1.0), 4)}
            row["reward_curve"] = [round(v, 4) for v in res.series("reward")[1]]
            print(json.dumps({k: v for k, v in row.items() if k != "reward_curve"}), flush=True)
            runs.append(row)
    result = {
        "benchmark": "grpo_pointwise_kl",
        "command": f"python bench/grpo_pointwise_kl.py --betas {' '.join(map(str, args.betas))}",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "sft_checkpoint": sft_dir.name, "reward_model": rm_dir.name,
        "settings": {**pw.grpo.model_dump(include={"learning_rate", "max_steps", "per_device_batch_size",
                                                   "num_generations", "max_completion_length", "temperature"}),
                     "overlong_penalty": pw.overlong_penalty},
        "sft_heldout_loss_before": round(loss_before, 4),
        "runs": runs,
    }
    out = REPO / "bench" / "results" / "grpo_pointwise_kl.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
