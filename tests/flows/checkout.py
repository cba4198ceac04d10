"""A scratch checkout for the end-to-end tests (test_recipe.py, test_dist.py): corpora linked in, the DVC config
copied, a git repository; and `forge` run in it as a user would, with this session's Forge variables cleared."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from forge.workspace import REPO_ROOT

FORGE = str(Path(sys.executable).parent / "forge")


def make_checkout(root: Path, corpora: bool = True) -> Path:
    """``root`` as a checkout; with ``corpora=False`` the caller has put a corpora/ of its own there."""
    if corpora:
        (root / "corpora").symlink_to(REPO_ROOT / "corpora", target_is_directory=True)
    shutil.copytree(REPO_ROOT / ".dvc", root / ".dvc", ignore=shutil.ignore_patterns("tmp", "cache", "config.local"))
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"], cwd=root,
                   check=True)
    return root


def forge_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "FORGE_", "DVC_"))}
    env.update(FORGE_ROOT=str(root), FORGE_HOME=str(root / ".forge"))
    return env


def forge(root: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [FORGE, *args], env=forge_env(root), cwd=root, capture_output=True, text=True, timeout=timeout, check=False
    )


def run_status(root: Path) -> dict:
    """The last run's record (`forge status` refreshes it first: a killed run is reported crashed)."""
    out = forge(root, "status", "--json", timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads((root / ".forge" / "runs" / "latest.json").read_text())


def run_and_kill(root: Path, profile: Path, pattern: str, timeout: float = 900) -> str:
    """`forge run` in its own process group, killed (SIGKILL, launcher and ranks included) as soon as a file
    matching ``pattern`` appears under the workspace's models/ (a stage's complete trainer checkpoint, say). Returns
    the run's output; fails if the run ended or the deadline passed first."""
    log = root.parent / f"{root.name}-killed-run.log"  # beside the checkout: its git and DVC status stay clean
    # A file, not a pipe: nobody reads a pipe while waiting, and a full one blocks the run.
    with open(log, "w") as sink:
        proc = subprocess.Popen([FORGE, "run", "--profile", str(profile)], env=forge_env(root), cwd=root,
                                stdout=sink, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        models, deadline, killed = root / ".forge" / "models", time.time() + timeout, False
        while time.time() < deadline and proc.poll() is None:
            if list(models.glob(pattern)):
                killed = True
                break
            time.sleep(0.05)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    out = log.read_text()
    assert killed, f"the run never wrote {pattern}:\n{out[-4000:]}"
    return out
