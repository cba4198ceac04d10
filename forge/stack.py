"""A team's stack, started on this machine as real processes: a Prefect server on PostgreSQL with a process work
pool and its worker, an MLflow tracking server (PostgreSQL backend store, artifacts in an S3-compatible object
store, served through the tracking server), the object store, and the review dashboard on PostgreSQL.

    forge stack up       # starts whatever is not running, waits until each answers, prints the URLs
    forge stack up --ray # and a two-node Ray cluster (a head and a worker node, one CPU each) for fan-out
    forge stack status   # each service: running or not, its URL, its log
    forge stack down     # stops exactly what `up` started (its PID files), whole process groups

Everything binds 127.0.0.1 and keeps its PID file and log under ``<home>/stack/``. Secrets come from the
environment or from a ``.env`` file in the checkout (``KEY=VALUE`` lines; the environment wins), never from a
default: ``up`` refuses to start while one is missing (:data:`REQUIRED`). The object store is moto's S3 server:
no S3-compatible server is packaged for Debian here or published on PyPI (MinIO ships only binaries), so this
stack uses the one that is; a team points ``FORGE_STACK_S3_URL`` at its own store and the S3 process is not
started. docs/architecture.md, "Team deployment", has the layout and what each process gets.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from forge.workspace import MLFLOW_UI_PORT, PREFECT_UI_PORT, Workspace

REQUIRED = {
    "FORGE_STACK_DATABASE_URL": "the PostgreSQL server, as postgresql://USER[:PASSWORD]@HOST:PORT (no database: "
                                "the stack makes its own)",
    "AWS_ACCESS_KEY_ID": "the object store's access key",
    "AWS_SECRET_ACCESS_KEY": "the object store's secret key",
}
WORK_POOL = "forge-process"
BUCKET = "forge"
# Task results (Prefect's cache records and values) live in a bucket, so any worker resumes any run's stages. A
# bucket of their own, its root the basepath: a RemoteFileSystem block that reaches a Ray worker unsaved resolves a
# key against a basepath with a path twice (s3://b/p/p/<key>), and those results were never found again.
RESULTS_BLOCK = "forge-results"
RESULTS_BUCKET = "forge-results"
RESULTS_PATH = f"s3://{RESULTS_BUCKET}"
# A flow run whose process dies (a killed worker) stops sending heartbeats; the automation marks it Crashed.
HEARTBEAT_S = 30
ZOMBIE_AUTOMATION = "forge: crash flow runs without heartbeats"
WORKER_SETTINGS = {"PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK": f"remote-file-system/{RESULTS_BLOCK}",
                   "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S)}
PORTS = {"s3": 9000, "prefect": PREFECT_UI_PORT, "mlflow": MLFLOW_UI_PORT, "dashboard": 8501}
RAY_PORT = 6385  # Ray's own default, 6379, is Redis's
RAY_SERVICES = ("ray-head", "ray-node")
START_TIMEOUT_S = 180.0  # the Prefect server takes ~20 s on a loaded 2-core machine, migrations ~60 s the first time
KILL_WAIT_S = 10.0  # after SIGKILL, how long stop waits for the group to be gone


class StackError(RuntimeError):
    """The stack cannot start or stop as asked; the message says what is missing or which service failed."""


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines (``#`` comments, blank lines, optional quotes); a malformed line is named."""
    values: dict[str, str] = {}
    if not path.exists():
        return values
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        if not sep or not key.strip():
            raise StackError(f"{path}:{number}: expected KEY=VALUE, got {line[:60]!r}")
        values[key.strip()] = value.strip().strip("'\"")
    return values


@dataclass(frozen=True)
class StackConfig:
    """Where the stack's services live and what they are given; built by :func:`stack_config`."""

    home: Path
    root: Path
    database_url: str  # postgresql://user[:password]@host:port
    db_prefix: str
    secrets: dict[str, str]
    ports: dict[str, int]
    s3_url: str | None = None  # an outside object store: then no S3 process is started
    ray: bool = False  # up starts the Ray cluster too (down and status include it whenever it runs)
    ray_port: int = RAY_PORT

    @property
    def dir(self) -> Path:
        return self.home / "stack"

    def database(self, name: str, driver: str = "") -> str:
        scheme, rest = self.database_url.split("://", 1)
        return f"{scheme.split('+')[0]}{'+' + driver if driver else ''}://{rest.rstrip('/')}/{self.db_prefix}{name}"

    @property
    def endpoint(self) -> str:
        return self.s3_url or f"http://127.0.0.1:{self.ports['s3']}"

    def url(self, service: str) -> str:
        if service.startswith("ray"):
            return self.ray_address
        return self.endpoint if service == "s3" else f"http://127.0.0.1:{self.ports[service]}"

    @property
    def ray_address(self) -> str:
        return f"127.0.0.1:{self.ray_port}"

    @property
    def prefect_api(self) -> str:
        return f"{self.url('prefect')}/api"

    def client_env(self) -> dict[str, str]:
        """What a process needs to use the stack: Prefect's API, MLflow's server, the review store, S3 (MLflow's
        artifacts and DVC's data versions)."""
        return {
            "PREFECT_API_URL": self.prefect_api,
            "MLFLOW_TRACKING_URI": self.url("mlflow"),
            "MLFLOW_REGISTRY_URI": self.url("mlflow"),
            "FORGE_REVIEW_DB_URL": self.database("review", "psycopg2"),
            "MLFLOW_S3_ENDPOINT_URL": self.endpoint,
            # The data versions go to the bucket too (forge/data/versioning.py: a dvc-s3 remote).
            "FORGE_DVC_REMOTE": f"s3://{BUCKET}/dvc",
            "AWS_ENDPOINT_URL": self.endpoint,
            **self.secrets,
        }


def stack_config(ws: Workspace, *, ray: bool = False) -> StackConfig:
    """The stack's settings from the environment and ``<checkout>/.env``; a missing secret is a
    :class:`StackError` naming each one and what it is."""
    values = {**read_env_file(ws.root / ".env"), **os.environ}
    missing = [f"{key} ({what})" for key, what in REQUIRED.items() if not values.get(key)]
    if missing:
        raise StackError("forge stack needs, in the environment or in " f"{ws.root / '.env'}: " + "; ".join(missing))
    ports = {name: int(values.get(f"FORGE_STACK_{name.upper()}_PORT", port)) for name, port in PORTS.items()}
    secrets = {k: values[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    return StackConfig(home=ws.home, root=ws.root, database_url=values["FORGE_STACK_DATABASE_URL"],
                       db_prefix=values.get("FORGE_STACK_DB_PREFIX", "forge_"), secrets=secrets, ports=ports,
                       s3_url=values.get("FORGE_STACK_S3_URL") or None, ray=ray,
                       ray_port=int(values.get("FORGE_STACK_RAY_PORT", RAY_PORT)))


@dataclass(frozen=True)
class Service:
    name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    health: str | None = None  # a URL answering 200 once the service is up
    started_line: str | None = None  # or a line its log prints once it is up (no HTTP endpoint)
    after: tuple[str, ...] = ()  # the services it needs up first (``up`` starts the rest beside each other)


def services(cfg: StackConfig) -> list[Service]:
    """The processes of the stack, each after what it names in ``after`` (and after it in this list)."""
    bindir = Path(sys.executable).parent
    out = []
    if cfg.s3_url is None:
        out.append(Service("s3", [str(bindir / "moto_server"), "-H", "127.0.0.1", "-p", str(cfg.ports["s3"])],
                           health=f"{cfg.url('s3')}/moto-api/"))
    prefect_env = {"PREFECT_API_DATABASE_CONNECTION_URL": cfg.database("prefect", "asyncpg"),
                   "PREFECT_HOME": str(cfg.dir / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                   "PREFECT_UI_API_URL": cfg.prefect_api}
    out.append(Service("prefect", [str(bindir / "prefect"), "server", "start", "--host", "127.0.0.1", "--port",
                                   str(cfg.ports["prefect"])], prefect_env, f"{cfg.prefect_api}/health"))
    out.append(Service("mlflow", [
        str(bindir / "mlflow"), "server", "--backend-store-uri", cfg.database("mlflow", "psycopg2"),
        "--artifacts-destination", f"s3://{BUCKET}/mlflow", "--serve-artifacts", "--host", "127.0.0.1",
        "--port", str(cfg.ports["mlflow"])], {"MLFLOW_S3_ENDPOINT_URL": cfg.endpoint, **cfg.secrets},
        f"{cfg.url('mlflow')}/health", after=("s3",) if cfg.s3_url is None else ()))
    if cfg.ray or any(_pid_file(cfg, name).exists() for name in RAY_SERVICES):
        out += ray_services(cfg)
    # The worker runs flow runs in this checkout with this home: the stack's client settings, Forge's own.
    worker_env = {**cfg.client_env(), **WORKER_SETTINGS, "FORGE_ROOT": str(cfg.root), "FORGE_HOME": str(cfg.home),
                  "PREFECT_HOME": str(cfg.dir / "worker-home")}
    # Last: a flow run it picks up uses every other service.
    out.append(Service("worker", [str(bindir / "prefect"), "worker", "start", "--pool", WORK_POOL, "--type",
                                  "process"], worker_env, after=tuple(s.name for s in out)))
    out.append(Service("dashboard", [str(bindir / "forge"), "review", "serve", "--port", str(cfg.ports["dashboard"])],
                       {**cfg.client_env(), "FORGE_HOME": str(cfg.home), "FORGE_ROOT": str(cfg.root)},
                       f"{cfg.url('dashboard')}/_stcore/health"))
    return out


def ray_services(cfg: StackConfig) -> list[Service]:
    """A Ray cluster of two nodes on loopback, one CPU each: the head (GCS on ``cfg.ray_port``, no dashboard) and
    a worker node. ``ray start --block`` keeps each node's processes in the group ``down`` stops."""
    ray = str(Path(sys.executable).parent / "ray")
    # A small object store: stage results travel through Prefect's result storage, not Ray's (default: 30% of RAM).
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--object-store-memory", str(256 << 20),
              "--disable-usage-stats", "--block"]
    # On SIGTERM a node drains first, for up to 30 s (for Ray Serve's requests; nothing of Forge's waits on it):
    # `down` took 20 s on the head until its SIGKILL. Off: a node stops in about a second.
    env = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    ready = "Ray runtime started."
    return [Service("ray-head", [ray, "start", "--head", "--port", str(cfg.ray_port), "--include-dashboard", "false",
                                 *common], env, started_line=ready),
            Service("ray-node", [ray, "start", "--address", cfg.ray_address, *common], env, started_line=ready,
                    after=("ray-head",))]


def _pid_file(cfg: StackConfig, name: str) -> Path:
    return cfg.dir / f"{name}.pid"


def running_pid(cfg: StackConfig, name: str) -> int | None:
    """The PID ``up`` recorded for ``name`` if that process is still alive, else None (a stale file is removed)."""
    path = _pid_file(cfg, name)
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    if not live_members(pid):
        path.unlink(missing_ok=True)
        return None
    return pid


def _stat(pid: str) -> tuple[str, int] | None:
    """(state, process group) of a process from /proc, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, pgrp, ...
    return fields[0], int(fields[2])


def live_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that are not zombies (a killed process whose parent is gone may stay a
    zombie where nothing reaps orphans, as in a container whose PID 1 is a shell)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(entry)) is not None and st[1] == pgid and st[0] != "Z":
            members.append(int(entry))
    return members


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _create_databases(cfg: StackConfig) -> None:
    """The stack's databases, and the pg_trgm extension Prefect's server needs."""
    import psycopg2

    admin = cfg.database_url.rstrip("/") + "/postgres"
    conn = psycopg2.connect(admin.replace("postgresql+psycopg2://", "postgresql://"))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for name in ("prefect", "mlflow", "review"):
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (f"{cfg.db_prefix}{name}",))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{cfg.db_prefix}{name}"')
    finally:
        conn.close()
    conn = psycopg2.connect(cfg.database("prefect"))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    finally:
        conn.close()


def _create_bucket(cfg: StackConfig) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=cfg.endpoint, aws_access_key_id=cfg.secrets["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=cfg.secrets["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    have = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    for bucket in (BUCKET, RESULTS_BUCKET):
        if bucket not in have:
            s3.create_bucket(Bucket=bucket)


def start(cfg: StackConfig, service: Service) -> int:
    """Start ``service`` in a process group of its own, its output in its log; returns once it is up."""
    log_path = cfg.dir / f"{service.name}.log"
    offset = log_path.stat().st_size if log_path.exists() else 0
    log = open(log_path, "ab")  # noqa: SIM115 - the child holds it; ours closes below
    try:
        proc = subprocess.Popen(service.command, env={**os.environ, **service.env}, cwd=cfg.root, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()
    _pid_file(cfg, service.name).write_text(str(proc.pid))
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _up(service, log_path, offset):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log_path.read_text(errors="replace")[-1500:]
            stop(cfg, only=[service])
            raise StackError(f"{service.name} did not come up ({service.health or service.started_line}); its log "
                             f"{log_path} ends:\n{tail}")
        time.sleep(0.5)
    return proc.pid


def _up(service: Service, log_path: Path, offset: int) -> bool:
    if service.health:
        return _answers(service.health)
    if service.started_line:
        with open(log_path, "rb") as f:
            f.seek(offset)
            return service.started_line.encode() in f.read()
    return True


def _register_deployments(cfg: StackConfig) -> None:
    """``forge stack configure`` against the stack's Prefect server, as a client of the stack."""
    env = {**os.environ, **cfg.client_env(), "FORGE_ROOT": str(cfg.root), "PREFECT_HOME": str(cfg.dir / "client-home")}
    proc = subprocess.run([str(Path(sys.executable).parent / "forge"), "stack", "configure"], env=env, cwd=cfg.root,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise StackError(f"`forge stack configure` failed:\n{(proc.stdout + proc.stderr)[-1500:]}")


def configure_server(root: Path, s3_endpoint: str) -> list[str]:
    """On the Prefect server at ``PREFECT_API_URL``: the work pool and infra/prefect.yaml's deployments, the task
    result storage in the bucket (a RemoteFileSystem block; credentials stay in the workers' environment), and the
    automation that marks a flow run Crashed once its heartbeats stop. Idempotent; returns what it did."""
    bindir = Path(sys.executable).parent
    for args in (["work-pool", "create", WORK_POOL, "--type", "process", "--overwrite"],
                 ["--no-prompt", "deploy", "--prefect-file", "infra/prefect.yaml", "--all"]):
        proc = subprocess.run([str(bindir / "prefect"), *args], cwd=root, capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            raise StackError(f"`prefect {' '.join(args)}` failed:\n{(proc.stdout + proc.stderr)[-1500:]}")
    from prefect.filesystems import RemoteFileSystem

    RemoteFileSystem(basepath=RESULTS_PATH, settings={"client_kwargs": {"endpoint_url": s3_endpoint}}).save(
        RESULTS_BLOCK, overwrite=True)
    _zombie_automation()
    return [f"work pool {WORK_POOL}", "deployments of infra/prefect.yaml", f"results in {RESULTS_PATH}",
            f"automation '{ZOMBIE_AUTOMATION}'"]


def _zombie_automation() -> None:
    from datetime import timedelta

    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    try:
        Automation.read(name=ZOMBIE_AUTOMATION)
        return
    except ValueError:  # none by that name yet
        pass
    ends = {f"prefect.flow-run.{state}" for state in ("Completed", "Failed", "Cancelled", "Crashed")}
    Automation(
        name=ZOMBIE_AUTOMATION,
        description="A flow run that sends no heartbeat for three periods (its process died) is marked Crashed.",
        trigger=EventTrigger(after={"prefect.flow-run.heartbeat"}, expect={"prefect.flow-run.heartbeat", *ends},
                             match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
                             for_each={"prefect.resource.id"}, posture=Posture.Proactive, threshold=1,
                             within=timedelta(seconds=3 * HEARTBEAT_S)),
        actions=[ChangeFlowRunState(state=StateType.CRASHED,
                                    message=f"no heartbeat for {3 * HEARTBEAT_S} s: its process is gone")],
    ).create()


def up(cfg: StackConfig, progress=print) -> dict[str, str]:
    """Start every service not running yet, each once what it needs answers and beside the others (the Prefect
    server's migrations, MLflow's and the Ray nodes' starts overlap); returns service → URL. If one fails to come
    up, everything is stopped and its :class:`StackError` raised."""
    cfg.dir.mkdir(parents=True, exist_ok=True)
    _create_databases(cfg)

    def bring_up(service: Service, needs: list[Future]) -> None:
        for need in needs:
            need.result()  # raises if what it needs failed: it does not start
        if running_pid(cfg, service.name):
            progress(f"{service.name}: already running")
            return
        progress(f"{service.name}: starting")
        began = time.monotonic()
        start(cfg, service)
        if service.name == "s3":
            _create_bucket(cfg)
        if service.name == "prefect":
            _register_deployments(cfg)
        progress(f"{service.name}: up ({time.monotonic() - began:.0f} s)")

    _in_dependency_order(services(cfg), bring_up, lambda s: s.after, on_error=lambda: stop(cfg))
    return {s.name: cfg.url(s.name) for s in services(cfg) if s.name != "worker"}


def _in_dependency_order(items: list[Service], work, needs_of, on_error) -> None:
    """``work(item, futures of what it needs)`` for every item, each in a thread of its own that waits for what it
    needs (``needs_of(item)``: names of other items; a name not in ``items`` is not waited for). If any raises,
    ``on_error()`` runs once everything has finished and the first error is raised."""
    futures: dict[str, Future] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(items)), thread_name_prefix="forge-stack") as pool:
        for item in _topological(items, needs_of):
            futures[item.name] = pool.submit(work, item, [futures[n] for n in needs_of(item) if n in futures])
    errors = [e for f in futures.values() if (e := f.exception()) is not None]
    if errors:
        on_error()
        raise errors[0]  # the first to fail in dependency order: those that needed it raise the same error


def _topological(items: list[Service], needs_of) -> list[Service]:
    """``items`` with every item after those it needs (their list order otherwise)."""
    names = {i.name for i in items}
    placed: list[Service] = []
    done: set[str] = set()
    while len(placed) < len(items):
        ready = next((i for i in items if i.name not in done and all(n in done or n not in names for n in needs_of(i))),
                     None)
        if ready is None:
            raise StackError(f"services that need each other: {', '.join(sorted(names - done))}")
        placed.append(ready)
        done.add(ready.name)
    return placed


def status(cfg: StackConfig) -> dict[str, dict]:
    report = {}
    for s in services(cfg):
        pid = running_pid(cfg, s.name)  # a service without a health URL answers while its process lives
        report[s.name] = {"pid": pid, "url": None if s.name == "worker" else cfg.url(s.name),
                          "answers": _answers(s.health) if s.health else bool(pid),
                          "log": str(cfg.dir / f"{s.name}.log")}
    return report


def stop(cfg: StackConfig, timeout_s: float = 20.0, only: list[Service] | None = None) -> list[str]:
    """Stop what ``up`` started (or ``only`` those services), each once the services that need it have stopped and
    beside the others: SIGTERM to its process group, SIGKILL to what is left after ``timeout_s``. Returns the
    names stopped, in the order they went."""
    chosen = services(cfg) if only is None else only
    needed_by = {s.name: tuple(o.name for o in chosen if s.name in o.after) for s in chosen}
    stopped: list[str] = []

    def bring_down(service: Service, dependents: list[Future]) -> None:
        wait(dependents)
        pid = running_pid(cfg, service.name)
        if pid is None:
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if not _wait_gone(pid, timeout_s):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            # SIGKILL is delivered, not done: a process tearing down a large mapping (Ray's object store) is still
            # listed for a moment, so wait for the group to go before saying it stopped.
            _wait_gone(pid, KILL_WAIT_S)
        _pid_file(cfg, service.name).unlink(missing_ok=True)
        stopped.append(service.name)

    _in_dependency_order(chosen, bring_down, lambda s: needed_by[s.name], on_error=lambda: None)
    return stopped


def _wait_gone(pgid: int, timeout_s: float) -> bool:
    """Wait until group ``pgid`` has no live member (reaping its leader when it is our child); whether it went."""
    deadline = time.monotonic() + timeout_s
    while True:
        _reap(pgid)
        if not live_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is our child (``up`` and ``down`` in one process: tests, a service manager)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
