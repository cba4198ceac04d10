"""Measurement: does the tiny profile's agentic RL (the link task) learn, beyond what the order of its questions does?

    PYTHONPATH=. .venv/bin/python bench/agentic_links.py --checkout /tmp/mr/main [--seeds 0 1 2]
        [--warmup-steps 100 [--warmup-mix balanced] [--link-relations 6]] [--max-hops 1] [--learning-rate 2e-4]
        [--beta 0.1] [--steps 20] [--questions-per-step 4] [--num-generations 4] [--rejected-turns MODE]
        [--question-order by_relation] [--out FILE]

One recipe run gives one draw of agentic RL's must-show (the trajectory reward over the first and the last 20% of its
steps), and that reading mixes two things: what the policy learned, and which questions the later steps drew. This
separates them. From a finished ``forge run`` in ``--checkout`` (its mix and search index, its ``agentic-warmup``
checkpoint, or with ``--warmup-steps`` a warm-up trained here from its ``code-rl-stage2`` checkpoint as
tasks/agentic.py trains it, e.g. with ``--max-hops 2``), agentic RL is trained per seed as the stage trains it
(:func:`forge.training.agentic.train_agentic`, the profile's settings), beside a control with a learning rate of
1e-12 (the same questions step by step, the unchanged policy). Each run's checkpoint is then sampled on the stage's
held-out questions (:func:`forge.training.agentic.success_check`, one episode each at the rollout temperature, the
check's seed). Per run: the curve's first/last-20% means (trajectory reward, rejected-turn share, tool calls), the
held-out success, by hop count and by relation too, seconds. Writes bench/results/agentic_links.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from code_rl_stage2 import latest, machine  # run as a script

from forge.config import load_profile
from forge.data.mix import read_mix
from forge.search.lookups import LinkAgent, check_questions, sft_seen, task_questions, warmup_questions
from forge.search.rollout import SearchEnvironment
from forge.search.tools import SearchTools
from forge.training.agentic import CURVES, success_check, train_agentic
from forge.training.sft import run_sft_stage
from forge.workspace import Workspace
from tasks.agentic import WARMUP_HELDOUT

REPO = Path(__file__).resolve().parent.parent
CONTROL_LR = 1e-12


def held_out_success(env: SearchEnvironment, policy_dir: Path, qas, cfg, runtime, seed: int) -> dict[str, Any]:
    """Held-out success of one checkpoint, sampled as the stage's check samples: overall, per hop count, and per
    first-hop relation (answered / asked), from one episode per question."""
    right = success_check(policy_dir, env, qas, cfg, runtime, seed)

    def split(key) -> dict[str, list[bool]]:
        parts: dict[str, list[bool]] = {}
        for qa, ok in zip(qas, right, strict=True):
            parts.setdefault(key(qa), []).append(ok)
        return parts

    out: dict[str, Any] = {"all": round(sum(right) / len(qas), 4)}
    hops = split(lambda qa: f"{len(qa.walk['hops'])}_hop")
    if len(hops) > 1:
        out |= {k: round(sum(v) / len(v), 4) for k, v in sorted(hops.items())}
    relations = split(lambda qa: qa.walk["hops"][0]["label"])
    out["by_relation"] = {k: f"{sum(v)}/{len(v)}" for k, v in sorted(relations.items(), key=lambda kv: -len(kv[1]))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, required=True, help="a checkout where `forge run` finished")
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--warmup-steps", type=int, help="train the warm-up here with this many steps")
    parser.add_argument("--warmup-mix", choices=["natural", "balanced", "contrast"],
                        help="the warm-up's relations, with --warmup-steps (default: the profile's)")
    parser.add_argument("--max-hops", type=int, help="questions of up to this many hops (default: the profile's)")
    parser.add_argument("--link-relations", type=int,
                        help="the relations the questions take (default: the profile's; needs --warmup-steps)")
    parser.add_argument("--learning-rate", type=float, help="RL learning rate (default: the profile's)")
    parser.add_argument("--steps", type=int, help="RL steps (default: the profile's)")
    parser.add_argument("--beta", type=float, help="KL coefficient to the starting policy (default: the profile's)")
    parser.add_argument("--questions-per-step", type=int, help="questions a step samples (default: the profile's)")
    parser.add_argument("--num-generations", type=int, help="episodes per question, the group (default: the profile's)")
    parser.add_argument("--question-order", choices=["shuffled", "by_relation"],
                        help="the order RL takes its questions in (default: the profile's)")
    parser.add_argument("--rejected-turns", choices=["no_loss", "negative_reward", "no_credit"],
                        help="how RL treats a turn the critic rejects (default: the profile's)")
    parser.add_argument("--no-control", action="store_true")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "agentic_links.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ["FORGE_HOME"] = str(args.checkout / ".forge")
    load_before = os.getloadavg()
    cfg = load_profile(args.profile)
    update = {"stop_after_idle_steps": 0}
    if args.max_hops:
        update["max_hops"] = args.max_hops
    if args.link_relations:
        if not args.warmup_steps:
            parser.error("--link-relations changes the questions the warm-up trains on: give --warmup-steps")
        update["link_relations"] = args.link_relations
    if args.learning_rate:
        update["learning_rate"] = args.learning_rate
    if args.steps:
        update["max_steps"] = args.steps
    if args.beta is not None:
        update["beta"] = args.beta
    if args.questions_per_step:
        update["questions_per_step"] = args.questions_per_step
    if args.num_generations:
        update["num_generations"] = args.num_generations
    if args.rejected_turns:
        update["rejected_turns"] = args.rejected_turns
    if args.question_order:
        update["question_order"] = args.question_order
    if args.warmup_mix:
        update["warmup_mix"] = args.warmup_mix
    if args.warmup_steps:
        update["warmup"] = cfg.agentic_rl.warmup.model_copy(update={"max_steps": args.warmup_steps})
    a = cfg.agentic_rl.model_copy(update=update)
    tools = SearchTools.load(Workspace.from_env())
    mix = latest(".forge/../data/mixes/*/manifest.json", args.checkout).parent
    train_rows, heldout_rows = read_mix(str(mix))
    qas = task_questions(tools.graph, a, sft_seen(train_rows + heldout_rows), cfg.seed)
    held_out = check_questions(tools.graph, a, qas, cfg.seed)
    work = Path(tempfile.mkdtemp(prefix="agentic-links-"))
    started = time.monotonic()
    if args.warmup_steps:
        rows = [LinkAgent().run(q, tools).to_chat_sample() for q in warmup_questions(tools.graph, a, qas, cfg.seed)]
        warm = work / "warmup"
        run_sft_stage(latest(".forge/models/code-rl-stage2-*/config.json", args.checkout).parent,
                      [r for i, r in enumerate(rows) if i % WARMUP_HELDOUT], rows[::WARMUP_HELDOUT], a.warmup,
                      cfg.sft, cfg.runtime, warm)
    else:
        warm = latest(".forge/models/agentic-warmup-*/config.json", args.checkout).parent
    warmup_seconds = time.monotonic() - started
    env = SearchEnvironment.from_config(tools, qas, a, seed=cfg.seed)
    start = held_out_success(env, warm, held_out, a, cfg.runtime, cfg.seed)
    print("start", json.dumps(start), flush=True)
    runs = []
    for seed in args.seeds:
        for lr in (a.learning_rate, *(() if args.no_control else (CONTROL_LR,))):
            run_cfg = a.model_copy(update={"learning_rate": lr})
            out = work / f"rl-seed{seed}-lr{lr:g}"
            tick = time.monotonic()
            result = train_agentic(warm, SearchEnvironment.from_config(tools, qas, run_cfg, seed=seed), run_cfg,
                                   cfg.runtime, out, seed=seed)
            run = {"seed": seed, "learning_rate": lr, "control": lr == CONTROL_LR,
                   "seconds": round(time.monotonic() - tick, 1),
                   **{k: {"first20": round(result.window_mean(k, 0.0, 0.2), 4),
                          "last20": round(result.window_mean(k, 0.8, 1.0), 4)} for k in CURVES},
                   "trajectory_reward_per_step": [round(v, 4) for v in result.series("trajectory_reward")[1]],
                   "held_out_after": held_out_success(env, out, held_out, a, cfg.runtime, cfg.seed)}
            runs.append(run)
            print(json.dumps({k: run[k] for k in ("seed", "control", "trajectory_reward", "held_out_after")}),
                  flush=True)

    def rise(run: dict) -> float:
        return run["trajectory_reward"]["last20"] - run["trajectory_reward"]["first20"]

    trained = [r for r in runs if not r["control"]]
    controls = {r["seed"]: r for r in runs if r["control"]}
    summary = {
        "curve_rise_mean": round(statistics.fmean(rise(r) for r in trained), 4),
        "curve_rose": f"{sum(rise(r) > 0 for r in trained)} of {len(trained)}",
        "held_out_sampled_change_mean": round(statistics.fmean(
            r["held_out_after"]["all"] - start["all"] for r in trained), 4),
    }
    if controls:
        summary["curve_rise_minus_control_mean"] = round(statistics.fmean(
            rise(r) - rise(controls[r["seed"]]) for r in trained), 4)
        summary["last20_above_control"] = (
            f"{sum(r['trajectory_reward']['last20'] > controls[r['seed']]['trajectory_reward']['last20'] for r in trained)}"
            f" of {len(trained)}")
    report = {
        "benchmark": "agentic_links",
        "command": "PYTHONPATH=. python bench/agentic_links.py " + " ".join(os.sys.argv[1:]),
        "machine": machine(load_before),
        "settings": a.model_dump(mode="json"),
        "questions": {"rl": len(qas), "held_out": len(held_out)},
        "warmup": {"trained_here": bool(args.warmup_steps), "seconds": round(warmup_seconds, 1)},
        "held_out_start": start,
        "summary": summary,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary), f"wrote {args.out}")


if __name__ == "__main__":
    main()
