"""Data versioning with DVC: ``data/`` is one tracked output (``data.dvc``) pushed to a local remote.

Prefect is the only DAG, so there are no ``dvc.yaml`` stages: a flow writes a new snapshot under ``data/`` and
one task calls :func:`version_data`. Versioning (``add`` + ``push``, once per data stage) goes through DVC's Python
API in this process; everything else runs DVC's CLI (the ``dvc`` next to this interpreter) in a subprocess. Any
failure raises :class:`DVCError` naming the command and carrying DVC's message.

    ensure_dvc(ws.root, ws.dvc_remote_url)   # once: init + remote 'local' or 's3' (verify = true)
    md5 = version_data(ws.root)              # dvc add data && dvc push → the md5 recorded in data.dvc
    data_status_clean(ws.root)               # workspace == data.dvc == remote?
    checkout_data(ws.root, md5)              # data/ back to an earlier version, from the remote

The committed ``.dvc/config`` names ``../.forge/dvc-remote``; when the home is elsewhere (``FORGE_HOME``) the
remote url goes to ``.dvc/config.local`` (git-ignored), so moving the home never edits a tracked file.

A team keeps the data in object storage: ``FORGE_DVC_REMOTE=s3://bucket/prefix`` (``Workspace.dvc_remote_url``;
``forge stack up`` gives its worker one) makes the default remote ``s3``, a dvc-s3 remote whose endpoint
(``AWS_ENDPOINT_URL``, an S3-compatible store) and credentials (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``)
go to ``.dvc/config.local`` only. ``push_data`` / ``pull_data`` are ``forge data push`` / ``pull``; with verify on,
a missing or corrupted object in the remote fails the pull and names it.
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
S3_REMOTE_NAME = "s3"
S3_SETTINGS = {"endpointurl": "AWS_ENDPOINT_URL", "access_key_id": "AWS_ACCESS_KEY_ID",
               "secret_access_key": "AWS_SECRET_ACCESS_KEY"}
TARGETS = ("data", "rl-data")


class DVCError(RuntimeError):
    """A dvc command failed; the message holds the command and dvc's stderr."""


def _dvc_beside() -> Path:
    return Path(sys.executable).parent / "dvc"


def _dvc_env() -> dict[str, str]:
    return {**os.environ, "DVC_NO_ANALYTICS": "1"}


def dvc_executable() -> str:
    beside = _dvc_beside()
    if beside.exists():
        return str(beside)
    found = shutil.which("dvc")
    if not found:
        raise DVCError(f"dvc not found next to {sys.executable} nor on PATH; install the project's venv")
    return found


def run_dvc(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([dvc_executable(), *args], cwd=root, env=_dvc_env(), capture_output=True, text=True,
                          check=False)
    if check and proc.returncode != 0:
        raise DVCError(f"`dvc {' '.join(args)}` failed in {root} (exit {proc.returncode}):\n"
                       f"{proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _add_and_push(root: Path, target: str) -> None:
    """``dvc add <target>`` then ``dvc push <target>.dvc`` through DVC's Python API, in this process: a ``dvc``
    process pays ~1.3 s of start-up and imports on 2 cores, a tenth of a tiny code-RL filter stage that versions
    its problems (bench/results/recipe_profile-tiny.json); here the first call imports DVC (~0.2 s) and each
    add + push of a small target then takes ~0.1 s. A failure raises :class:`DVCError` naming the command that
    failed; the push does not run after a failed add."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    command = f"add {target}"
    try:
        with Repo(str(root)) as repo:
            repo.scm_context.quiet = True  # no "To track the changes with git, run: ..." in the stage's log
            repo.add(str(root / target))
            command = f"push {target}.dvc"
            repo.push(targets=[str(root / f"{target}.dvc")])
    except (DvcException, OSError) as err:  # DVC's own errors, and the file system's it lets through
        cause = f"\n{err.__cause__}" if err.__cause__ else ""
        raise DVCError(f"`dvc {command}` failed in {root}:\n{type(err).__name__}: {err}{cause}") from err


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


def ensure_dvc(root: str | Path, remote: str | Path) -> None:
    """Initialise DVC in ``root`` if needed and make ``remote`` the default remote (verify on): a folder (remote
    ``local``) or an ``s3://`` URL (remote ``s3``, its endpoint and credentials from the environment)."""
    root = Path(root)
    if not str(remote).startswith("s3://"):
        Path(remote).mkdir(parents=True, exist_ok=True)
    if _configured(root, remote):
        return  # every data stage calls this: four dvc processes, ~1.6 s, to change nothing (the usual case)
    if not (root / ".dvc").is_dir():
        run_dvc(root, "init", *([] if _is_git_repo(root) else ["--no-scm"]))
    run_dvc(root, "config", "core.autostage", "false")
    run_dvc(root, "config", "core.analytics", "false")
    if str(remote).startswith("s3://"):
        _ensure_s3_remote(root, str(remote))
        return
    remote_dir = Path(remote)
    if (root / ".dvc" / "config.local").exists():  # an S3 remote named there stays, but is no longer the default
        run_dvc(root, "remote", "default", "--local", REMOTE_NAME)
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


def _configured(root: Path, remote: str | Path) -> bool:
    """Whether :func:`ensure_dvc` would change nothing: DVC's own reading of ``.dvc/config`` and ``config.local``
    (merged as DVC merges them, in this process) already has autostage and analytics off, ``remote`` as the default
    remote with verify on and, for S3, the endpoint and credentials of this environment. Any doubt (no ``.dvc``, a
    config DVC refuses) answers False, and ensure_dvc runs its commands, which name what is wrong."""
    if not (root / ".dvc" / "config").is_file():
        return False
    try:
        from dvc.config import Config

        config = Config(dvc_dir=str(root / ".dvc"))
    except Exception:  # noqa: BLE001 - DVC's ConfigError and anything its loader raises: let the CLI report it
        return False
    core = config.get("core", {})
    if core.get("autostage") is not False or core.get("analytics") is not False:
        return False
    s3 = str(remote).startswith("s3://")
    name = S3_REMOTE_NAME if s3 else REMOTE_NAME
    section = config.get("remote", {}).get(name, {})
    if core.get("remote") != name or section.get("verify") is not True or not section.get("url"):
        return False
    if s3:
        return section["url"] == str(remote) and all(
            section.get(option) == os.environ.get(env) for option, env in S3_SETTINGS.items()
        )
    return _same_place(root, section["url"], Path(remote))


def _ensure_s3_remote(root: Path, url: str) -> None:
    missing = [name for name in S3_SETTINGS.values() if not os.environ.get(name)]
    if missing:
        raise DVCError(f"the DVC remote {url} needs {', '.join(missing)} in the environment (the object store's "
                       "endpoint and credentials; `forge stack up` prints them)")
    run_dvc(root, "remote", "add", "--local", "--force", "--default", S3_REMOTE_NAME, url)
    for option, name in S3_SETTINGS.items():
        run_dvc(root, "remote", "modify", "--local", S3_REMOTE_NAME, option, os.environ[name])
    run_dvc(root, "remote", "modify", "--local", S3_REMOTE_NAME, "verify", "true")


def _tracked(root: Path, targets: tuple[str, ...] | list[str]) -> list[str]:
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        raise DVCError(f"{', '.join(unknown)}: not a data target (one of {', '.join(TARGETS)})")
    found = [f"{t}.dvc" for t in targets if (root / f"{t}.dvc").exists()]
    if not found:
        raise DVCError(f"{root}: no {' or '.join(f'{t}.dvc' for t in targets)}; a recipe run versions the data first")
    return found


def push_data(root: str | Path, targets: tuple[str, ...] | list[str] = TARGETS) -> str:
    """``dvc push`` of the versions ``<target>.dvc`` name; returns dvc's summary line."""
    root = Path(root)
    return _last_line(run_dvc(root, "push", *_tracked(root, targets)))


def pull_data(root: str | Path, targets: tuple[str, ...] | list[str] = TARGETS) -> str:
    """``dvc pull`` of the versions ``<target>.dvc`` name into the workspace; a missing or corrupted remote object
    is a :class:`DVCError` naming it (verify is on), and the workspace keeps what it had."""
    root = Path(root)
    dvc_files = _tracked(root, targets)
    try:
        return _last_line(run_dvc(root, "pull", *dvc_files))
    except DVCError as err:
        bad = [item for f in dvc_files for item in _not_in_cache(root, f.removesuffix(".dvc"))]
        if not bad:
            raise
        raise DVCError(f"{err}\nnot restored ({len(bad)}: the remote's object is missing or its bytes do not hash "
                       f"to its name): " + "; ".join(bad[:10]) + (" …" if len(bad) > 10 else "")) from None


def _not_in_cache(root: Path, target: str) -> list[str]:
    """The files of ``<target>.dvc``'s version whose objects are not in the local cache (after a pull: the ones
    the remote lacks or holds corrupted), as ``<target>/<path> (md5 <object>)``."""
    objects = root / ".dvc" / "cache" / "files" / "md5"
    md5 = read_data_md5(root, target)
    listing = objects / md5[:2] / md5[2:]
    if not listing.is_file():
        return [f"{target}/ (version {md5}: nothing of it reached the cache)"]
    return [f"{target}/{entry['relpath']} (md5 {entry['md5']})" for entry in json.loads(listing.read_text())
            if not (objects / entry["md5"][:2] / entry["md5"][2:]).is_file()]


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def read_data_md5(root: str | Path, target: str = "data") -> str:
    """The md5 (directory hash) recorded in ``<target>.dvc``."""
    dvc_file = Path(root) / f"{target}.dvc"
    if not dvc_file.exists():
        raise DVCError(f"{dvc_file}: not found; run version_data first")
    md5 = _outs_md5(dvc_file.read_text())
    if md5 is None:
        raise DVCError(f"{dvc_file}: no outs[0].md5 entry")
    return md5


def committed_dvc_text(root: str | Path, target: str = "data") -> str | None:
    """``<target>.dvc`` as the checkout's last commit holds it (None outside git or when none is committed)."""
    proc = subprocess.run(["git", "show", f"HEAD:{target}.dvc"], cwd=root, capture_output=True, text=True,
                          check=False)
    return proc.stdout if proc.returncode == 0 else None


def committed_md5(root: str | Path, target: str = "data") -> str | None:
    """The md5 ``<target>.dvc`` names in the checkout's last commit (None outside git or when none is committed)."""
    text = committed_dvc_text(root, target)
    return _outs_md5(text) if text is not None else None


def _outs_md5(dvc_text: str) -> str | None:
    """``outs[0].md5`` of a ``.dvc`` file's text, None when it has none."""
    outs = (yaml.safe_load(dvc_text) or {}).get("outs") or [{}]
    return outs[0].get("md5")


def cpu_kind() -> str:
    """The machine, torch's CPU kernel width, the processor's generation and its bf16 matrix unit, e.g. ``x86_64
    AVX512 GenuineIntel 6/85`` or ``x86_64 AVX512 GenuineIntel 6/207 AMX``: model-written data (the §2.1.1
    refinement rows, the code-RL filter's verdicts) differs in its last bits between kinds (README, "What `make run`
    does"). The width alone is not enough: two AVX-512 hosts of different generations built different tiny data from
    the same commit (2026-11-26), since MKL / oneDNN pick their kernels by the core, not only by the instruction set;
    and two hosts of one generation (Intel 6/207, 2026-11-29), one exposing AMX and one only AVX-512-BF16, train the
    tiny profile in bf16 (``runtime.bf16: auto``) with different kernels and read different losses."""
    import platform

    import torch

    from forge.hardware import cpu_bf16_unit, cpu_generation

    kind = [platform.machine(), torch.backends.cpu.get_cpu_capability(), cpu_generation(), cpu_bf16_unit()]
    return " ".join(k for k in kind if k)


# CPU kinds measured to build the tiny data to the same md5 from one commit, so a data.dvc built on one is checked on
# the others: AMD Zen 4 and Zen 5, both training in bf16 on AVX-512-BF16 (fd6d6c82… at 7aa0c8d on a 25/17 and at
# f1cbb80 on a 26/2, and again on a 25/17 at 7ab0ba9 and e8cbb2d; docs/measurements.md). Intel kinds stay apart:
# two generations with the same instruction sets built different data (cpu_kind above).
SAME_BITS = (frozenset({"x86_64 AVX512 AuthenticAMD 25/17 AVX512-BF16", "x86_64 AVX512 AuthenticAMD 26/2 AVX512-BF16"}),)


def same_bits(kind: str, other: str) -> bool:
    """Whether data built on ``other`` (a :func:`cpu_kind`) is what ``kind`` builds: the same kind, or two kinds
    measured to build the same bytes (``SAME_BITS``)."""
    return kind == other or any({kind, other} <= group for group in SAME_BITS)


def built_on(dvc_text: str) -> str | None:
    """``meta.built_on`` of a ``.dvc`` file's text: the :func:`cpu_kind` that built the version (None: not recorded)."""
    return ((yaml.safe_load(dvc_text) or {}).get("meta") or {}).get("built_on")


def version_data(root: str | Path, target: str = "data") -> str:
    """``dvc add <target>`` then ``dvc push``; returns the md5 now in ``<target>.dvc``, whose ``meta.built_on`` then
    names this machine's :func:`cpu_kind` (DVC keeps ``meta`` and leaves it out of the md5)."""
    root = Path(root)
    if not (root / target).exists():
        raise DVCError(f"{root / target}: nothing to version")
    _add_and_push(root, target)
    dvc_file = root / f"{target}.dvc"
    text, kind = dvc_file.read_text(), cpu_kind()
    if built_on(text) != kind:
        spec = yaml.safe_load(text)
        spec["meta"] = {**(spec.get("meta") or {}), "built_on": kind}
        atomic_write_text(dvc_file, yaml.safe_dump(spec, sort_keys=False))
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
