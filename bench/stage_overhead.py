"""Benchmark: the fixed cost of one recipe stage, with its Prefect artifact written inline or in the background.

    PYTHONPATH=. .venv/bin/python bench/stage_overhead.py [--stages 24] [--rounds 3]

A stage of a sub-second body (``code-drills``, an eval, ``promote``) spends a fixed share of its
wall time outside its body: Prefect's task run (state changes, the cache key over inputs and library sources,
result persistence), the run summary Forge writes before and after (forge status), and a markdown artifact on the
Prefect run. This runs a flow of trivial cached stages through ``RecipeRun.stage`` (the recipe's own path, an
embedded Prefect server and MLflow store in a scratch home), in alternating blocks: the artifact created inline
(what every stage did before flows/links.py's background lane) and handed to the background lane (now). Reported:
per-stage wall time (median and mean per mode), and where it goes (cProfile of the last block of each mode).
Writes bench/results/stage_overhead.json.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import REPO, forge_env, scratch_checkout

sys.path.insert(0, str(REPO))

# Where a stage's fixed cost goes: cumulative seconds of these functions, per stage.
PARTS = {
    "prefect task run": "prefect/task_engine.py:run_task_sync",
    "cache key (inputs + library sources)": "prefect/cache_policies.py:compute_key",
    "run summary writes": "flows/_stages.py:_record",
    "artifact, inline": "flows/links.py:_create_stage_artifact",
}


def parts_of(stats: pstats.Stats, stages: int) -> dict[str, float]:
    out = {}
    for label, where in PARTS.items():
        path, func = where.split(":")
        cum = sum(v[3] for (file, _, name), v in stats.stats.items() if file.endswith(path) and name == func)
        out[label] = round(cum / stages * 1000, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=24, help="stages per block")
    parser.add_argument("--rounds", type=int, default=3, help="blocks per mode, alternating")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "stage_overhead.json")
    args = parser.parse_args()

    root = scratch_checkout(prefix="forge-overhead-")
    os.environ.clear()
    os.environ.update(forge_env(root))
    from forge.workspace import Workspace, configure_environment

    configure_environment()
    from prefect import flow
    from prefect.runtime import flow_run

    from flows import links
    from flows._stages import RecipeRun
    from tasks._cache import cached_task
    from tasks.code import CODE_MODULES

    @cached_task(name="trivial", modules=CODE_MODULES)  # the code stages' library closure, as code-drills hashes
    def trivial_task(*, x: str) -> str:
        return x

    background_submit = links.background.submit

    def inline_submit(fn, *a, **kw):
        fn(*a, **kw)

    walls: dict[str, list[float]] = {"inline": [], "background": []}
    profiles: dict[str, dict[str, float]] = {}

    @flow(name="stage-overhead")
    def overhead_flow() -> None:
        with RecipeRun.start(profile="tiny", flow_run_id=str(flow_run.id), workspace=Workspace.from_env()) as run:
            run.stage("warm-up", trivial_task, x="warm-up")  # first-call imports and connections
            for r in range(args.rounds):
                for mode in ("inline", "background"):
                    links.background.submit = inline_submit if mode == "inline" else background_submit
                    links.background.flush()
                    prof = cProfile.Profile()
                    for i in range(args.stages):
                        started = time.perf_counter()
                        prof.enable()
                        run.stage(f"{mode}-{r}-{i}", trivial_task, x=f"{mode}-{r}-{i}")
                        prof.disable()
                        walls[mode].append(time.perf_counter() - started)
                    links.background.flush()
                    profiles[mode] = parts_of(pstats.Stats(prof), args.stages)

    load_before = os.getloadavg()
    overhead_flow()
    ms = {m: sorted(1000 * w for w in v) for m, v in walls.items()}
    report = {
        "benchmark": "fixed cost of one recipe stage (RecipeRun.stage, a trivial cached task), artifact inline vs "
                     "background",
        "command": f"PYTHONPATH=. .venv/bin/python bench/stage_overhead.py --stages {args.stages} --rounds "
                   f"{args.rounds}",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_before": [round(x, 2) for x in load_before],
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "stages_per_mode": len(ms["inline"]),
        "per_stage_ms": {m: {"median": round(statistics.median(v), 1), "mean": round(statistics.fmean(v), 1),
                             "p90": round(v[int(0.9 * (len(v) - 1))], 1)} for m, v in ms.items()},
        "median_ratio_inline_over_background": round(statistics.median(ms["inline"])
                                                     / statistics.median(ms["background"]), 2),
        "where_per_stage_ms_last_block": profiles,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("per_stage_ms", "median_ratio_inline_over_background",
                                             "where_per_stage_ms_last_block")}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
