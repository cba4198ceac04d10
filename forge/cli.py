"""The `forge` command.

    forge run --profile tiny        the whole recipe (embedded Prefect, MLflow, DVC under .forge/)
    forge run --set pointwise_rl.grpo.beta=0.1      the same with one profile field overridden
    forge status                    stages of the latest run: state, duration, CPU, memory, MLflow run, version
    forge ui                        Prefect UI and MLflow UI on 127.0.0.1
    forge promote / forge rollback  move `champion` through the promotion gate, or back
    forge signoff 7 --by ana        a person approves version 7 (where the profile's gate requires it)
    forge lineage models:/forge-policy@champion     run, tags, parent chain to the base, data md5, mix, corpora
    forge data validate FILE --schema chat
    forge eval score --suite math preds.jsonl       score a file of predictions (forge/evals/scoring.py)

Prefect and MLflow read their settings when imported, so every command points them at the workspace first
and imports them lazily.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table
from rich.tree import Tree

from forge.code.cli import app as sandbox_app
from forge.data.cli import app as data_app
from forge.errors import InputError
from forge.evals.cli import app as eval_app
from forge.review.cli import app as review_app
from forge.search.cli import synth_app, tools_app
from forge.workspace import MLFLOW_UI_PORT, PREFECT_UI_PORT, Workspace, configure_environment

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Forge: the Nanbeige4.1 post-training recipe.")
app.add_typer(data_app, name="data", help="Validate and inspect datasets.")
app.add_typer(sandbox_app, name="sandbox", help="Run untrusted code in the sandbox.")
app.add_typer(tools_app, name="tools", help="The offline deep-search tools (search, visit).")
app.add_typer(synth_app, name="synth", help="Synthesize training data (forge synth search --n 200).")
app.add_typer(review_app, name="review", help="Review store and dashboard: users, serve, agreement.")
app.add_typer(eval_app, name="eval", help="Score predictions (forge eval score --suite math preds.jsonl).")
stack_app = typer.Typer(no_args_is_help=True)
app.add_typer(stack_app, name="stack", help="A team stack on this machine: Prefect server and worker, MLflow "
              "server, object store, dashboard (forge stack up / status / down).")
console = Console()


class ForgeConsoleHandler(RichHandler):
    """Forge's console log. A bad input file (:class:`forge.errors.InputError`) failing a task is logged by
    Prefect's task and flow engines with the whole traceback, once per level: here it is their one line, which
    names the file (the traceback stays in the run's log in the Prefect UI). Its name starts with no underscore:
    Prefect's logging set-up keeps a root handler of the user's but takes one named ``_…`` for its own and
    replaces it (prefect/logging/configuration.py)."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and isinstance(record.exc_info[1], InputError):
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        super().emit(record)


def _setup_logging(verbose: bool = False) -> None:
    handler = ForgeConsoleHandler(console=console, show_path=False, rich_tracebacks=False)
    logging.basicConfig(level=logging.WARNING, format="%(message)s", handlers=[handler], force=True)
    logging.getLogger("forge").setLevel(logging.DEBUG if verbose else logging.INFO)
    # MLflow warns on every offline log_model that it cannot fetch a model card from the hub: expected here.
    logging.getLogger("mlflow.transformers").setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _overrides(pairs: list[str]) -> dict:
    """``KEY=VALUE`` pairs (VALUE read as YAML: numbers, booleans, lists) as a dotted-key overrides mapping."""
    import yaml

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r}: expected KEY=VALUE, e.g. pointwise_rl.grpo.beta=0.1",
                                     param_hint="--set")
        out[key.strip()] = yaml.safe_load(value)
    return out


@app.command()
def run(
    profile: str = typer.Option("tiny", help="configs/<profile>.yaml or a path to a YAML profile."),
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a profile field: KEY=VALUE.")] = None,
    verbose: bool = typer.Option(False, "--verbose", "-v"),
    remote: bool = typer.Option(False, "--remote", help="Run it as the recipe deployment on the Prefect server "
                                "(PREFECT_API_URL, or the one `forge stack up` started) and follow it here."),
) -> None:
    """Run the whole recipe; finished stages are taken from the cache (a killed run resumes)."""
    if remote:
        _run_remote(profile, _overrides(set_ or []))
        return
    result = _in_process("recipe", profile, set_, verbose)
    _print_stages(result.stages)
    console.print(
        f"policy {result.policy.ref} · data md5 {result.data.data_md5} · promotion: {result.release.outcome} · "
        f"{result.seconds:.1f} s"
    )


@app.command()
def plan(
    profile: str = typer.Option("tiny", help="configs/<profile>.yaml or a path to a YAML profile."),
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a profile field: KEY=VALUE.")] = None,
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """What a run of the profile would do, stage by stage, without running anything: where each stage runs (the
    task's process or `accelerate launch`), on what, what generates its samples, what it reads, and any choice
    that only makes sense on a machine without GPUs."""
    from dataclasses import asdict

    from forge.config import load_profile
    from forge.plan import recipe_plan

    cfg = load_profile(profile, _overrides(set_ or []))
    rows = recipe_plan(cfg)
    if as_json:
        print(json.dumps([asdict(r) for r in rows], indent=1, ensure_ascii=False))
        return
    table = Table(title=f"plan of a {cfg.profile} run", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in ("stage", "runs in", "computes on", "generates with", "reads"):
        table.add_column(col, no_wrap=col == "stage")
    for r in rows:
        table.add_row(r.stage, r.launcher, r.compute, r.backend, r.data)
    console.print(table)
    flags = sorted({f for r in rows for f in r.cpu_only})
    console.print("CPU-only choices: " + ("; ".join(flags) if flags else "none"), markup=False, highlight=False,
                  soft_wrap=True)


def _in_process(flow_name: str, profile: str, set_: list[str] | None, verbose: bool):
    """The flow ``flows.recipe.<flow_name>`` run here as ``flow(profile=..., overrides=...)``, under the checkout's
    run lock; a busy checkout or a full disk is one red line and exit 1."""
    # Before Prefect is imported: it reads where task results go once, at import, and would keep ~/.prefect's
    # storage (shared by every checkout) instead of this home's.
    configure_environment()
    _setup_logging(verbose)
    import flows.recipe
    from forge.config import load_profile

    flow = getattr(flows.recipe, flow_name)

    overrides = _overrides(set_ or [])
    load_profile(profile, overrides)  # a bad profile stops here, before any flow starts (main() reports it)
    from forge.workspace import (
        CheckoutBusyError,
        DiskFullError,
        disk_full,
        disk_full_message,
        embedded_flow_settings,
        run_lock,
    )

    try:
        with run_lock(Workspace.from_env(), Path(profile).stem), embedded_flow_settings():
            return flow(profile=profile, overrides=overrides or None)
    except CheckoutBusyError as err:
        console.print(str(err), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except Exception as err:
        if not disk_full(err):
            raise
        # The first line a user reads: which disk, how much is left, what to do (the traceback is in the log).
        console.print(str(err) if isinstance(err, DiskFullError) else disk_full_message(Workspace.from_env()),
                      style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


def _run_remote(profile: str, overrides: dict) -> None:
    from forge.config import load_profile, profile_names

    load_profile(profile, overrides)  # refused here rather than by the server, with the field's line
    if profile not in profile_names():
        console.print(f"{profile}: a deployment runs a profile of configs/ ({', '.join(profile_names())})",
                      style="red", markup=False, highlight=False)
        raise typer.Exit(2)
    if not os.environ.get("PREFECT_API_URL"):  # the stack's, when one runs here
        from forge.stack import StackError, running_pid, stack_config

        try:
            cfg = stack_config(Workspace.from_env())
        except StackError as err:
            cfg = None
            reason = str(err)
        if cfg is None or not running_pid(cfg, "prefect"):
            console.print("--remote needs a Prefect server: set PREFECT_API_URL, or start one with `forge stack up`"
                          + (f" ({reason})" if cfg is None else ""), style="red", markup=False, soft_wrap=True)
            raise typer.Exit(2)
        os.environ.update(cfg.client_env())
    configure_environment()
    from flows.remote import run_remote

    state = run_remote(profile, overrides or None, echo=lambda line: console.print(line, markup=False,
                                                                                  highlight=False))
    raise typer.Exit(0 if state == "COMPLETED" else 1)


def _print_stages(stages: dict) -> None:
    table = Table(title="recipe stages")
    for col in ("stage", "state", "seconds", "CPU s · peak MB", "MLflow run", "version"):
        table.add_column(col, no_wrap=col in ("stage", "state"))  # an 80-column pipe wraps the figures instead
    for name, st in stages.items():
        # what the stage cost this process (forge/usage.py); nothing for one that ran on a Ray worker
        usage = f"{st['cpu_s']:.0f} · {st['peak_rss_mb']:.0f}" if "cpu_s" in st else ""
        table.add_row(name, st.get("state", "?"), f"{st.get('seconds', 0):.1f}", usage,
                      str(st.get("run_id", "") or "")[:8], str(st.get("version", "") or ""))
    console.print(table)
    figures = Table(title="stage metrics (all of them: forge status --json, or the stage's MLflow run)")
    figures.add_column("stage", no_wrap=True)
    figures.add_column("metrics")
    for name, st in stages.items():
        if st.get("metrics"):
            shown = list(st["metrics"].items())[:MAX_METRICS_SHOWN]
            figures.add_row(name, " · ".join(f"{k} {v:.4g}" for k, v in shown))
    if figures.row_count:
        console.print(figures)


MAX_METRICS_SHOWN = 8  # per stage in the table; `forge status --json` and MLflow have every one


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _load_run(path: Path) -> dict:
    """A run summary, with a run whose process is gone (killed) marked crashed, and its stages with it."""
    summary = json.loads(path.read_text())
    if summary["state"] == "running" and not _alive(summary["pid"]):
        summary["state"] = "crashed"
        summary["finished"] = path.stat().st_mtime  # its last record
        for st in summary["stages"].values():
            if st.get("state") == "running":
                st["state"] = "crashed"
    return summary


def _when(stamp: float | None) -> str:
    return datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S") if stamp else "?"


def _total(summary: dict, short: bool = False) -> str:
    seconds = (summary.get("finished") or time.time()) - summary["started"]
    minutes, seconds = int(seconds // 60), int(seconds % 60)
    return f"{minutes}:{seconds:02d}" if short else f"{minutes} min {seconds:02d} s"


def _outcome(summary: dict) -> str:
    promotion = summary.get("promotion")
    return f"{promotion['outcome']} ({promotion['model']} v{promotion['version']})" if promotion else "—"


@app.command()
def status(
    as_json: bool = typer.Option(False, "--json", help="Print the raw summary."),
    runs: bool = typer.Option(False, "--runs", help="Every recipe run under this home, newest first."),
    run_id: str | None = typer.Option(None, "--run", help="One run's stages, by flow-run id (a prefix will do)."),
) -> None:
    """The latest recipe run's stages (or another run's, or the list of runs)."""
    ws = configure_environment()
    runs_dir = ws.home / "runs"
    paths = sorted((p for p in runs_dir.glob("*.json") if p.name != "latest.json"), key=lambda p: p.stat().st_mtime,
                   reverse=True)
    if not paths and not (runs_dir / "latest.json").exists():
        console.print(f"no recipe run yet under {ws.home} (run `forge run`)")
        raise typer.Exit(1)
    if runs:
        summaries = [_load_run(p) for p in paths]
        if as_json:
            console.print_json(data=summaries)
            return
        table = Table(title=f"recipe runs under {ws.home}", box=box.SIMPLE_HEAD, pad_edge=False,
                      collapse_padding=True)
        for col in ("run", "state", "started", "total", "stages", "data", "promotion"):
            table.add_column(col, no_wrap=col != "promotion")
        for s in summaries:
            states = [st.get("state") for st in s["stages"].values()]
            promotion = s.get("promotion")
            table.add_row((s.get("name") or s["flow_run_id"][:8]).removeprefix("recipe·"), s["state"], _when(s["started"])[5:16],
                          _total(s, short=True), f"{states.count('completed')}/{states.count('cached')}",
                          (s.get("data_md5") or "—")[:8],
                          f"{promotion['outcome'].replace('already ', '')} v{promotion['version']}" if promotion
                          else "—")
        console.print(table)
        return
    if run_id:
        chosen = [p for p in paths if p.stem.startswith(run_id)]
        if len(chosen) != 1:
            known = ", ".join(p.stem[:8] for p in paths[:10])
            console.print(f"{'no' if not chosen else 'more than one'} run matches {run_id!r} (latest: {known})",
                          style="red", markup=False, highlight=False)
            raise typer.Exit(1)
        summary = _load_run(chosen[0])
    else:
        summary = _load_run(runs_dir / "latest.json")
    if as_json:
        console.print_json(data=summary)
        return
    console.print(
        f"{summary.get('name') or 'flow run ' + summary['flow_run_id']} · profile {summary['profile']} · "
        f"{summary['state']} · started {_when(summary['started'])} · total {_total(summary)} · "
        f"data md5 {summary.get('data_md5') or '—'} · promotion {_outcome(summary)}",
        markup=False, highlight=False, soft_wrap=True,
    )
    for label, key in (("Prefect", "prefect_url"), ("MLflow", "mlflow_url")):
        if summary.get(key):
            console.print(f"{label:8}{summary[key]}", markup=False, highlight=False, soft_wrap=True)
    _print_stages(summary["stages"])
    for name, st in summary["stages"].items():
        if st.get("error"):  # e.g. a full disk: which one, and what to do
            console.print(f"{name}: {st['error']}", style="red", markup=False, highlight=False, soft_wrap=True)


@data_app.command("build")
def data_build(
    profile: str = typer.Option("tiny", help="configs/<profile>.yaml or a path to a YAML profile."),
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a profile field: KEY=VALUE.")] = None,
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Build the recipe's data only (base model, pools, synthesis, mix, refinement, DVC) and say whether it is the
    version the checkout's committed data.dvc names: the same code and corpora give the same bytes."""
    from forge.data.versioning import built_on, committed_dvc_text, committed_md5, cpu_kind, same_bits

    data = _in_process("data_build", profile, set_, verbose)
    root = Workspace.from_env().root
    committed = committed_md5(root)
    console.print(f"data md5 {data.data_md5} · {data.mix_dir}", markup=False, highlight=False, soft_wrap=True)
    if committed is None:
        console.print("(no committed data.dvc to compare with)", highlight=False)
    elif committed == data.data_md5:
        console.print("the same version as the committed data.dvc", highlight=False)
    else:
        why = "this code or corpora build other data"
        other, here = built_on(committed_dvc_text(root) or ""), cpu_kind()
        if other and not same_bits(here, other):
            why = (f"it was built on a {other} CPU and this one is {here}: the base model's last bits, and so "
                   "the rows it writes, differ between CPU kinds, or this code or corpora build other data")
        console.print(f"not the committed data.dvc's version ({committed}): {why}; commit data.dvc to record it",
                      style="yellow", markup=False, highlight=False, soft_wrap=True)


@data_app.command("checkout")
def data_checkout(
    ref: Annotated[str, typer.Argument(metavar="VERSION", help="A data version (DVC md5) or the model version "
                                       "trained on it: models:/forge-policy/3, models:/forge-policy@champion.")],
    target: str = typer.Option("data", help="data (the SFT data) or rl-data (the RL problem sets)."),
) -> None:
    """Restore data/ (or rl-data/) to a version from the DVC remote; what it held first is versioned, not lost."""
    ws = configure_environment()
    from forge.data.versioning import DVCError, checkout_data, ensure_dvc

    md5 = ref
    if ref.startswith("models:/"):
        from registry.lineage import LineageError, data_version
        from registry.tracking import init_mlflow

        try:
            md5 = data_version(init_mlflow(ws), ref, target)
        except LineageError as err:
            console.print(str(err), style="red", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
    ensure_dvc(ws.root, ws.dvc_remote_url)
    try:
        kept = checkout_data(ws.root, md5, target)
    except DVCError as err:
        console.print(str(err), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if kept:
        console.print(f"what {target}/ held is kept as {kept} (forge data checkout {kept} brings it back)",
                      highlight=False, soft_wrap=True)
    console.print(f"{target}/ is now {md5.removesuffix('.dir')}.dir ({target}.dvc names it)", highlight=False)


def _data_remote(action: str, targets: list[str]) -> None:
    ws = configure_environment()
    from forge.data.versioning import TARGETS, DVCError, ensure_dvc, pull_data, push_data

    try:
        ensure_dvc(ws.root, ws.dvc_remote_url)
        summary = (push_data if action == "push" else pull_data)(ws.root, tuple(targets or TARGETS))
    except DVCError as err:
        console.print(str(err), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    console.print(f"{ws.dvc_remote_url}: {summary}", markup=False, highlight=False, soft_wrap=True)


@data_app.command("push")
def data_push(target: Annotated[list[str] | None, typer.Option(help="data and/or rl-data (default: both that "
                                                                    "are versioned).")] = None) -> None:
    """Send the versions data.dvc and rl-data.dvc name to the DVC remote (FORGE_DVC_REMOTE, else the home's)."""
    _data_remote("push", target or [])


@data_app.command("pull")
def data_pull(target: Annotated[list[str] | None, typer.Option(help="data and/or rl-data (default: both that "
                                                                    "are versioned).")] = None) -> None:
    """Fetch those versions into data/ and rl-data/, each object checked: a missing or corrupted one fails."""
    _data_remote("pull", target or [])


def _stack(ray: bool = False):
    ws = configure_environment()
    from forge.stack import StackError, stack_config

    try:
        return stack_config(ws, ray=ray)
    except StackError as err:
        console.print(str(err), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


@stack_app.command("up")
def stack_up(ray: bool = typer.Option(False, "--ray", help="Also a two-node Ray cluster on loopback (one CPU "
                                      "each) for fanned-out stages: profile field cluster.ray_address.")) -> None:
    """Start the stack's services that are not running (PostgreSQL must be up: FORGE_STACK_DATABASE_URL)."""
    cfg = _stack(ray)
    from forge.stack import StackError, up

    try:
        urls = up(cfg, progress=lambda line: console.print(line, highlight=False))
    except StackError as err:
        console.print(str(err), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    for name, url in urls.items():
        console.print(f"{name:10}{url}", highlight=False)
    console.print(f"(clients: export PREFECT_API_URL={cfg.prefect_api} MLFLOW_TRACKING_URI={cfg.url('mlflow')}; "
                  "forge run --remote submits the recipe deployment)", highlight=False, soft_wrap=True)
    if ray:
        console.print(f"(synthesis shards fan out on Ray with --set cluster.ray_address={cfg.ray_address})",
                      highlight=False, soft_wrap=True)


@stack_app.command("configure")
def stack_configure() -> None:
    """On the Prefect server at PREFECT_API_URL: the work pool, the deployments, task results in the bucket
    (AWS_ENDPOINT_URL) and the automation that crashes runs without heartbeats. `up` runs it; so does compose."""
    ws = configure_environment()
    from forge.stack import StackError, configure_server

    missing = [k for k in ("PREFECT_API_URL", "AWS_ENDPOINT_URL") if not os.environ.get(k)]
    if missing:
        console.print(f"forge stack configure needs {', '.join(missing)}", style="red", highlight=False)
        raise typer.Exit(2)
    try:
        done = configure_server(ws.root, os.environ["AWS_ENDPOINT_URL"])
    except StackError as err:
        console.print(str(err), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    console.print(f"{os.environ['PREFECT_API_URL']}: " + "; ".join(done), markup=False, highlight=False,
                  soft_wrap=True)


@stack_app.command("status")
def stack_status(as_json: bool = typer.Option(False, "--json")) -> None:
    """Each service of the stack: its process, whether it answers, its URL and log."""
    cfg = _stack()
    from forge.stack import status

    report = status(cfg)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    for name, st in report.items():
        state = "down" if not st["pid"] else "up" if st["answers"] else "starting"
        console.print(f"{name:10}{state:9}{st['url'] or '(no port)':28}pid {st['pid'] or '-':<8} {st['log']}",
                      highlight=False, soft_wrap=True)
    raise typer.Exit(0 if all(st["pid"] for st in report.values()) else 1)


@stack_app.command("down")
def stack_down() -> None:
    """Stop exactly what `forge stack up` started."""
    cfg = _stack()
    from forge.stack import stop

    stopped = stop(cfg)
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing of the stack was running")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _stop_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:  # the whole group is gone already
        pass


@app.command()
def ui(prefect_port: int = PREFECT_UI_PORT, mlflow_port: int = MLFLOW_UI_PORT) -> None:
    """Start the Prefect server and the MLflow UI on 127.0.0.1; Ctrl-C or SIGTERM stops both, workers included."""
    ws = configure_environment()
    # Each server runs in a process group of its own (their workers with them), stopped as a group from here:
    # a SIGTERM from a service manager reaches only this process and must not leave the servers orphaned.
    signal.signal(signal.SIGTERM, _interrupt)
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(prefect_port)}
    procs = [
        subprocess.Popen(
            [str(bindir / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(prefect_port)], env=env,
            start_new_session=True,
        ),
        subprocess.Popen(
            [
                str(bindir / "mlflow"),
                "ui",
                "--backend-store-uri",
                ws.mlflow_uri,
                "--default-artifact-root",
                ws.mlflow_artifacts.as_uri(),
                "--host",
                "127.0.0.1",
                "--port",
                str(mlflow_port),
            ],
            env=env,
            start_new_session=True,
        ),
    ]
    console.print(f"Prefect UI  http://127.0.0.1:{prefect_port}\nMLflow UI   http://127.0.0.1:{mlflow_port}")
    console.print(f"(to run flows against this server: export PREFECT_API_URL=http://127.0.0.1:{prefect_port}/api)")
    try:
        os.wait()  # returns when either server exits; Ctrl-C (SIGINT) or SIGTERM interrupts it
    except KeyboardInterrupt:
        console.print("stopping")
    finally:
        for p in procs:
            _stop_group(p, signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
            _stop_group(p, signal.SIGKILL)  # whatever of the group is still there (workers outliving the leader)


def _client_and_policy(profile: str):
    ws = configure_environment()
    from forge.config import load_profile
    from registry.tracking import init_mlflow

    return init_mlflow(ws), load_profile(profile).promotion


@app.command()
def promote(
    model: str = typer.Option("forge-policy", help="Registered model name."),
    version: str = typer.Option(None, help="Version to promote (default: the `candidate` alias)."),
    profile: str = typer.Option("tiny", help="Profile whose promotion policy applies."),
) -> None:
    """Move `champion` to the candidate if the gate allows it; the decision is recorded on the version."""
    client, policy = _client_and_policy(profile)
    from registry.promotion import promote as do_promote

    decision = do_promote(client, model, policy, version=version)
    verdict = "[green]promoted[/green]" if decision.promote else "[red]refused[/red]"
    if decision.unchanged:
        verdict = "[green]already champion[/green]"
    console.print(f"{model}: {verdict}")
    for reason in decision.reasons:
        console.print(f"  - {reason}")
    raise typer.Exit(0 if decision.promote else 1)


@app.command()
def signoff(
    version: Annotated[str, typer.Argument(metavar="VERSION", help="Model version to sign off.")],
    by: str = typer.Option(..., "--by", help="Who signs (recorded as tag promotion.signoff)."),
    note: str = typer.Option(None, help="Why, or what was checked (tag promotion.signoff_note)."),
    model: str = typer.Option("forge-policy", help="Registered model name."),
) -> None:
    """Record a person's approval of a version; a gate with `require_signoff` refuses versions without one."""
    client, _ = _client_and_policy("tiny")
    from mlflow.exceptions import MlflowException

    from registry.promotion import sign_off

    try:
        sign_off(client, model, version, by=by, note=note)
    except (MlflowException, ValueError) as err:
        console.print(f"{model} {version}: {err}", style="red", markup=False, highlight=False)
        raise typer.Exit(1) from None
    console.print(f"{model}: version {version} signed off by {by.strip()} (now: forge promote --version {version})")


@app.command()
def rollback(model: str = typer.Option("forge-policy", help="Registered model name.")) -> None:
    """Restore the previous champion."""
    client, _ = _client_and_policy("tiny")
    from registry.promotion import RollbackError
    from registry.promotion import rollback as do_rollback

    try:
        version = do_rollback(client, model)
    except RollbackError as err:
        console.print(f"[red]{err}[/red]")
        raise typer.Exit(1) from None
    console.print(f"{model}: champion is version {version} again")


@app.command()
def lineage(
    uri: Annotated[str, typer.Argument(metavar="MODEL_URI", help="models:/<name>/<version> or models:/<name>@<alias>")],
    as_json: bool = typer.Option(False, "--json", help="Print the lineage as JSON."),
) -> None:
    """A version's MLflow run and lineage tags, its parent chain to the base model, and the data it was trained on."""
    ws = configure_environment()
    from registry.lineage import LineageError, trace

    try:
        report = trace(ws, uri)
    except LineageError as err:
        console.print(str(err), style="red", markup=False, highlight=False)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    _print_lineage(report)


def _print_lineage(report: dict) -> None:
    tree = Tree(f"[bold]{report['uri']}[/bold]")
    branch = tree
    for node in report["chain"]:
        if not node["registered"]:
            branch.add(f"[bold]{node['ref']}[/bold] (not in the registry: the base model)")
            break
        aliases = f" @{', @'.join(node['aliases'])}" if node["aliases"] else ""
        branch = branch.add(f"[bold]{node['ref']}[/bold]{aliases} · stage {node['stage']} · "
                            f"run {node['run_id']} ({node['run_name']})")
        facts = {k: node[k] for k in ("git_commit", "profile", "flow_run_id", "data_md5", "rl_data_md5") if node[k]}
        if node["metrics"]:
            facts["metrics"] = " · ".join(f"{k} {v:.4g}" for k, v in node["metrics"].items())
        for key, value in facts.items():
            branch.add(f"{key}: {value}", highlight=False)
        if not node["parent"]:
            branch.add("(no parent: the base model)")
    console.print(tree)
    for data in report["data"]:
        where = data["snapshot"] or "not found in the DVC cache, the remote or the checkout"
        console.print(f"[bold]{data['dvc_file']}[/bold] md5 {data['md5']} · snapshot: {where} · "
                      f"data run: {data['data_run_id'] or '-'}", highlight=False)
        for mix in data["mixes"]:
            domains = Table(title=f"mix {mix['name']}: {mix['total_tokens']} tokens")
            for col in ("domain", "rows", "tokens", "share", "target"):
                domains.add_column(col)
            for name, d in mix["domains"].items():
                domains.add_row(name, str(d["rows"]), str(d["tokens"]), f"{d['actual_share']:.3f}",
                                f"{d['target_share']:.3f}")
            corpora = Table(title=f"mix {mix['name']}: train rows by source (licences: corpora/PROVENANCE.md)")
            for col in ("source", "rows", "licence"):
                corpora.add_column(col)
            for c in mix["corpora"]:
                corpora.add_row(c["source"], str(c["rows"]), c["licence"] or "- (not from corpora/)")
            for table in (domains, corpora):
                if table.row_count:
                    console.print(table)


def main() -> None:
    """The ``forge`` command. A bad profile, whichever command reads it, is reported as ``file:line: field: reason``
    lines and exit status 2, never a traceback; so is any other bad input a command or a recipe stage meets (a
    damaged corpus or data file: :class:`forge.errors.InputError`)."""
    from forge.config import ConfigError

    try:
        app()
    except InputError as err:
        console.print("[red]invalid profile[/red]" if isinstance(err, ConfigError) else "[red]bad input[/red]")
        console.print(str(err), markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
