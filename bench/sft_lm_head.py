"""Benchmark: SFT and GRPO steps with TRL's fused LM head against the same values taken from the logits, side by side.

    .venv/bin/python bench/sft_lm_head.py [--steps 30] [--grpo-steps 8] [--rounds 2]

TRL 1.16's ``SFTTrainer`` scores tokens through a fused LM head (``trl/kernels/chunked_logprob.py``: the hidden
states are projected and scored in tiles, so the full logits never exist). ``runtime.fused_lm_head: false`` makes
Forge's trainer (forge/training/sft.py, ``LogitsLossSFTTrainer``) take the same loss from the model's logits instead.
Both run the tiny profile's code warm-up stage (the drills' SFT rows, packed rows of 256 tokens, batch 16, a freshly
built tiny-profile Llama with the profile's tokenizer) for the same steps, alternating which goes first each round.
The held-out losses before and after must agree (same objective, same updates); the ratio of seconds is the
speed-up. GRPO (``LogitsGRPOTrainer`` in forge/training/grpo.py against TRL's) then runs the tiny code-RL stage 1's
settings on the drills' RL prompts from the same fresh model, same seed, rewarded by the completion's length (a fresh
model's programs all fail the judge, and a reward that is 0 everywhere trains nothing): the per-step rewards must
agree. Writes bench/results/sft_lm_head.json with the load average around the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from forge.code.problems.drills import drill_problems, drill_sft_rows
from forge.config import BaseModelConfig, load_profile
from forge.data.pools import iter_pretraining_texts
from forge.training.base_model import build_model
from forge.training.checkpoints import save_atomically
from forge.training.grpo import run_grpo
from forge.training.sft import run_sft_stage
from forge.training.tokenizer import train_tokenizer

REPO = Path(__file__).resolve().parent.parent
MODES = {"fused": True, "logits": False}


def side_by_side(rounds: int, run) -> dict[str, list[dict]]:
    """``run(name, runtime_update, k)`` for both modes, ``rounds`` times, alternating which goes first."""
    results: dict[str, list[dict]] = {name: [] for name in MODES}
    for k in range(rounds):
        for name in (list(MODES) if k % 2 == 0 else list(MODES)[::-1]):
            results[name].append(run(name, {"fused_lm_head": MODES[name]}, k))
            print(name, results[name][-1], flush=True)
    return results


def median_speedup(results: dict[str, list[dict]]) -> float:
    return round(statistics.median(f["seconds"] / p["seconds"] for f, p in zip(results["fused"], results["logits"])), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--grpo-steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    tiny = load_profile("tiny")
    drills = tiny.code_rl.drills
    rows, _ = drill_sft_rows(drills.sft_per_op, (drills.teacher_fast, drills.teacher_slow, drills.teacher_broken), 0)
    train, held_out = rows[1:], rows[::20]
    # The tiny profile's own tokenizer (4k tokens, trained on the pre-training text): the head's cost grows with it.
    tokenizer = train_tokenizer(iter_pretraining_texts(REPO / "corpora", tiny.base.tokenizer.max_training_chars,
                                                       tiny.seed), tiny.base.tokenizer)
    work = Path(tempfile.mkdtemp(prefix="forge-bench-lm-head-"))
    base = save_atomically(build_model(BaseModelConfig(**tiny.base.model_dump()), tokenizer), tokenizer,
                           work / "base")
    stage = tiny.code_rl.warmup.model_copy(update={"max_steps": args.steps})
    sft = tiny.sft.model_copy(update={"save_steps": 10_000})
    load_before = os.getloadavg()

    def sft_run(name: str, update: dict, k: int) -> dict:
        started = time.perf_counter()
        res = run_sft_stage(base, train, held_out, stage, sft, tiny.runtime.model_copy(update=update),
                            work / f"{name}-{k}")
        seconds = time.perf_counter() - started
        return {"seconds": round(seconds, 2), "tokens_per_s": round(res.tokens / seconds, 1),
                "eval_loss_before": round(res.eval_loss_before, 5), "eval_loss_after": round(res.eval_loss_after, 5)}

    runs = side_by_side(args.rounds, sft_run)
    problems = drill_problems("rl", 2)
    prompts = [{"prompt": [{"role": "user", "content": p.prompt()}]} for p in problems]
    settings = tiny.code_rl.stage1.model_copy(update={"max_steps": args.grpo_steps})

    def length(completions, completion_ids, **_) -> list[float]:
        return [len(ids) / settings.max_completion_length for ids in completion_ids]

    def grpo_run(name: str, update: dict, k: int) -> dict:
        started = time.perf_counter()
        res = run_grpo(base, prompts, [length], settings, tiny.runtime.model_copy(update=update),
                       work / f"grpo-{name}-{k}", generation=tiny.generation)
        return {"seconds": round(time.perf_counter() - started, 2),
                "reward": [round(v, 4) for v in res.series("reward")[1]]}

    grpo = side_by_side(args.rounds, grpo_run)
    same = all(abs(f["eval_loss_after"] - p["eval_loss_after"]) < 1e-3 for f, p in zip(runs["fused"], runs["logits"]))
    same_rewards = all(f["reward"] == p["reward"] for f, p in zip(grpo["fused"], grpo["logits"]))
    result = {
        "benchmark": "sft_lm_head",
        "command": f"python bench/sft_lm_head.py --steps {args.steps} --grpo-steps {args.grpo_steps} "
                   f"--rounds {args.rounds}",
        "stage": stage.model_dump(), "train_rows": len(train), "vocab": len(tokenizer),
        "runs": runs,
        "median_speedup_logits_over_fused": median_speedup(runs),
        "same_losses": same,
        "grpo": {"settings": settings.model_dump(), "problems": len(problems), "runs": grpo,
                 "median_speedup_logits_over_fused": median_speedup(grpo),
                 "same_rewards": same_rewards},
        "note": "seconds are the whole stage: model load, held-out loss before and after (SFT), the steps, the save",
        "machine": {"torch_threads": torch.get_num_threads(), "platform": platform.platform(),
                    "load_avg_before": [round(x, 2) for x in load_before],
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
    }
    out = REPO / "bench" / "results" / "sft_lm_head.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({**{k: result[k] for k in ("median_speedup_logits_over_fused", "same_losses")},
                      "grpo_speedup": result["grpo"]["median_speedup_logits_over_fused"],
                      "same_rewards": same_rewards}))
    if not (same and same_rewards):
        raise SystemExit("the two ways of computing the loss trained differently (held-out losses or rewards)")


if __name__ == "__main__":
    main()
