"""Where Forge reads and writes: the checkout (corpora/, data/, data.dvc) and its home (.forge/).

The home holds every embedded service's state: Prefect's database and persisted task results, MLflow's
SQLite store and artifacts, the DVC local remote, checkpoints. ``FORGE_HOME`` moves it;
``FORGE_ROOT`` points at another checkout (tests use a scratch copy so they never touch the real data/).

Call :func:`configure_environment` before importing prefect or mlflow: both read their settings at import.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# Where `forge ui` serves the Prefect and MLflow UIs over this home's stores (and so where links point by default).
PREFECT_UI_PORT, MLFLOW_UI_PORT = 4200, 5000

# Nothing reaches a model hub or phones home (docs/stack.md, "Offline and tidy").
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "DO_NOT_TRACK": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DVC_NO_ANALYTICS": "1",
    "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false",
    "TOKENIZERS_PARALLELISM": "false",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    # Progress is shown by Forge's own log lines; per-file download/shard bars only add noise.
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
}


@dataclass(frozen=True)
class Workspace:
    root: Path
    home: Path

    @classmethod
    def from_env(cls) -> Workspace:
        root = Path(os.environ.get("FORGE_ROOT", REPO_ROOT)).resolve()
        home = Path(os.environ.get("FORGE_HOME", root / ".forge")).resolve()
        return cls(root=root, home=home)

    # --- checkout ---
    @property
    def corpora(self) -> Path:
        return self.root / "corpora"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def rl_data(self) -> Path:
        """Problem sets filtered on-policy for RL: DVC-versioned apart from ``data/`` (``rl-data.dvc``), because
        they depend on the policy and would otherwise change the SFT data's md5 on every run."""
        return self.root / "rl-data"

    @property
    def pools(self) -> Path:
        return self.data / "pools"

    @property
    def mixes(self) -> Path:
        return self.data / "mixes"

    # --- home ---
    @property
    def models(self) -> Path:
        return self.home / "models"

    @property
    def quarantine(self) -> Path:
        return self.home / "quarantine"

    @property
    def written_by(self) -> Path:
        """Which cache keys wrote each stage output path (flows/_stages.py: a stale cache hit is recomputed)."""
        return self.home / "written-by"

    @property
    def dvc_remote(self) -> Path:
        return self.home / "dvc-remote"

    @property
    def dvc_remote_url(self) -> str:
        """Where data versions go: ``FORGE_DVC_REMOTE`` (an ``s3://`` URL a team shares) or the home's folder."""
        return os.environ.get("FORGE_DVC_REMOTE") or str(self.dvc_remote)

    @property
    def mlflow_dir(self) -> Path:
        return self.home / "mlflow"

    @property
    def mlflow_uri(self) -> str:
        return f"sqlite:///{self.mlflow_dir / 'mlflow.db'}"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.mlflow_dir / "artifacts"

    @property
    def prefect_home(self) -> Path:
        return self.home / "prefect"

    def ensure(self) -> Workspace:
        for d in (self.home, self.models, self.quarantine, self.mlflow_dir, self.mlflow_artifacts, self.prefect_home):
            d.mkdir(parents=True, exist_ok=True)
        return self


class DiskFullError(RuntimeError):
    """A stage ran out of disk; the message names the folders and the space left on them."""


DISK_FULL_MARKERS = ("No space left on device", "database or disk is full", "Disk quota exceeded")


def disk_full(err: BaseException) -> bool:
    """Whether ``err``, or anything in its chain (SQLAlchemy and MLflow wrap the OSError), says the disk is full."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(marker in str(err) for marker in DISK_FULL_MARKERS):
            return True
        err = err.__cause__ or err.__context__
    return False


def disk_full_message(ws: Workspace) -> str:
    """Which of the workspace's folders is out of space, and how much each has left."""
    parts = []
    for label, path in (("home", ws.home), ("checkout", ws.root)):
        try:
            usage = shutil.disk_usage(path)
        except OSError:
            continue
        parts.append(f"{label} {path}: {usage.free / 2**20:.0f} MB free of {usage.total / 2**20:.0f} MB")
    return (f"the disk is full ({'; '.join(parts)}). Free space (or point FORGE_HOME at a larger disk) and "
            "run again: finished stages are kept and the interrupted one starts over.")


_HELD: set[Path] = set()  # run locks this process holds


class CheckoutBusyError(RuntimeError):
    """Another recipe run holds this checkout's data/; the message names it."""


@contextmanager
def embedded_flow_settings() -> Iterator[None]:
    """Prefect settings for flows run against the embedded server (no PREFECT_API_URL): no flow-run heartbeats.

    A heartbeat tells a server that watches that a run's process is alive (the team stack sets them every 30 s and
    crashes a run whose heartbeats stop: forge/stack.py). The embedded server lives and dies with this process, so
    nothing watches; and Prefect 3.7 sends them by default (every 180 s) from a thread that sleeps in 1 s steps,
    which every flow run's end waits out: up to 1 s for each flow and subflow (a flow with two subflows took 3.06 s
    with them, 0.29 s without; the ci recipe's seven flows ~2.4 s, docs/stack.md). A frequency the user set is kept."""
    if os.environ.get("PREFECT_API_URL") or os.environ.get("PREFECT_FLOWS_HEARTBEAT_FREQUENCY"):
        yield
        return
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


@contextmanager
def run_lock(ws: Workspace, profile: str) -> Iterator[None]:
    """Hold the checkout's data/ for one recipe run: a second run in the same checkout (another profile would
    rewrite data/ under the first) is refused at once, naming the run that holds it. The lock is the kernel's
    (flock), so a killed run releases it with its process. Re-entrant within a process: ``forge run`` takes it
    before the flow starts (a refusal is then one line, not a failed flow run) and the flow, which takes it too for
    runs from a deployment, finds it held already."""
    path = ws.root / ".forge-run.lock"
    if path in _HELD:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 512).decode(errors="replace").strip() or "a process that wrote nothing"
        os.close(fd)
        raise CheckoutBusyError(
            f"{ws.root}: another recipe run is using this checkout's data/ ({holder}); wait for it to finish, or "
            "run from another checkout (FORGE_ROOT)") from None
    _HELD.add(path)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, profile {profile}, since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
        yield
    finally:
        _HELD.discard(path)
        os.close(fd)  # closing the descriptor releases the lock


@contextmanager
def hub_online() -> Iterator[None]:
    """huggingface_hub online for the calls inside. Forge sets ``HF_HUB_OFFLINE=1`` for the whole process
    (:func:`configure_environment`); a profile that allows the hub (``base.allow_hub_download``,
    ``pools.allow_hub_download``) lifts it for its own downloads only."""
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


def _owner_only_site_cache(site_cache: Path) -> None:
    """DVC makes its site cache's ``repo/`` world-writable (``os.makedirs(mode=0o777)`` under a zero umask: it
    expects one cache for every user of a machine, /var/tmp/dvc). In a Forge home it is one user's, and there
    another user could rename a project's entry away and put in its place a state database that vouches for changed
    data files. Made here first for the owner alone, DVC's ``makedirs(exist_ok=True)`` leaves it so; one an earlier
    run left world-writable is closed."""
    repos = site_cache / "repo"
    repos.mkdir(mode=0o700, parents=True, exist_ok=True)
    for path in (site_cache, repos):
        if path.stat().st_mode & 0o022:
            path.chmod(0o700)


# Where configure_environment points Prefect, MLflow and DVC in a home, in the order it sets them (the registry
# follows the tracking URI as set, the user's included). Prefect derives the memo store and profiles from
# PREFECT_HOME only sometimes (its server side falls back to ~/.prefect), so they are set too.
HOME_LOCATIONS: dict[str, Callable[[Workspace], str]] = {
    "PREFECT_HOME": lambda ws: str(ws.prefect_home),
    "PREFECT_API_DATABASE_CONNECTION_URL": lambda ws: f"sqlite+aiosqlite:///{ws.prefect_home / 'prefect.db'}",
    "PREFECT_LOCAL_STORAGE_PATH": lambda ws: str(ws.prefect_home / "results"),
    "PREFECT_MEMO_STORE_PATH": lambda ws: str(ws.prefect_home / "memo_store.toml"),
    "PREFECT_PROFILES_PATH": lambda ws: str(ws.prefect_home / "profiles.toml"),
    "MLFLOW_TRACKING_URI": lambda ws: ws.mlflow_uri,
    "MLFLOW_REGISTRY_URI": lambda ws: os.environ["MLFLOW_TRACKING_URI"],
    "DVC_SITE_CACHE_DIR": lambda ws: str(ws.home / "dvc-site-cache"),
}
# A process that starts over in another home drops these first, since configure_environment keeps values already
# set (tests/conftest.py).
HOME_DERIVED_ENV = tuple(HOME_LOCATIONS)


def configure_environment(ws: Workspace | None = None) -> Workspace:
    """Point Prefect, MLflow and DVC at the workspace home and switch everything offline.

    Existing values win for the offline switches; the service locations are always the workspace's unless
    the user set them explicitly (a team deployment sets PREFECT_API_URL / MLFLOW_TRACKING_URI).
    """
    ws = (ws or Workspace.from_env()).ensure()
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    for key, location in HOME_LOCATIONS.items():
        os.environ.setdefault(key, location(ws))
    if os.environ["DVC_SITE_CACHE_DIR"] == HOME_LOCATIONS["DVC_SITE_CACHE_DIR"](ws):
        _owner_only_site_cache(Path(os.environ["DVC_SITE_CACHE_DIR"]))
    os.environ.setdefault("PREFECT_RESULTS_PERSIST_BY_DEFAULT", "true")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # Prefect's own chatter; Forge's lines reach the run
    # Forge's logger sends its lines to the flow run (flows/links.py); lines from threads without a run context
    # (sandbox pools, generation workers) stay on the console instead of warning.
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    # The embedded server needs ~21 s to start on a loaded 2-core machine, past Prefect's 20 s default.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    # One tqdm bar per artifact fetched: `forge eval matrix` fetches a dozen, and the bars bury its verdict.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("FORGE_HOME", str(ws.home))
    os.environ.setdefault("FORGE_ROOT", str(ws.root))
    return ws
