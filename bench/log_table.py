"""Benchmark: logging an evaluation's items table and metrics, Forge's ``log_table`` against MLflow's own.

    .venv/bin/python bench/log_table.py [--runs 25] [--rounds 3] [--rows 38]

Every evaluation suite ends by logging its per-item table (``eval_items.json``) and its metrics into its run
(tasks/evals.py). ``registry.tracking.log_table`` writes MLflow's table format itself, through the run's artifact
repository, and sends the table tag and the metrics in one batch; the baseline is what it replaces,
``mlflow.log_table`` (pandas, the run's artifacts listed and the run read back) then ``mlflow.log_metrics``. Both log
the same rows into fresh nested runs of one SQLite store (the tiny profile's), in alternating blocks; the table each
writes must load back equal (``mlflow.load_table``). Reported: milliseconds per table (median per block, the median
of blocks) and the ratio. Writes bench/results/log_table.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

ARTIFACT = "eval_items.json"


def ours(rows: list[dict], metrics: dict[str, float]) -> None:
    from registry.tracking import log_table

    log_table(rows, ARTIFACT, metrics=metrics)


def mlflows(rows: list[dict], metrics: dict[str, float]) -> None:
    import mlflow
    import pandas as pd

    mlflow.log_table(data=pd.DataFrame(rows), artifact_file=ARTIFACT)
    mlflow.log_metrics(metrics)


def block(fn, rows: list[dict], runs: int) -> tuple[float, str]:
    """Median ms of ``runs`` tables logged by ``fn``, each into a fresh nested run; the last run's id."""
    import mlflow

    times = []
    for _ in range(runs):
        with mlflow.start_run(nested=True) as run:
            start = time.perf_counter()
            fn(rows, {"accuracy": 0.5, "n": float(len(rows))})
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), run.info.run_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25, help="tables per block")
    parser.add_argument("--rounds", type=int, default=3, help="blocks per side, alternating")
    parser.add_argument("--rows", type=int, default=38, help="rows per table (the tiny science suite's 38 items)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "log_table.json")
    args = parser.parse_args()

    import mlflow

    home = Path(tempfile.mkdtemp(prefix="forge-log-table-"))
    mlflow.set_tracking_uri(f"sqlite:///{home / 'mlflow.db'}")
    mlflow.set_experiment("bench-log-table")
    rows = [{"id": f"item-{i}", "source": "mmlu", "score": float(i % 2), "answer": f"({'ABCD'[i % 4]})",
             "completion": "The answer is " + "x" * 60} for i in range(args.rows)]
    sides = {"forge": ours, "mlflow": mlflows}
    load = os.getloadavg()
    medians: dict[str, list[float]] = {side: [] for side in sides}
    with mlflow.start_run(run_name="bench"):
        block(ours, rows, 3)  # warm: the store's tables and the imports
        block(mlflows, rows, 3)
        for r in range(args.rounds):
            for side in (sides if r % 2 == 0 else reversed(list(sides))):
                ms, run_id = block(sides[side], rows, args.runs)
                medians[side].append(round(ms, 2))
                loaded = mlflow.load_table(ARTIFACT, run_ids=[run_id])
                if loaded.to_dict("records") != rows:
                    raise SystemExit(f"{side}: the table did not load back as logged")
    result = {
        "benchmark": "an evaluation's items table + metrics: registry.tracking.log_table vs mlflow.log_table",
        "command": "python bench/log_table.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_before": [round(x, 2) for x in load],
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "store": "SQLite (the tiny profile's embedded store), fresh",
        "rows": args.rows,
        "tables_per_block": args.runs,
        "ms_per_table_blocks": medians,
        "ms_per_table": {side: statistics.median(v) for side, v in medians.items()},
        "ratio_mlflow_over_forge": round(statistics.median(medians["mlflow"]) / statistics.median(medians["forge"]), 2),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("ms_per_table", "ratio_mlflow_over_forge")}, indent=2))


if __name__ == "__main__":
    main()
