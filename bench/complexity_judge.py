"""The empirical complexity judge's accuracy per class on Forge's labelled solutions, on a quiet machine and with
CPU-spinning processes beside it, side by side.

    .venv/bin/python bench/complexity_judge.py [--busy 2] [--rounds 1]

Each labelled solution (``forge/code/problems``: every problem's reference and its labelled alternatives, and the
linear reference of each of the 11 drill operations code RL trains on, ``forge/code/problems/drills.py``) is timed
and classified by ``forge.code.complexity.estimate_complexity`` as the reward does it. Reported per true class: n,
right, wrong (with what they were taken for) and "unknown"; overall accuracy, quiet and loaded. Writes
bench/results/complexity_judge.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from load import spinning

from forge.code.complexity import estimate_complexity
from forge.code.problems import forge_problems
from forge.code.problems.drills import drill_problems
from forge.code.runner import default_workers

REPO = Path(__file__).resolve().parent.parent


def judge_all(labelled) -> dict:
    started = time.time()
    with ThreadPoolExecutor(default_workers()) as pool:
        verdicts = list(pool.map(lambda item: estimate_complexity(item[1], item[0], sizes=item[2]), labelled))
    per_class: dict[str, dict] = defaultdict(lambda: {"n": 0, "right": 0, "unknown": 0, "taken_for": Counter()})
    for (_, _, _, truth), verdict in zip(labelled, verdicts):
        row = per_class[truth]
        row["n"] += 1
        if verdict.complexity == truth:
            row["right"] += 1
        elif verdict.complexity == "unknown":
            row["unknown"] += 1
        else:
            row["taken_for"][verdict.complexity] += 1
    right = sum(r["right"] for r in per_class.values())
    return {"seconds": round(time.time() - started, 1), "accuracy": round(right / len(labelled), 4),
            "wrong": sum(sum(r["taken_for"].values()) for r in per_class.values()),
            "per_class": {c: {**r, "taken_for": dict(r["taken_for"])} for c, r in sorted(per_class.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    labelled = [(p, s.source, s.sizes or None, s.complexity) for p in forge_problems() for s in p.labelled]
    labelled += [(p, p.reference, None, p.complexity) for p in drill_problems("rl", per_op=1)]
    runs = []
    for r in range(args.rounds):
        quiet = judge_all(labelled)
        with spinning(args.busy):
            loaded = judge_all(labelled)
        runs.append({"round": r + 1, "quiet": quiet, "loaded": loaded})
        print(json.dumps({"round": r + 1, "quiet": quiet["accuracy"], "loaded": loaded["accuracy"]}), flush=True)
    report = {"benchmark": "complexity_judge", "command": f"python bench/complexity_judge.py --busy {args.busy} "
              f"--rounds {args.rounds}", "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "labelled": len(labelled), "busy_processes": args.busy, "runs": runs}
    (REPO / "bench" / "results" / "complexity_judge.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
