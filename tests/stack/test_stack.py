"""`forge stack`: the team stack as real processes on this machine (PostgreSQL at 127.0.0.1:5432 as the database,
moto's S3 server as the object store), the recipe deployment run through its worker, the worker killed mid-run,
and `down` leaving nothing behind. Skipped, with the reason, where no PostgreSQL answers."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forge.workspace import REPO_ROOT

pytestmark = pytest.mark.cost(560)

FORGE = str(Path(sys.executable).parent / "forge")
PG = "postgresql://postgres@127.0.0.1:5432"


def _pg_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=2):
            return True
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(root: Path, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "MLFLOW_", "FORGE_", "DVC_", "AWS_"))}
    env.update(FORGE_ROOT=str(root), FORGE_HOME=str(home), HF_HUB_OFFLINE="1", **extra)
    return env


def _forge(env: dict, root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([FORGE, *args], env=env, cwd=root, capture_output=True, text=True, timeout=timeout,
                          check=False)


def test_up_refuses_without_its_secrets_and_names_them(tmp_path):
    root = tmp_path / "checkout"
    root.mkdir()
    env = _env(root, tmp_path / "home")
    out = _forge(env, root, "stack", "up", timeout=120)
    assert out.returncode == 2
    for key in ("FORGE_STACK_DATABASE_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert key in out.stdout
    assert not (tmp_path / "home" / "stack").exists()  # nothing started
    # A .env in the checkout counts; a line that is not KEY=VALUE is named.
    (root / ".env").write_text("# the team's stack\nFORGE_STACK_DATABASE_URL=postgresql://u@db:5432\nAWS_ACCESS_KEY_ID\n")
    out = _forge(env, root, "stack", "up", timeout=120)
    assert out.returncode == 2 and f"{root / '.env'}:3: expected KEY=VALUE" in out.stdout


def _checkout(root: Path) -> None:
    """This checkout's tracked files as they are now (code, configs, infra), corpora linked, a git repo."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if name.startswith("corpora/") or not (REPO_ROOT / name).is_file():
            continue
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, root / name)
    (root / "corpora").symlink_to(REPO_ROOT / "corpora", target_is_directory=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "scratch"], cwd=root,
                   check=True)


def test_services_start_beside_each_other_each_once_what_it_needs_is_up():
    """`up` and `down` schedule through one function: a service waits for those it names in ``after`` and no
    longer; one that fails stops what needs it from starting, and its error is the one raised."""
    import threading

    from forge.stack import Service, StackError, _in_dependency_order

    head, node, db, worker = (Service("head", []), Service("node", [], after=("head",)), Service("db", []),
                              Service("worker", [], after=("db", "node")))
    events: list[tuple[str, str]] = []
    db_began = threading.Event()
    head_saw_db = []

    def work(service, needs, fail=()):
        for need in needs:
            need.result()
        events.append(("begin", service.name))
        if service.name == "db":
            db_began.set()
        if service.name == "head":  # had the two run one after the other, db would not have begun meanwhile
            head_saw_db.append(db_began.wait(timeout=60))
        if service.name in fail:
            raise StackError(f"{service.name} did not come up")
        events.append(("end", service.name))

    _in_dependency_order([worker, node, head, db], work, lambda s: s.after, on_error=lambda: events.append(("x", "")))
    assert head_saw_db == [True]
    assert events.index(("begin", "node")) > events.index(("end", "head"))
    assert events.index(("begin", "worker")) > max(events.index(("end", "node")), events.index(("end", "db")))
    assert ("x", "") not in events

    events.clear()
    db_began.clear()
    with pytest.raises(StackError, match="head did not come up"):
        _in_dependency_order([head, node, db, worker], lambda s, n: work(s, n, fail=("head",)), lambda s: s.after,
                             on_error=lambda: events.append(("x", "")))
    assert ("begin", "node") not in events and ("begin", "worker") not in events  # nothing after the failure
    assert ("end", "db") in events and events[-1] == ("x", "")  # what was starting finished, then all was stopped


def _state_eventually(api: str, flow_run_id: str, wanted: str, within_s: float) -> str:
    """The flow run's state type on the stack's Prefect server once it is ``wanted`` or ``within_s`` passed."""
    import httpx

    deadline = time.time() + within_s
    while True:
        run = httpx.get(f"{api}/flow_runs/{flow_run_id}", timeout=10).json()
        if run["state_type"] == wanted or time.time() > deadline:
            return run["state_type"]
        time.sleep(2)


def _groups_alive(pgids: list[int]) -> list[int]:
    """Those of ``pgids`` with a process that is not a zombie."""
    from forge.stack import live_members

    return [pgid for pgid in pgids if live_members(pgid)]


@pytest.mark.slow
@pytest.mark.skipif(not _pg_answers(), reason="no PostgreSQL on 127.0.0.1:5432 (the stack's database)")
def test_stack_runs_the_recipe_deployment_through_its_worker_and_stops_clean(tmp_path):
    import boto3
    import mlflow
    import psycopg2

    root, home = tmp_path / "checkout", tmp_path / "home"
    root.mkdir()
    _checkout(root)
    prefix = f"forge_t{secrets.token_hex(4)}_"
    ports = {name: str(_free_port()) for name in ("S3", "PREFECT", "MLFLOW", "DASHBOARD", "RAY")}
    env = _env(root, home, FORGE_STACK_DATABASE_URL=PG, FORGE_STACK_DB_PREFIX=prefix,
               AWS_ACCESS_KEY_ID="forge-test", AWS_SECRET_ACCESS_KEY=secrets.token_hex(16),
               **{f"FORGE_STACK_{name}_PORT": port for name, port in ports.items()})
    stack_dir = home / "stack"
    try:
        up = _forge(env, root, "stack", "up", "--ray")
        assert up.returncode == 0, up.stdout + up.stderr
        ray = f"cluster.ray_address=127.0.0.1:{ports['RAY']}"  # the search shard runs on the stack's Ray cluster
        status = json.loads(_forge(env, root, "stack", "status", "--json").stdout)
        assert all(s["pid"] for s in status.values()) and all(s["answers"] for n, s in status.items() if n != "worker")
        pids = [s["pid"] for s in status.values()]

        # Run 1 through the worker; the worker is killed (-9, its whole process group: the flow run with it)
        # once the first SFT stage has finished.
        follow = subprocess.Popen([FORGE, "run", "--remote", "--profile", "ci", "--set", ray], env=env, cwd=root,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  start_new_session=True)
        summary = home / "runs" / "latest.json"
        deadline = time.time() + 600
        while time.time() < deadline:
            stages = json.loads(summary.read_text())["stages"] if summary.exists() else {}
            if stages.get("sft-1-ctx-128", {}).get("state") == "completed":
                break
            assert follow.poll() is None, follow.stdout.read()
            time.sleep(0.5)
        else:
            pytest.fail("run 1 never finished its first SFT stage")
        os.killpg(int((stack_dir / "worker.pid").read_text()), signal.SIGKILL)
        os.killpg(follow.pid, signal.SIGKILL)  # the follower would wait for a run nobody runs any more
        follow.communicate(timeout=30)
        killed = json.loads(summary.read_text())
        finished = [n for n, s in killed["stages"].items() if s["state"] in ("completed", "cached")]

        # `up` again starts only the worker; run 2 through it takes every finished stage from the cache.
        again = _forge(env, root, "stack", "up")
        assert again.returncode == 0 and again.stdout.count("already running") == 6, again.stdout
        second = _forge(env, root, "run", "--remote", "--profile", "ci", "--set", ray)
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        assert "state: Completed" in second.stdout and "stage promote: done" in second.stdout
        resumed = json.loads(summary.read_text())
        assert resumed["flow_run_id"] != killed["flow_run_id"] and resumed["state"] == "completed"
        # `dvc` is no cached task: it versions data/ on every run (dvc add of unchanged files: the same md5).
        redone = [n for n in finished if n != "dvc" and resumed["stages"][n]["state"] != "cached"]
        assert len(finished) > 5 and not redone, f"finished before the kill, redone after: {redone}"
        assert resumed["data_md5"] == killed["data_md5"]
        # Those cache hits came from the bucket: the worker keeps no task result on its own disk.
        assert not [p for p in (home / "prefect" / "results").rglob("*") if p.is_file()]

        # The registry is the MLflow server's (PostgreSQL), the artifacts are in the object store.
        mlflow_url = f"http://127.0.0.1:{ports['MLFLOW']}"
        client = mlflow.MlflowClient(tracking_uri=mlflow_url, registry_uri=mlflow_url)
        champion = client.get_model_version_by_alias("forge-policy", "champion")
        conn = psycopg2.connect(f"{PG}/{prefix}mlflow")
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM model_versions WHERE name = 'forge-policy' AND version = %s",
                        (int(champion.version),))
            assert cur.fetchone()[0] == 1
        conn.close()
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{ports['S3']}", region_name="us-east-1",
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket="forge", Prefix="mlflow/")
        keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
        assert any(k.endswith("model.safetensors") for k in keys), keys[:10]
        # The data version the run trained on is in the bucket's DVC remote, listing and every object.
        md5 = resumed["data_md5"]
        listing = s3.get_object(Bucket="forge", Key=f"dvc/files/md5/{md5[:2]}/{md5[2:]}")["Body"].read()
        for entry in json.loads(listing):
            s3.head_object(Bucket="forge", Key=f"dvc/files/md5/{entry['md5'][:2]}/{entry['md5'][2:]}")
        assert "s3://forge/dvc" in (root / ".dvc" / "config.local").read_text()
        assert s3.list_objects_v2(Bucket="forge-results")["KeyCount"] > 0  # Prefect's task results
        # The killed run's process sent no more heartbeats: the stack's automation marked it Crashed.
        api = f"http://127.0.0.1:{ports['PREFECT']}/api"
        assert _state_eventually(api, killed["flow_run_id"], "CRASHED", within_s=240) == "CRASHED"
        pids = [int(p.read_text()) for p in stack_dir.glob("*.pid")]
    finally:
        down = _forge(env, root, "stack", "down", timeout=180)
    assert down.returncode == 0 and "stopped:" in down.stdout
    assert _groups_alive(pids) == [] and not list(stack_dir.glob("*.pid"))
    conn = psycopg2.connect(f"{PG}/postgres")
    conn.autocommit = True  # DROP DATABASE runs outside a transaction
    with conn.cursor() as cur:
        for name in ("prefect", "mlflow", "review"):
            cur.execute(f'DROP DATABASE IF EXISTS "{prefix}{name}" WITH (FORCE)')
    conn.close()
