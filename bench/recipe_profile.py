"""Benchmark: where the recipe's time goes, stage by stage: the stage's own work against Prefect, MLflow and DVC.

    .venv/bin/python bench/recipe_profile.py [--profile tiny] [--out bench/results/recipe_profile-tiny.json]

Runs the recipe once, in this process, in a scratch checkout with a fresh home (nothing cached), with probes:

- **own work**: the time inside each stage's task function (the Prefect task's ``fn``), less the MLflow and DVC
  calls made inside it;
- **Prefect**: a stage's wall time (``RecipeRun.stage``, what ``forge status`` shows) less the time inside its task
  function: task-run creation, the cache-key hashing of inputs and library sources, result persistence, states;
- **MLflow**: every call of the fluent API (``mlflow.log_metrics``, ``start_run``, ``register_model``, …) and of
  ``MlflowClient``, counted once however deeply they call each other;
- **DVC**: every call into ``forge.data.versioning`` (the ``dvc`` and ``git`` subprocesses it runs);
- **calls**: per stage, the costliest outermost MLflow and DVC calls by name, with how often each ran, so a stage's
  bookkeeping seconds say what they were; calls made on the background lane (flows/links.py: a finished stage's
  Prefect artifact, written while the next stage runs) are counted apart, as ``background_lane``, not in that stage;
- **tokens processed**: tokens through the forward of every Hugging Face model (training steps, generation steps,
  reward-model scoring; the backward pass not counted), so tokens/s is forward tokens per second of own work.

CPU seconds and peak resident memory per stage come from the run summary (forge/usage.py). Writes the JSON (per
stage and totals, the machine and its load average) and a plot of the breakdown next to it (``.png``). The probes
cost a few microseconds per call; the time outside every stage (flow start, the embedded Prefect server, phase
runs) is reported as ``outside_stages_s``.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import platform
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import REPO, forge_env, scratch_checkout

sys.path.insert(0, str(REPO))

BUCKETS = ("work", "prefect", "mlflow", "dvc")
# Stages whose work *is* versioning or registry calls (DVC commit, model registration, the eval report, the
# promotion gate): in their overhead share only Prefect's time counts (their MLflow / DVC calls are the work).
BOOKKEEPING_STAGES = frozenset({"dvc", "eval-report", "promote"})
CALLS = frozenset({"mlflow", "dvc"})  # buckets whose outermost calls are also counted by name, per stage
TOP_CALLS = 6  # the costliest named calls kept per stage
OVERHEAD_BUDGET = 0.05  # issue 18: orchestration at most 5% of a stage's wall time
OVER_BUDGET_COLOR = "#c44e52"


class Probes:
    """Seconds per (stage, bucket) and tokens per stage; the stage is the one ``RecipeRun.stage`` is running."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stage: str | None = None
        self.seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.tokens: dict[str, int] = defaultdict(int)
        self.calls: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))  # count, seconds
        self.local = threading.local()
        from flows.links import BACKGROUND_THREAD  # after the environment is set: flows import Prefect

        self.background_thread = BACKGROUND_THREAD

    def add(self, bucket: str, seconds: float, call: str | None = None) -> None:
        # The background lane's calls (a finished stage's Prefect artifact) run beside the next stage, not in it.
        background = threading.current_thread().name == self.background_thread
        with self.lock:
            stage = "(background lane)" if background else self.stage or "(outside stages)"
            self.seconds[stage][bucket] += seconds
            if call:
                record = self.calls[stage][f"{bucket}:{call}"]
                record[0] += 1
                record[1] += seconds

    def timed(self, bucket: str, fn):
        """``fn`` with its time added to ``bucket``; a call made inside another timed call of the same bucket (on
        this thread) is not counted again."""
        depth_key = f"depth_{bucket}"

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            depth = getattr(self.local, depth_key, 0)
            setattr(self.local, depth_key, depth + 1)
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                setattr(self.local, depth_key, depth)
                if depth == 0:
                    self.add(bucket, time.perf_counter() - started, fn.__qualname__ if bucket in CALLS else None)

        return wrapper


def _tokens(args: tuple, kwargs: dict) -> int:
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is None:
        embeds = kwargs.get("inputs_embeds")
        return int(embeds.shape[0] * embeds.shape[1]) if embeds is not None else 0
    mask = kwargs.get("attention_mask")
    if mask is not None and mask.shape == ids.shape:  # padding not counted; a decode step's mask spans the cache
        return int(mask.sum())
    return int(ids.numel())


def install(probes: Probes) -> None:
    """Wrap MLflow, DVC, the Hugging Face models' forward and the recipe's stages (before the flows are imported,
    so every ``from … import`` binds the wrapped functions)."""
    import mlflow
    from mlflow.tracking import MlflowClient
    from transformers.modeling_utils import PreTrainedModel

    from forge.data import versioning

    for name in dir(mlflow):
        obj = getattr(mlflow, name)
        if inspect.isfunction(obj) and not name.startswith("_") and obj.__module__.startswith("mlflow"):
            setattr(mlflow, name, probes.timed("mlflow", obj))
    for name, obj in list(vars(MlflowClient).items()):
        if inspect.isfunction(obj) and not name.startswith("_"):
            setattr(MlflowClient, name, probes.timed("mlflow", obj))
    for name, obj in list(vars(versioning).items()):
        if inspect.isfunction(obj) and obj.__module__ == versioning.__name__ and not name.startswith("_"):
            setattr(versioning, name, probes.timed("dvc", obj))

    module_call = PreTrainedModel.__call__  # torch.nn.Module.__call__
    local = threading.local()

    def counted_call(self, *args, **kwargs):
        outer = not getattr(local, "inside", False)  # a model's inner PreTrainedModel (LlamaModel) is not counted
        if outer:
            local.inside = True
            try:
                n = _tokens(args, kwargs)
            except Exception:  # noqa: BLE001 — an input shape we do not know is not counted, the call still runs
                n = 0
            with probes.lock:
                probes.tokens[probes.stage or "(outside stages)"] += n
        try:
            return module_call(self, *args, **kwargs)
        finally:
            if outer:
                local.inside = False

    PreTrainedModel.__call__ = counted_call

    import prefect

    import flows._stages as stages
    import flows.recipe  # noqa: F401 — imports every task module
    import tasks

    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith(tasks.__name__ + "."):
            continue
        for obj in vars(module).values():
            if isinstance(obj, prefect.Task) and not getattr(obj.fn, "_profiled", False):
                obj.fn = probes.timed("body", obj.fn)
                obj.fn._profiled = True

    run_stage = stages.RecipeRun.stage

    @functools.wraps(run_stage)
    def stage(self, name, task, /, **inputs):
        probes.stage = name
        started = time.perf_counter()
        try:
            return run_stage(self, name, task, **inputs)
        finally:
            probes.add("wall", time.perf_counter() - started)
            probes.stage = None

    stages.RecipeRun.stage = stage


def breakdown(probes: Probes, summary: dict) -> dict[str, dict]:
    """Per stage: wall, own work, Prefect, MLflow, DVC, their share of the wall, tokens, CPU and memory."""
    out = {}
    for name, rec in summary["stages"].items():
        s = probes.seconds.get(name, {})
        wall, body = s.get("wall", 0.0), s.get("body", 0.0)
        mlflow_s, dvc_s = s.get("mlflow", 0.0), s.get("dvc", 0.0)
        bookkeeping = name in BOOKKEEPING_STAGES
        work = max(0.0, body - mlflow_s - dvc_s)
        prefect_s = max(0.0, wall - body)
        tokens = probes.tokens.get(name, 0)
        out[name] = {
            "state": rec.get("state"),
            "kind": "bookkeeping" if bookkeeping else "compute",
            "wall_s": round(wall, 2),
            "work_s": round(work, 2),
            "prefect_s": round(prefect_s, 3),
            "mlflow_s": round(mlflow_s, 3),
            "dvc_s": round(dvc_s, 3),
            "overhead_share": round((prefect_s if bookkeeping else wall - work) / wall, 4) if wall else None,
            "cpu_s": rec.get("cpu_s"),
            "peak_rss_mb": rec.get("peak_rss_mb"),
            "tokens": tokens,
            "tokens_per_s": round(tokens / work) if work and tokens else None,
            # which MLflow / DVC calls the stage's bookkeeping seconds were: "bucket:function": [calls, seconds]
            "calls": {k: [n, round(sec, 4)] for k, (n, sec) in sorted(
                probes.calls.get(name, {}).items(), key=lambda kv: -kv[1][1])[:TOP_CALLS]},
        }
    return out


def plot(stages: dict[str, dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(stages)
    parts = [("work_s", "own work", "#4c72b0"), ("prefect_s", "Prefect", "#dd8452"),
             ("mlflow_s", "MLflow", "#55a868"), ("dvc_s", "DVC", "#c44e52")]
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(names) + 1.6))
    left = [0.0] * len(names)
    for key, label, color in parts:
        values = [stages[n][key] for n in names]
        ax.barh(names, values, left=left, label=label, color=color)
        left = [a + b for a, b in zip(left, values, strict=True)]
    for i, n in enumerate(names):
        share = stages[n]["overhead_share"]
        if share is not None:
            ax.text(left[i] + 2, i, f"{100 * share:.1f}% overhead", va="center", fontsize=7,
                    color=OVER_BUDGET_COLOR if share > OVERHEAD_BUDGET else "black")
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="tiny", help="configs/<name>.yaml, or a path to a profile")
    parser.add_argument("--out", type=Path, help="default: bench/results/recipe_profile-<profile>.json")
    args = parser.parse_args()
    profile = args.profile if args.profile.endswith(".yaml") else str(REPO / "configs" / f"{args.profile}.yaml")
    label = Path(profile).stem
    out = args.out or REPO / "bench" / "results" / f"recipe_profile-{label}.json"

    root = scratch_checkout(prefix="forge-profile-")
    env = forge_env(root)
    os.environ.clear()
    os.environ.update(env)
    from forge.workspace import configure_environment

    configure_environment()  # before Prefect is imported (it reads where results go at import)
    probes = Probes()
    install(probes)
    from forge.cli import _in_process

    load_before = os.getloadavg()
    started = time.perf_counter()
    result = _in_process("recipe", profile, None, False)
    total = time.perf_counter() - started
    summary = json.loads((root / ".forge" / "runs" / "latest.json").read_text())
    stages = breakdown(probes, summary)
    in_stages = sum(s["wall_s"] for s in stages.values())
    timed = [s for s in stages.values() if s["state"] == "completed" and s["wall_s"]]
    report = {
        "benchmark": "recipe profile: own work vs Prefect / MLflow / DVC per stage",
        "command": f"PYTHONPATH=. .venv/bin/python bench/recipe_profile.py --profile {args.profile}",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_before": [round(x, 2) for x in load_before],
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "profile": label,
        "recipe_s": round(total, 1),
        "in_stages_s": round(in_stages, 1),
        "outside_stages_s": round(total - in_stages, 1),
        "outside_stages": {k: round(v, 2) for k, v in probes.seconds.get("(outside stages)", {}).items()},
        "background_lane": {k: round(v, 3) for k, v in probes.seconds.get("(background lane)", {}).items()},
        "data_md5": result.data.data_md5,
        "totals": {f"{b}_s": round(sum(s[f"{b}_s"] for s in stages.values()), 1) for b in BUCKETS},
        "max_overhead_share": max((s["overhead_share"] for s in timed), default=None),
        "stages": stages,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    plot(stages, out.with_suffix(".png"), f"{label} recipe, {total / 60:.1f} min: where each stage's time goes")
    print(json.dumps({k: report[k] for k in ("recipe_s", "outside_stages_s", "totals", "max_overhead_share")},
                     indent=1))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
