"""Measurement: how reliably does code RL stage 1 raise its pass rate, and at what cost to the held-out drills?

    PYTHONPATH=. .venv/bin/python bench/code_rl_stage1.py --checkout /tmp/mr/main [--seeds 1 2 3]
        [--variants 0.00005:20 0.00005:40]

Stage 1's must-show (issue 13: R_correctness over the last 20% of steps above the first 20%) is read on one run's
training curve, so one recipe run is one draw of it. From the code warm-up checkpoint and the stage-1 filter's kept
problems of a finished ``forge run`` in ``--checkout``, stage 1 is trained as tasks/code.py trains it
(bench/code_rl_stage2.py's ``grpo``: the profile's rewards, weights and settings) once per ``--variants`` entry
(LEARNING_RATE:STEPS[:PROMPTS]) and ``--seeds`` entry. Per run: R_correctness and R_time over the first and last 20% of
steps (the must-show's reading), and the checkpoint sampled on the held-out drills as stage 2's check samples them
(:class:`forge.code.data.PolicyCheck`, one fixed seed): the solved and optimal shares a hotter or longer stage 1 leaves
stage 2 to start from. Writes bench/results/code_rl_stage1.json.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from pathlib import Path

from code_rl_stage2 import (  # run as a script
    bench_setup,
    grpo,
    held_out_check,
    latest,
    machine,
    parse_variant,
    variants_parser,
    write_report,
)

from tasks.code import CURVES

REPO = Path(__file__).resolve().parent.parent
CORRECTNESS = "rewards/r_correctness/mean"


def main() -> None:
    args = variants_parser(__doc__, 1, [1, 2, 3]).parse_args()
    load_before, cfg, stage1, stage2 = bench_setup(args)
    warmup = latest(".forge/models/code-warmup-*/config.json", args.checkout).parent
    kept1 = latest("rl-data/code/rl-stage1/v-*/rows.jsonl", args.checkout)
    check, held_out = held_out_check(cfg, stage2, cfg.seed)

    start = check(warmup)
    runs = []
    work = Path(tempfile.mkdtemp(prefix="code-rl-stage1-"))
    for seed in args.seeds:
        for variant in map(parse_variant, args.variants):
            out = work / f"seed{seed}-{variant.name()}"
            result, seconds = grpo(cfg, stage1, warmup, kept1, variant, seed, out)
            windows = result.window_metrics(CURVES)
            after = check(out)
            runs.append({**variant.fields(), "seed": seed,
                         "train_seconds": round(seconds, 1),
                         "r_correctness_rise": round(windows[f"{CORRECTNESS}_last20"]
                                                     - windows[f"{CORRECTNESS}_first20"], 4),
                         **{k: round(v, 4) for k, v in windows.items()},
                         "solved_after": round(after.solved, 4), "optimal_share_after": round(after.optimal_share, 4)})
            print(json.dumps(runs[-1]), flush=True)
            shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(work)

    summary = []
    for variant in map(parse_variant, args.variants):
        mine = [r for r in runs if all(r[k] == v for k, v in variant.fields().items())]
        rises = [r["r_correctness_rise"] for r in mine]
        summary.append({**variant.fields(), "runs": len(mine),
                        "r_correctness_rise_mean": round(statistics.fmean(rises), 4),
                        "r_correctness_rise_min": round(min(rises), 4),
                        "runs_meeting_must_show": sum(r > 0 for r in rises),
                        "solved_after_mean": round(statistics.fmean(r["solved_after"] for r in mine), 4),
                        "optimal_share_after_mean": round(statistics.fmean(r["optimal_share_after"] for r in mine),
                                                          4)})
    report = {
        "benchmark": "code_rl_stage1",
        "command": f"PYTHONPATH=. python bench/code_rl_stage1.py --profile {args.profile} --checkout {args.checkout} "
                   f"--seeds {' '.join(map(str, args.seeds))} --variants {' '.join(args.variants)}",
        "machine": machine(load_before),
        "recipe": {"warmup_checkpoint": warmup.name, "stage1_kept": str(kept1.relative_to(args.checkout)),
                   "held_out_problems": len(held_out), "check_samples": stage2.check_samples, "check_seed": cfg.seed},
        "warmup_check": {"solved": round(start.solved, 4), "optimal_share": round(start.optimal_share, 4)},
        "summary": summary,
        "runs": runs,
    }
    write_report(args.out, report)


if __name__ == "__main__":
    main()
