"""Benchmark: deep-search synthesis in one process against the same synthesis fanned out on a two-node Ray cluster.

    .venv/bin/python bench/fanout.py [--profile tiny]          # both, side by side → bench/results/fanout-<p>.json
    .venv/bin/python bench/fanout.py synthesize --profile tiny [--ray HOST:PORT]   # one run, in this checkout
    .venv/bin/python bench/fanout.py judge --profile tiny [--ray HOST:PORT]        # the code judge, one run
    .venv/bin/python bench/fanout.py both --profile tiny [--ray HOST:PORT]         # synthesis then the judge, one process

A run is the data flow's first phase as the recipe runs it: the pools stage, then the ``synthesize-search`` flow
(one task per head-entity shard, the merge), on the cluster when ``--ray`` names one (forge/fanout.py). Each run has
a scratch checkout and home of its own, so neither reads the other's cache; the result is the md5 of the merged
``data/search/qa.jsonl`` and ``trajectories.jsonl`` and the wall time. The code judge runs as code RL's filter
runs it (forge/code/data.py, inside a task of a flow on the cluster): every code-RL problem of the profile with its
reference (twice, one with a comment) and two wrong answers, in ``code-judge-batch`` tasks. The cluster is the one
``forge stack up --ray`` starts (forge/stack.py: head and worker node, one CPU each), started here and stopped at
the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scratch import REPO, forge_env, scratch_checkout


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def synthesize(profile: str, ray_address: str | None) -> dict:
    """In this process (FORGE_ROOT / FORGE_HOME from the environment): pools, then synthesis; md5s and seconds."""
    from forge.workspace import configure_environment

    ws = configure_environment()
    from prefect import flow

    from flows._stages import RecipeRun
    from flows.search import synthesize_search
    from forge.config import load_profile
    from forge.fanout import on_cluster
    from registry.tracking import PROFILE_TAG, StageContext
    from tasks.data import build_pools_task, digest_corpora

    cfg = load_profile(profile, {"cluster.ray_address": ray_address} if ray_address else None)

    @flow(name="synthesis-probe")
    def probe() -> None:
        run = RecipeRun(StageContext(tags={PROFILE_TAG: cfg.profile}))
        pools = run.stage("pools", build_pools_task, cfg=cfg.pools, corpora=digest_corpora())
        started = time.time()
        on_cluster(synthesize_search, cfg.cluster)(cfg.deep_search, run, pools=pools)
        return time.time() - started

    seconds = probe()
    out = ws.data / "search"
    return {"ray_address": ray_address, "seconds": round(seconds, 1), "qa_md5": md5(out / "qa.jsonl"),
            "trajectories_md5": md5(out / "trajectories.jsonl"),
            "qas": sum(1 for _ in (out / "qa.jsonl").open())}


def judge(profile: str, ray_address: str | None) -> dict:
    """The code judge over the profile's code-RL problems in this process (on the cluster when named): each
    verdict's (problem, pass rate, format) and the seconds."""
    from forge.workspace import configure_environment

    configure_environment()
    from prefect import flow, task

    from forge.code.data import judge_candidates
    from forge.config import load_profile
    from forge.fanout import on_cluster
    from tasks.code import rl_problems

    cfg = load_profile(profile, {"cluster.ray_address": ray_address} if ray_address else None)
    problems = rl_problems(cfg.code_rl)
    completions = {p.id: [f"```python\n{p.reference}\n```", f"```python\n# the reference\n{p.reference}\n```",
                          "```python\nprint(0)\n```", "```python\nprint(1)\n```"] for p in problems}

    @task(name="code-rl-filter-probe")
    def judged() -> list:
        out = judge_candidates(problems, completions, measure_time=False)
        return [[c.problem_id, c.pass_rate, c.format_ok] for cands in out.values() for c in cands]

    @flow(name="judge-probe")
    def probe() -> tuple[list, float]:
        started = time.time()
        return judged(), time.time() - started

    verdicts, seconds = on_cluster(probe, cfg.cluster)()
    return {"ray_address": ray_address, "seconds": round(seconds, 1), "verdicts": verdicts}


def both(profile: str, ray_address: str | None) -> dict:
    """Synthesis, then the judge, in one process (each subprocess pays for its imports and Prefect's start)."""
    return {"synthesize": synthesize(profile, ray_address), "judge": judge(profile, ray_address)}


def run_in_scratch(profile: str, ray_address: str | None, base: Path, command: str = "both") -> dict:
    """One ``command`` run in a fresh scratch checkout and home, as a subprocess; its JSON result."""
    root = scratch_checkout(root=base / command / ("ray" if ray_address else "in-process"))
    cmd = [sys.executable, str(Path(__file__)), command, "--profile", profile]
    if ray_address:
        cmd += ["--ray", ray_address]
    env = {**forge_env(root), "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cluster(home: Path):
    """The stack's Ray services (no PostgreSQL, object store or servers: only what fan-out needs)."""
    from forge.stack import PORTS, StackConfig

    return StackConfig(home=home, root=REPO, database_url="", db_prefix="", secrets={}, ports=PORTS, ray=True,
                       ray_port=free_port())


def task_workers(cluster, task_name: str) -> int:
    """How many Ray worker processes ran a Prefect task ``task_name``: the head's log names the session, whose
    worker logs carry Ray's ``:task_name:`` line for each task they ran."""
    head_log = (cluster.dir / "ray-head.log").read_text(errors="replace")
    session = Path(re.findall(r"(/\S+/session_[^/\s]+)/logs", head_log)[-1])
    return sum(f":task_name:{task_name}" in log.read_text(errors="replace")
               for log in (session / "logs").glob("worker-*.out"))


def compare(profile: str, base: Path) -> dict:
    """In-process, then on a fresh two-node Ray cluster; both results, how many Ray workers ran a shard and what
    of the cluster still runs after it is stopped."""
    from forge.stack import live_members, ray_services, running_pid, start, stop

    here = run_in_scratch(profile, None, base)
    in_process, judge_here = here["synthesize"], here["judge"]
    cluster = ray_cluster(base / "stack-home")
    cluster.dir.mkdir(parents=True, exist_ok=True)
    nodes = ray_services(cluster)
    started = time.time()
    try:
        groups = [start(cluster, service) for service in nodes]
        cluster_seconds = time.time() - started
        ray = run_in_scratch(profile, cluster.ray_address, base)
        on_ray, judge_ray = ray["synthesize"], ray["judge"]
        workers = {name: task_workers(cluster, name) for name in ("search-shard", "code-judge-batch")}
    finally:
        stop(cluster, only=nodes)
    return {"in_process": in_process, "ray": on_ray, "cluster_start_seconds": round(cluster_seconds, 1),
            "ray_workers_running_a_shard": workers["search-shard"],
            "judge": {"verdicts": len(judge_here["verdicts"]), "passed": sum(v[1] == 1.0 for v in judge_here["verdicts"]),
                      "in_process_seconds": judge_here["seconds"], "ray_seconds": judge_ray["seconds"],
                      "same_verdicts": judge_here["verdicts"] == judge_ray["verdicts"],
                      "ray_workers_running_a_batch": workers["code-judge-batch"]},
            "left_running": [pid for group in groups for pid in live_members(group)],
            "nodes_recorded": [s.name for s in nodes if running_pid(cluster, s.name)],
            "same_qa_file": in_process["qa_md5"] == on_ray["qa_md5"],
            "same_trajectories_file": in_process["trajectories_md5"] == on_ray["trajectories_md5"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", default="compare", choices=["compare", "both", "synthesize", "judge"])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--ray", default=None, help="HOST:PORT of a Ray cluster (both, synthesize, judge)")
    args = parser.parse_args()
    one_run = {"both": both, "synthesize": synthesize, "judge": judge}.get(args.command)
    if one_run is not None:
        print(json.dumps(one_run(args.profile, args.ray)))
        return
    with tempfile.TemporaryDirectory(prefix="forge-fanout-") as tmp:
        result = compare(args.profile, Path(tmp))
    result.update(profile=args.profile, cpus=os.cpu_count(), machine=platform.machine(),
                  date=time.strftime("%Y-%m-%d"))
    out = REPO / "bench" / "results" / f"fanout-{args.profile}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
