"""A scratch checkout for benches that run the whole recipe: corpora linked, DVC's config copied, a git repo, and
the environment that points Forge at it (no PREFECT_/MLFLOW_/FORGE_/DVC_ settings of the caller leak in)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FORGE = str(Path(sys.executable).parent / "forge")


def scratch_checkout(prefix: str = "forge-bench-", root: Path | None = None) -> Path:
    root = root or Path(tempfile.mkdtemp(prefix=prefix))
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpora").symlink_to(REPO / "corpora", target_is_directory=True)
    shutil.copytree(REPO / ".dvc", root / ".dvc", ignore=shutil.ignore_patterns("tmp", "cache", "config.local"))
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def forge_env(root: Path, home: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "FORGE_", "DVC_"))}
    env.update(FORGE_ROOT=str(root), FORGE_HOME=str(home or root / ".forge"))
    return env
