"""The test suite under load: ``make test`` several times in a row with CPU-bound processes running beside it.

    .venv/bin/python bench/test_under_load.py [--rounds 3] [--busy 2]

Each busy process spins one core (a pure-Python loop) for the whole bench; the suite must pass every round. Writes
bench/results/test_under_load.json: per round the exit status, wall time, pytest's summary line and the tests it
names as failed or errored (a failing round's whole log goes to the temp dir, its path in the round's record), and
the quiet time of one round for comparison when ``--quiet-round`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

from load import spinning

REPO = Path(__file__).resolve().parent.parent


def make_test() -> dict:
    started = time.time()
    done = subprocess.run(["make", "test"], cwd=REPO, capture_output=True, text=True, check=False)
    out = done.stdout.splitlines()
    lines = [line for line in out if " passed" in line or " failed" in line]
    # pytest's short summary names every test that failed or errored, with the first line of why: keep them, and
    # the whole log of a failing round, so a failure under load can be read after the bench (it may not recur).
    failing = [line for line in out if line.startswith(("FAILED ", "ERROR "))]
    log = None
    if done.returncode:
        log = Path(tempfile.gettempdir()) / f"test_under_load-{int(started)}.log"
        log.write_text(done.stdout + done.stderr)
    return {"returncode": done.returncode, "seconds": round(time.time() - started, 1),
            "summary": lines[-1] if lines else done.stdout[-500:] + done.stderr[-500:], "failing": failing,
            "log": str(log) if log else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=int, default=2)
    parser.add_argument("--quiet-round", action="store_true", help="first one round with nothing beside it")
    args = parser.parse_args()
    quiet = make_test() if args.quiet_round else None
    rounds = []
    with spinning(args.busy):
        for i in range(args.rounds):
            rounds.append(make_test())
            print(json.dumps({"round": i + 1, **rounds[-1]}), flush=True)
    report = {"benchmark": "test_under_load", "command": f"python bench/test_under_load.py --rounds {args.rounds} "
              f"--busy {args.busy}" + (" --quiet-round" if args.quiet_round else ""),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "busy_processes": args.busy, "quiet": quiet, "rounds": rounds,
              "all_passed": all(r["returncode"] == 0 for r in rounds)}
    (REPO / "bench" / "results" / "test_under_load.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({"all_passed": report["all_passed"], "seconds": [r["seconds"] for r in rounds]}))


if __name__ == "__main__":
    main()
