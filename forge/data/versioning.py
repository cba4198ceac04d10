"""Data versioning with DVC: ``data/`` is one tracked output (``data.dvc``) pushed to a local remote.

Prefect is the only DAG, so there are no ``dvc.yaml`` stages: a flow writes a new snapshot under ``data/`` and
one task calls :func:`version_data`. DVC runs as its CLI (the ``dvc`` next to this interpreter) in a
subprocess; any failure raises :class:`DVCError` carrying dvc's stderr.

    ensure_dvc(ws.root, ws.dvc_remote)       # once: init + remote 'local' (verify = true)
    md5 = version_data(ws.root)              # dvc add data && dvc push → the md5 recorded in data.dvc
    data_status_clean(ws.root)               # workspace == data.dvc == remote?
    checkout_data(ws.root, md5)              # data/ back to an earlier version, from the remote

The committed ``.dvc/config`` names ``../.forge/dvc-remote``; when the home is elsewhere (``FORGE_HOME``) the
remote url goes to ``.dvc/config.local`` (git-ignored), so moving the home never edits a tracked file.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from forge.atomic import atomic_write_text

REMOTE_NAME = "local"


class DVCError(RuntimeError):
    """A dvc command failed; the message holds the command and dvc's stderr."""


def dvc_executable() -> str:
    beside = Path(sys.executable).parent / "dvc"
    if beside.exists():
        return str(beside)
    found = shutil.which("dvc")
    if not found:
        raise DVCError(f"dvc not found next to {sys.executable} nor on PATH; install the project's venv")
    return found


def run_dvc(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    proc = subprocess.run([dvc_executable(), *args], cwd=root, env=env, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise DVCError(f"`dvc {' '.join(args)}` failed in {root} (exit {proc.returncode}):\n"
                       f"{proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _is_git_repo(root: Path) -> bool:
    proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True,
                          check=False)
    return proc.returncode == 0 and Path(proc.stdout.strip()).resolve() == root.resolve()


def _remote_url(config_file: Path) -> str | None:
    if not config_file.exists():
        return None
    parser = configparser.ConfigParser()
    parser.read(config_file)
    section = f"'remote \"{REMOTE_NAME}\"'"
    for name in parser.sections():
        if name.replace(" ", "") in (section.replace(" ", ""), f'remote"{REMOTE_NAME}"'):
            return parser[name].get("url")
    return None


def _same_place(root: Path, url: str, remote_dir: Path) -> bool:
    # Relative urls in .dvc/config are relative to the .dvc/ directory.
    path = Path(url) if os.path.isabs(url) else (root / ".dvc" / url)
    return path.resolve() == Path(remote_dir).resolve()


def ensure_dvc(root: str | Path, remote_dir: str | Path) -> None:
    """Initialise DVC in ``root`` if needed and make ``remote_dir`` the default remote ``local`` (verify on)."""
    root, remote_dir = Path(root), Path(remote_dir)
    remote_dir.mkdir(parents=True, exist_ok=True)
    if not (root / ".dvc").is_dir():
        run_dvc(root, "init", *([] if _is_git_repo(root) else ["--no-scm"]))
    run_dvc(root, "config", "core.autostage", "false")
    run_dvc(root, "config", "core.analytics", "false")
    committed = _remote_url(root / ".dvc" / "config")
    if committed is not None and _same_place(root, committed, remote_dir):
        level: list[str] = []
        run_dvc(root, "remote", "default", REMOTE_NAME)
    elif committed is not None:
        level = ["--local"]  # keep the tracked config as is; this machine's home lives elsewhere
        run_dvc(root, "remote", "add", "--local", "--force", "--default", REMOTE_NAME, str(remote_dir.resolve()))
    else:
        level = []
        run_dvc(root, "remote", "add", "--force", "--default", REMOTE_NAME, str(remote_dir.resolve()))
    # Without verify a corrupted remote object is pulled silently and `dvc status` still says clean (docs/stack.md).
    run_dvc(root, "remote", "modify", *level, REMOTE_NAME, "verify", "true")


def read_data_md5(root: str | Path, target: str = "data") -> str:
    """The md5 (directory hash) recorded in ``<target>.dvc``."""
    dvc_file = Path(root) / f"{target}.dvc"
    if not dvc_file.exists():
        raise DVCError(f"{dvc_file}: not found; run version_data first")
    outs = (yaml.safe_load(dvc_file.read_text()) or {}).get("outs") or []
    if not outs or "md5" not in outs[0]:
        raise DVCError(f"{dvc_file}: no outs[0].md5 entry")
    return outs[0]["md5"]


def version_data(root: str | Path, target: str = "data") -> str:
    """``dvc add <target>`` then ``dvc push``; returns the md5 now in ``<target>.dvc``."""
    root = Path(root)
    if not (root / target).exists():
        raise DVCError(f"{root / target}: nothing to version")
    run_dvc(root, "add", target)
    run_dvc(root, "push", f"{target}.dvc")
    return read_data_md5(root, target)


def data_status_clean(root: str | Path, target: str = "data") -> bool:
    """True when the workspace matches ``<target>.dvc`` and the remote holds every object it names."""
    root = Path(root)
    local = run_dvc(root, "status", "--json", f"{target}.dvc")
    cloud = run_dvc(root, "status", "--cloud", "--json", f"{target}.dvc")
    return not json.loads(local.stdout or "{}") and not json.loads(cloud.stdout or "{}")


def _md5(version: str) -> str:
    md5 = version.strip().removesuffix(".dir")
    if len(md5) != 32 or any(c not in "0123456789abcdef" for c in md5):
        raise DVCError(f"{version!r}: not a data version (DVC's md5 of the directory: 32 hex digits, then .dir)")
    return f"{md5}.dir"


def checkout_data(root: str | Path, version: str, target: str = "data") -> str | None:
    """Make ``<target>/`` the version ``version`` (DVC's md5 of the directory), pulled from the remote.

    What ``<target>/`` held first is versioned and pushed (so it is never lost: its md5 is returned, None when it
    had no changes), then ``<target>.dvc`` names ``version`` and ``dvc pull`` brings it. A version the remote does
    not hold, or a corrupted object (verify is on), is a :class:`DVCError` and leaves ``<target>.dvc`` as it was.
    """
    root = Path(root)
    wanted = _md5(version)
    dvc_file = root / f"{target}.dvc"
    kept = None
    if (root / target).exists() and (not dvc_file.exists() or not data_status_clean(root, target)):
        kept = version_data(root, target)
    before = dvc_file.read_text() if dvc_file.exists() else None
    if before is not None and read_data_md5(root, target) == wanted and data_status_clean(root, target):
        return kept
    atomic_write_text(dvc_file, yaml.safe_dump({"outs": [{"md5": wanted, "path": target, "hash": "md5"}]},
                                               sort_keys=False))
    try:
        run_dvc(root, "pull", "--force", f"{target}.dvc")
    except DVCError as err:
        if before is None:
            dvc_file.unlink()
        else:  # a failed pull may have cleared the folder: put back the version it held (versioned above)
            atomic_write_text(dvc_file, before)
            run_dvc(root, "checkout", "--force", f"{target}.dvc")
        raise DVCError(f"data version {wanted} could not be restored from the DVC remote: {err}") from None
    return kept
