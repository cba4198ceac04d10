"""Benchmark: a second `forge run` against the first, side by side in one scratch checkout.

    .venv/bin/python bench/recipe_rerun.py [--profile tiny]

Runs the recipe twice with a fresh FORGE_HOME and writes bench/results/recipe_rerun-<profile>.json with both wall
times, the ratio (the issue asks for < 0.1) and the per-stage states of each run, so a cache miss shows by name.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

from scratch import FORGE, REPO, forge_env, scratch_checkout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="tiny")
    args = parser.parse_args()
    profile = args.profile if args.profile.endswith(".yaml") else str(REPO / "configs" / f"{args.profile}.yaml")
    root = scratch_checkout()
    env = forge_env(root)
    runs = []
    for attempt in (1, 2):
        started = time.time()
        subprocess.run([FORGE, "run", "--profile", profile], env=env, cwd=root, check=True)
        seconds = time.time() - started
        summary = json.loads((root / ".forge" / "runs" / "latest.json").read_text())
        runs.append(
            {
                "run": attempt,
                "seconds": round(seconds, 1),
                "stages": {
                    k: {"state": v["state"], "seconds": v.get("seconds")} for k, v in summary["stages"].items()
                },
            }
        )
    result = {
        "profile": args.profile,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "first_s": runs[0]["seconds"],
        "second_s": runs[1]["seconds"],
        "ratio": round(runs[1]["seconds"] / runs[0]["seconds"], 4),
        "runs": runs,
    }
    out = REPO / "bench" / "results" / f"recipe_rerun-{Path(profile).stem}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("first_s", "second_s", "ratio")}))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
