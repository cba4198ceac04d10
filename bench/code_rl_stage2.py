"""Measurement: how reliably does code RL stage 2 raise the optimal share of a finished recipe's stage-1 policy?

    PYTHONPATH=. .venv/bin/python bench/code_rl_stage2.py --checkout /tmp/mr/main [--seeds 0 1 2]
        [--variants 0.00005:20 0.0001:20] [--chain | --with-stage1-problems]

The stage-2 must-show of issue 13 (the share of fully passing answers in the optimal class rises from the stage-1
to the stage-2 checkpoint, the solved share not falling by more than 0.10) read +0.14 on some hosts and within one
standard error of zero on others with the same code and seed. One recipe run gives one draw; this gives several.
From the stage-1 checkpoint and the stage-2 filter's kept problems of a finished ``forge run`` in ``--checkout`` (its
``.forge/models`` and ``rl-data``), stage 2 is trained by :func:`forge.training.grpo.train_grpo` as tasks/code.py
trains it (the profile's rewards, weights and settings) once per ``--variants`` entry (LEARNING_RATE:STEPS[:...],
below) and ``--seeds`` entry; with ``--with-stage1-problems`` on the stage-1 filter's kept problems too. With
``--chain`` each seed first re-runs stage 1 from the recipe's code warm-up on its kept problems and stage 2's
on-policy filter from that (the starting point a recipe on another host, whose arithmetic differs, reaches
differently). The stage-1 and each stage-2 checkpoint are sampled on the held-out drills
(:class:`forge.code.data.PolicyCheck`, the profile's samples per problem, one fixed seed). Per run: the optimal-share
rise, the solved-share and optimal-answers changes with their standard errors, the mean R_correctness / R_time over
the first and last 20% of steps, seconds. Writes bench/results/code_rl_stage2.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from transformers import AutoTokenizer

from forge.code.data import PolicyCheck, compare_checks, filter_rl, judged_answers
from forge.code.rewards import CodeRewards
from forge.config import load_profile
from forge.data.jsonl import write_jsonl
from forge.data.versioning import cpu_kind
from forge.generation import local_backend
from forge.hardware import cpu_fields
from forge.training.grpo import train_grpo
from tasks.code import CURVES, grpo_prompts, rl_problems, stage_config

REPO = Path(__file__).resolve().parent.parent


def latest(pattern: str, checkout: Path) -> Path:
    """The newest path in ``checkout`` matching ``pattern`` (a finished run's stage-1 checkpoint, its kept rows)."""
    found = sorted(checkout.glob(pattern), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(f"nothing matches {checkout / pattern}: run `forge run` in that checkout first")
    return found[-1]


def machine(load_before: tuple[float, float, float]) -> dict:
    """The host a report was measured on: cores, Python, the CPU's model name and kind (its generation and bf16 unit:
    forge.data.versioning.cpu_kind), the load average before the run."""
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "cpu": cpu_fields().get("model name", platform.processor()), "cpu_kind": cpu_kind(),
            "load_before": load_before}


def held_out_check(cfg, stage2, seed: int):
    """A function sampling a checkpoint on stage 2's held-out drills as the recipe's check does (the profile's samples
    per problem, temperature and length; one fixed ``seed``), with the held-out problems it samples."""
    held_out = rl_problems(stage2, "eval")

    def check(model_dir: Path):
        with local_backend(cfg.generation, str(model_dir)) as backend:
            return PolicyCheck.of(judged_answers(backend, held_out, stage2.check_samples,
                                                 cfg.generation.temperature, stage2.max_new_tokens, seed))

    return check, held_out


def write_report(out: Path, report: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


class Variant(NamedTuple):
    """One stage run's settings: learning rate, steps, and (None: the profile's) max prompts, KL weight, R_time's
    weight and advantage scaling (TRL's ``scale_rewards``)."""

    lr: float
    steps: int
    prompts: int | None = None
    beta: float | None = None
    time_weight: float | None = None
    scale: str | None = None

    def fields(self) -> dict:
        return {"learning_rate": self.lr, "steps": self.steps, "max_prompts": self.prompts, "beta": self.beta,
                "time_weight": self.time_weight, "scale_rewards": self.scale}

    def name(self) -> str:
        return (f"lr{self.lr:g}-steps{self.steps}-prompts{self.prompts}-beta{self.beta}-time{self.time_weight}"
                f"-scale{self.scale}")


def parse_variant(variant: str) -> Variant:
    """``LEARNING_RATE:STEPS[:PROMPTS[:BETA[:TIME_WEIGHT[:SCALE]]]]`` (an empty field: the profile's), e.g.
    ``0.0001:20::0.04``, ``0.0001:20:::0.5`` or ``0.0001:20::::none``."""
    lr, steps, *rest = variant.split(":")
    prompts, beta, time_weight, scale = (rest + ["", "", "", ""])[:4]
    return Variant(float(lr), int(steps), int(prompts) if prompts else None, float(beta) if beta else None,
                   float(time_weight) if time_weight else None, scale or None)


def grpo(cfg, stage, policy: Path, kept_file: Path, variant: Variant, seed: int, out: Path):
    """One code RL stage as tasks/code.py::code_grpo_task trains it, with ``variant``'s learning rate, steps, most
    informative kept problems, KL weight, R_time weight and advantage scaling (where it names them; else the
    profile's): (result, seconds)."""
    named = {"max_prompts": variant.prompts, "beta": variant.beta, "scale_rewards": variant.scale}
    update = {"learning_rate": variant.lr, "max_steps": variant.steps}
    update |= {k: v for k, v in named.items() if v is not None}
    settings = stage.settings.model_copy(update=update)
    prompts = grpo_prompts(kept_file, settings, AutoTokenizer.from_pretrained(policy))
    time_weight = stage.time_weight if variant.time_weight is None else variant.time_weight
    rewards = CodeRewards({p.id: p for p in rl_problems(stage)}, stage.format_weight, time_weight)
    started = time.monotonic()
    result = train_grpo(cfg.runtime, out, policy_dir=policy, prompts=prompts, reward_funcs=rewards.funcs(),
                        settings=settings, seed=seed, stage=f"code-rl-stage{stage.stage}",
                        generation=cfg.generation, reward_weights=CodeRewards.weights(stage.stage))
    return result, time.monotonic() - started


def variants_parser(doc: str, stage: int, seeds: list[int]) -> argparse.ArgumentParser:
    """The arguments both code RL benches take: profile, finished checkout, seeds, variants, report path."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--checkout", type=Path, required=True, help="a checkout whose `forge run` has finished")
    parser.add_argument("--seeds", nargs="+", type=int, default=seeds)
    parser.add_argument("--variants", nargs="+", default=["0.00005:20"],
                        help=f"stage-{stage} runs, each LEARNING_RATE:STEPS[:PROMPTS[:BETA[:TIME_WEIGHT[:SCALE]]]] "
                             "(PROMPTS: the most informative kept problems trained on, BETA: the KL weight, TIME_WEIGHT: "
                             "R_time's, SCALE: group, batch or none; an empty field: the profile's)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / f"code_rl_stage{stage}.json")
    return parser


def bench_setup(args):
    """Logging on; the load average before the runs, the profile and its two code RL stages."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    load_before = os.getloadavg()
    cfg = load_profile(args.profile)
    return load_before, cfg, stage_config(cfg.code_rl, 1), stage_config(cfg.code_rl, 2)


def main() -> None:
    parser = variants_parser(__doc__, 2, [0, 1, 2])
    parser.add_argument("--chain", action="store_true",
                        help="per seed, also re-run stage 1 (from the warm-up) and stage 2's filter with that seed")
    parser.add_argument("--with-stage1-problems", action="store_true",
                        help="train stage 2 on the stage-2 filter's kept problems and the stage-1 filter's others")
    parser.add_argument("--check-seed", type=int, default=None,
                        help="the check's sampling seed (default: the profile's)")
    args = parser.parse_args()
    if args.chain and args.with_stage1_problems:
        parser.error("--with-stage1-problems trains from the recipe's stage-1 checkpoint; --chain re-runs it")
    load_before, cfg, stage1, stage2 = bench_setup(args)
    check_seed = cfg.seed if args.check_seed is None else args.check_seed
    recipe_policy = latest(".forge/models/code-rl-stage1-*/config.json", args.checkout).parent
    recipe_kept = latest("rl-data/code/rl-stage2/v-*/rows.jsonl", args.checkout)
    kept1 = latest("rl-data/code/rl-stage1/v-*/rows.jsonl", args.checkout)
    work = Path(tempfile.mkdtemp(prefix="code-rl-stage2-"))
    stage2_kept = recipe_kept
    if args.with_stage1_problems:  # not the paper's stage 2 (§2.3.2 keeps only its own filter's): a measurement
        rows = [json.loads(line) for line in recipe_kept.read_text().splitlines()]
        ids = {r["problem_id"] for r in rows}
        rows += [r for r in map(json.loads, kept1.read_text().splitlines()) if r["problem_id"] not in ids]
        stage2_kept = work / "kept-stage1-and-2.jsonl"
        write_jsonl(stage2_kept, rows)
    check, held_out = held_out_check(cfg, stage2, check_seed)
    if args.chain:  # where every seed's stage 1 starts: the recipe's warm-up, on its stage-1 filter's problems
        warmup = latest(".forge/models/code-warmup-*/config.json", args.checkout).parent

    runs, starts = [], []
    for seed in args.seeds:
        policy, kept_file, start = recipe_policy, stage2_kept, {"seed": seed, "stage1": "the recipe's"}
        if args.chain:  # a stage-1 checkpoint and stage-2 problems of this seed's own
            policy = work / f"stage1-seed{seed}"
            result, seconds = grpo(cfg, stage1, warmup, kept1,
                                   Variant(stage1.settings.learning_rate, stage1.settings.max_steps), seed, policy)
            with local_backend(cfg.generation, str(policy)) as backend:
                rows = filter_rl(backend, rl_problems(stage2), 2, stage2.num_rollouts,
                                 (stage2.keep_k_min, stage2.keep_k_max), temperature=stage2.filter_temperature,
                                 max_new_tokens=stage2.max_new_tokens, seed=seed)
            kept_file = work / f"kept2-seed{seed}.jsonl"
            write_jsonl(kept_file, [r.as_dict() for r in rows if r.kept])
            start |= {"stage1": "re-run", "stage1_seconds": round(seconds, 1),
                      **{f"stage1_{k}": round(v, 4) for k, v in result.window_metrics(CURVES).items()},
                      "stage2_kept": sum(r.kept for r in rows)}
        before = check(policy) if args.chain or not starts else starts[0]["check"]
        start |= {"check": before, "optimal_share_before": round(before.optimal_share, 4),
                  "solved_before": round(before.solved, 4)}
        starts.append(start)
        for variant in map(parse_variant, args.variants):
            out = work / f"seed{seed}-{variant.name()}"
            result, seconds = grpo(cfg, stage2, policy, kept_file, variant, seed, out)
            after = check(out)
            runs.append({**variant.fields(), "seed": seed,
                         "train_seconds": round(seconds, 1),
                         **{k: round(v, 4) for k, v in compare_checks(before, after).items()},
                         "optimal_share_before": round(before.optimal_share, 4),
                         "optimal_share_after": round(after.optimal_share, 4),
                         "solved_before": round(before.solved, 4), "solved_after": round(after.solved, 4),
                         **{k: round(v, 4) for k, v in result.window_metrics(CURVES).items()}})
            print(json.dumps(runs[-1]), flush=True)

    shutil.rmtree(work)  # the checkpoints: only the readings are kept
    summary = []
    for variant in map(parse_variant, args.variants):
        mine = [r for r in runs if all(r[k] == v for k, v in variant.fields().items())]
        rises = [r["check_optimal_rise"] for r in mine]
        solved = [r["check_solved_change"] for r in mine]
        summary.append({**variant.fields(), "runs": len(mine),
                        "optimal_rise_mean": round(statistics.fmean(rises), 4),
                        "optimal_rise_min": round(min(rises), 4),
                        "solved_change_mean": round(statistics.fmean(solved), 4),
                        "solved_change_min": round(min(solved), 4),
                        "runs_meeting_must_show": sum(r > 0 and s >= -0.10 for r, s in zip(rises, solved))})
    report = {
        "benchmark": "code_rl_stage2",
        "command": f"PYTHONPATH=. python bench/code_rl_stage2.py --profile {args.profile} --checkout {args.checkout} "
                   f"--seeds {' '.join(map(str, args.seeds))} --variants {' '.join(args.variants)}"
                   + (" --chain" if args.chain else "")
                   + (" --with-stage1-problems" if args.with_stage1_problems else ""),
        "machine": machine(load_before),
        "recipe": {"stage1_checkpoint": recipe_policy.name, "stage2_kept": str(recipe_kept.relative_to(args.checkout)),
                   "held_out_problems": len(held_out), "check_samples": stage2.check_samples,
                   "check_seed": check_seed},
        "starts": [{k: v for k, v in s.items() if k != "check"} for s in starts],
        "summary": summary,
        "runs": runs,
    }
    write_report(args.out, report)


if __name__ == "__main__":
    main()
