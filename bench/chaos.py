"""Chaos bench: the CI profile's recipe SIGKILLed at seeded random moments, resumed after each kill, and compared
with an uninterrupted run; then the home on a full disk.

    .venv/bin/python bench/chaos.py [--kills 6] [--seed 0] [--profile configs/ci.yaml]

1. Baseline: the recipe uninterrupted in one scratch checkout, then once more (the stages that run again with
   nothing changed, e.g. ``dvc`` and ``promote``, are not counted as redone below).
2. Chaos: a second scratch checkout; each attempt is killed (the whole process group, SIGKILL) after a delay drawn
   from the seed so that the kills fall across the baseline's duration, then the next attempt resumes; after the
   last kill an attempt runs to the end. Counted: finished stages redone by a later attempt (a stage recorded
   completed or cached when a process died, recorded completed again by a later one; must be 0), and partial files
   taken as done (after the end, every JSON/JSONL file under the home and data must parse to its last line and
   every safetensors file must open; must be 0).
3. Equality with the baseline: the data mix's DVC md5, the registered model versions (name, version, stage) and
   every stage metric; a training stage killed mid-way resumes from its last checkpoint, so its metrics may differ
   within the tolerance stated in the result.
4. Disk full (root only: a private mount namespace): the home on a small tmpfs; the run must fail naming a path,
   keep nothing partial, and, once the tmpfs is grown, the next run completes.

Writes bench/results/chaos.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from scratch import FORGE, REPO, forge_env, scratch_checkout

TOLERANCE = 0.05  # relative, for metrics of a training stage resumed from a checkpoint
ALWAYS_FINISHED = ("completed", "cached")


def attempt(root: Path, profile: str, kill_at: tuple[str, float] | None = None, home: Path | None = None) -> dict:
    """One ``forge run``. With ``kill_at=(stage, seconds)`` the whole process group is SIGKILLed once ``stage`` has
    been running for ``seconds`` (or, if the run gets past it first, as soon as a later stage runs)."""
    started = time.time()
    latest = (home or root / ".forge") / "runs" / "latest.json"
    before = latest.stat().st_mtime if latest.exists() else 0.0
    proc = subprocess.Popen([FORGE, "run", "--profile", profile], env=forge_env(root, home), cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    reader.start()
    killed = False
    while kill_at is not None and proc.poll() is None:
        time.sleep(0.1)
        stages = _stages(latest) if latest.exists() and latest.stat().st_mtime > before else {}
        target, after = kill_at
        state = stages.get(target, {})
        due = state.get("state") == "running" and time.time() - state.get("started", time.time()) >= after
        past = state.get("state") in ALWAYS_FINISHED and any(v["state"] == "running" for v in stages.values())
        if due or past:
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
    proc.wait()
    reader.join(timeout=10)
    summary = _stages(latest)
    return {"seconds": round(time.time() - started, 1), "killed": killed, "returncode": proc.returncode,
            "stages": {k: v["state"] for k, v in summary.items()},
            "running": [k for k, v in summary.items() if v["state"] == "running"],
            "metrics": {k: v.get("metrics") or {} for k, v in summary.items()}, "tail": "".join(out)[-3000:],
            "summary": summary}


def _stages(latest: Path) -> dict:
    try:
        return json.loads(latest.read_text())["stages"]
    except (OSError, json.JSONDecodeError, KeyError):  # being rewritten (atomically) or not there yet
        return {}


def registered_versions(home: Path) -> list[tuple[str, str, str]]:
    import mlflow

    uri = f"sqlite:///{home / 'mlflow' / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    return sorted((v.name, v.version, v.tags.get("forge.stage", "")) for m in client.search_registered_models()
                  for v in client.search_model_versions(f"name='{m.name}'"))


def partial_files(*dirs: Path) -> list[str]:
    """Files a killed writer could have left half-written and a later stage taken as done."""
    bad = []
    for d in dirs:
        for path in d.rglob("*"):
            if not path.is_file() or path.is_symlink() or "/.git/" in str(path) or "/cache/" in str(path):
                continue
            try:
                if path.suffix == ".jsonl":
                    with path.open("rb") as fh:
                        for line in fh:
                            if line.strip():
                                json.loads(line)
                elif path.suffix == ".json":
                    json.loads(path.read_bytes())
                elif path.suffix == ".safetensors":
                    from safetensors import safe_open

                    with safe_open(str(path), "pt") as st:
                        list(st.keys())
            except Exception as err:  # noqa: BLE001 - any failure to read it whole is what we count
                bad.append(f"{path}: {type(err).__name__}: {str(err)[:120]}")
    return bad


def data_md5(root: Path) -> str | None:
    from forge.data.versioning import read_data_md5

    return read_data_md5(root) if (root / "data.dvc").exists() else None


def compare_metrics(base: dict, other: dict) -> dict:
    """Every numeric stage metric of the uninterrupted run against the chaos run's; speeds and durations (keys
    ending in ``seconds`` or ``per_s``) are measurements of this machine's load, not results, and are left out."""
    rows = {}
    for stage, metrics in base.items():
        for key, value in metrics.items():
            mine = other.get(stage, {}).get(key)
            if key.endswith(("seconds", "per_s")) or not isinstance(value, (int, float)):
                continue
            if not isinstance(mine, (int, float)):
                rows[f"{stage}/{key}"] = (value, mine, math.inf)
            elif mine == value or (math.isnan(value) and math.isnan(mine)):
                rows[f"{stage}/{key}"] = (value, mine, 0.0)
            else:
                rows[f"{stage}/{key}"] = (value, mine, abs(mine - value) / max(abs(value), 1e-9))
    differ = {k: {"uninterrupted": a, "chaos": b, "relative": round(d, 6)} for k, (a, b, d) in rows.items() if d}
    return {"compared": len(rows), "equal": len(rows) - len(differ), "differ": differ,
            "over_tolerance": sorted(k for k, v in differ.items() if v["relative"] > TOLERANCE)}


def timeline(stages: dict) -> list[tuple[str, float, float]]:
    """(stage, start, seconds) of the uninterrupted run, in order, for the stages that took a while."""
    t0 = min(v["started"] for v in stages.values())
    return [(k, v["started"] - t0, v["seconds"]) for k, v in stages.items() if (v.get("seconds") or 0) >= 2.0]


def chaos(profile: str, kills: int, seed: int, stages: list[tuple[str, float, float]], always_run: set[str]) -> dict:
    """Kill moments drawn one in each of ``kills`` equal slices of the uninterrupted run's duration; each falls in
    some stage of it, and the attempt is killed that far into that stage."""
    root = scratch_checkout("forge-chaos-")
    rng = random.Random(seed)
    total = max(start + seconds for _, start, seconds in stages)
    plan = []
    for i in range(kills):
        moment = (i + rng.random()) / kills * total
        name, start, seconds = min(stages, key=lambda s: 0 if s[1] <= moment < s[1] + s[2] else abs(s[1] - moment))
        plan.append((name, round(min(max(moment - start, 0.5), 0.9 * seconds), 2)))
    attempts, finished_before, redone = [], set(), []
    for kill_at in [*plan, None]:
        run = attempt(root, profile, kill_at)
        again = {s for s, state in run["stages"].items() if state == "completed" and s in finished_before}
        redone += sorted(again - always_run)
        finished_before |= {s for s, state in run["stages"].items() if state in ALWAYS_FINISHED}
        attempts.append({"kill_at": kill_at, **{k: run[k] for k in ("seconds", "killed", "running", "returncode")}})
        print(json.dumps(attempts[-1]), flush=True)
    return {"root": root, "attempts": attempts, "final": run, "redone": redone,
            "partial": partial_files(root / ".forge", root / "data")}


def disk_full(profile: str, size_mb: int) -> dict:
    """In a private mount namespace: the home on a ``size_mb`` tmpfs; run; grow it; run again."""
    root = scratch_checkout("forge-diskfull-")
    home = root / "home"
    home.mkdir()
    script = (f"mount -t tmpfs -o size={size_mb}m forge-full {home} && "
              f"{sys.executable} {__file__} --disk-full-inner {root} --profile {profile}")
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], capture_output=True,
                          text=True, check=False)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": done.stdout[-2000:] + done.stderr[-2000:]}


def disk_full_inner(root: Path, profile: str) -> None:
    home = root / "home"
    full = attempt(root, profile, home=home)
    partial = partial_files(home, root / "data")
    subprocess.run(["mount", "-o", "remount,size=4g", str(home)], check=True)
    after = attempt(root, profile, home=home)
    lines = [line for line in full["tail"].splitlines() if "the disk is full" in line]
    print(json.dumps({
        "failed": full["returncode"] != 0, "message": lines[-1][:400] if lines else full["tail"][-400:],
        "names_the_home": any(str(home) in line for line in lines), "stage_running": full["running"],
        "partial_files": partial, "next_run_completed": after["returncode"] == 0,
        "redone_after_space": sorted(s for s, st in after["stages"].items()
                                     if st == "completed" and full["stages"].get(s) in ALWAYS_FINISHED),
    }))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=str(REPO / "configs" / "ci.yaml"))
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--disk-mb", type=int, default=40, help="tmpfs size for the disk-full case (the CI recipe leaves ~75 MB)")
    parser.add_argument("--disk-full-inner", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.disk_full_inner:
        return disk_full_inner(args.disk_full_inner, args.profile)

    base_root = scratch_checkout("forge-chaos-base-")
    base = attempt(base_root, args.profile)
    assert base["returncode"] == 0, base["tail"]
    rerun = attempt(base_root, args.profile)
    always_run = {s for s, state in rerun["stages"].items() if state == "completed"}
    stages = timeline(base["summary"])
    print(json.dumps({"baseline_s": base["seconds"], "always_run": sorted(always_run)}), flush=True)

    result = chaos(args.profile, args.kills, args.seed, stages, always_run)
    final, chaos_root = result["final"], result["root"]
    equal = {
        "data_md5": [data_md5(base_root), data_md5(chaos_root)],
        "registered_versions_equal": registered_versions(base_root / ".forge")
        == registered_versions(chaos_root / ".forge"),
        "metrics": compare_metrics(base["metrics"], final["metrics"]),
    }
    equal["data_md5_equal"] = equal["data_md5"][0] == equal["data_md5"][1]
    report = {
        "benchmark": "chaos",
        "command": f"python bench/chaos.py --kills {args.kills} --seed {args.seed}",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "profile": Path(args.profile).name,
        "baseline_s": base["seconds"], "always_run": sorted(always_run),
        "kills": sum(a["killed"] for a in result["attempts"]),
        "killed_in": [a["running"] or a["kill_at"] for a in result["attempts"] if a["killed"]],
        "attempts": result["attempts"],
        "final_completed": final["returncode"] == 0,
        "finished_stages_redone": result["redone"],
        "partial_files_taken": result["partial"],
        "equal_to_uninterrupted": equal,
        "metric_tolerance": f"relative {TOLERANCE} for a training stage resumed from a checkpoint",
        "disk_full": disk_full(args.profile, args.disk_mb) if os.geteuid() == 0 else "skipped: needs root",
    }
    out = REPO / "bench" / "results" / "chaos.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("kills", "finished_stages_redone", "partial_files_taken",
                                             "final_completed")}))
    print(json.dumps(equal))


if __name__ == "__main__":
    main()
