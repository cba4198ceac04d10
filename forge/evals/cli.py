"""``forge eval ...`` commands (a typer app mounted by forge/cli.py).

    forge eval run --model models:/forge-policy@champion --suite math --limit 20   # one suite on a model
    forge eval matrix --alias candidate                        # every suite, recorded on the version, then the gate
    forge eval compare @champion @candidate                    # per-domain deltas with paired-bootstrap CIs
    forge eval score --suite math preds.jsonl                  # verdicts to preds.scored.jsonl, summary printed
    forge eval score --suite tool_use preds.jsonl --out verdicts.jsonl

Row formats per suite for ``score``: forge/evals/scoring.py. It writes one JSON line per scored row (``{"line",
"correct", "reason", "extracted"}``). Exit status: 0 when the work was done, whatever the accuracy (a bad line is
reported and skipped); 2 when the suite is unknown, a file or model is missing, or nothing could be read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from forge.data.jsonl import write_jsonl
from forge.evals.math import DEFAULT_TIME_LIMIT
from forge.evals.scoring import SCORERS, score_file

app = typer.Typer(help="Evaluation: run suites on a model, score predictions, the matrix.", no_args_is_help=True)
console = Console()
SHOW_BAD = 20  # bad lines printed at most; the count is always in the summary


@app.callback()
def _main() -> None:
    """Evaluation commands (a callback keeps `score` a named subcommand while it is the only one)."""


def default_out(file: Path) -> Path:
    """``preds.jsonl`` → ``preds.scored.jsonl`` (``.jsonl.gz`` too), beside the input."""
    name = file.name
    for suffix in (".jsonl.gz", ".jsonl", ".json"):
        if name.endswith(suffix):
            return file.with_name(name.removesuffix(suffix) + ".scored.jsonl")
    return file.with_name(name + ".scored.jsonl")


@app.command()
def score(
    file: Annotated[Path, typer.Argument(help="A .jsonl file of predictions (rows: forge/evals/scoring.py).")],
    suite: Annotated[str, typer.Option("--suite", "-s", help=f"Scorer: {', '.join(SCORERS)}.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Verdicts (default: FILE.scored.jsonl).")] = None,
    time_limit: Annotated[
        float, typer.Option(help="Seconds per math row before it is a timeout.")
    ] = DEFAULT_TIME_LIMIT,
) -> None:
    """Score a file of predictions: one verdict per row to --out, the summary printed."""
    if suite not in SCORERS:
        console.print(f"[red]unknown suite {suite!r}[/red]; suites: {', '.join(SCORERS)}")
        raise typer.Exit(2)
    if not file.is_file():
        console.print(Text(f"{file}: no such file", style="red"), soft_wrap=True)
        raise typer.Exit(2)
    rows, summary = score_file(suite, file, time_limit=time_limit)
    for line in summary["bad_lines"][:SHOW_BAD]:
        # One line per problem, never wrapped: `file:line: field: reason` stays greppable.
        console.print(Text(line, style="yellow"), soft_wrap=True)
    if len(summary["bad_lines"]) > SHOW_BAD:
        console.print(f"... and {len(summary['bad_lines']) - SHOW_BAD} more problems")
    if not rows:
        console.print(Text(f"{file}: no row could be scored", style="red"), soft_wrap=True)
        raise typer.Exit(2)
    target = out or default_out(file)
    write_jsonl(target, rows)
    table = Table(title=f"{file.name} ({suite})")
    for col in ("rows", "correct", "accuracy", "bad lines"):
        table.add_column(col, justify="right")
    table.add_row(str(summary["n"]), str(summary["correct"]), f"{summary['accuracy']:.2%}", str(summary["bad_rows"]))
    console.print(table)
    console.print(f"verdicts written to {target}", soft_wrap=True)


RUN_SUITES = ("humaneval", "code", "math", "science", "tool_use", "alignment", "deep_search")


@app.command()
def run(
    model: Annotated[str, typer.Option("--model", "-m", help="models:/forge-policy@champion, models:/NAME/VERSION, "
                                       "or a local checkpoint folder.")],
    suite: Annotated[str, typer.Option("--suite", "-s", help=f"One of {', '.join(RUN_SUITES)}.")],
    limit: Annotated[int | None, typer.Option(help="First N items (per source for math and code).")] = None,
    profile: Annotated[str, typer.Option(help="Profile whose eval settings apply.")] = "tiny",
    judge: Annotated[str, typer.Option(help="Alignment only: the pair-wise RM that judges.")] = (
        "models:/forge-rm-pairwise/latest"),
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Per-item rows (default: eval-SUITE.jsonl).")] = None,
) -> None:
    """Run one suite on a model: the items' rows to --out, the summary printed. Nothing is recorded on the version
    (the `evaluate-registered` flow, `forge eval matrix`, does that with the profile's full settings)."""
    from forge.config import load_profile
    from forge.generation import get_backend
    from forge.stages import Checkpoint
    from forge.workspace import Workspace
    from registry.models import download_checkpoint
    from registry.tracking import init_mlflow

    if suite not in RUN_SUITES:
        console.print(f"[red]unknown suite {suite!r}[/red]; suites: {', '.join(RUN_SUITES)}")
        raise typer.Exit(2)
    ws = Workspace.from_env()
    client = init_mlflow(ws)
    cfg = getattr(load_profile(profile).eval, suite)
    if limit is not None:
        cfg = cfg.model_copy(update={"limit": limit} if suite != "deep_search" else {"questions": limit})
    try:
        local = download_checkpoint(_latest(client, model))
    except Exception as err:  # any failure to resolve the model is the user's to fix, said plainly
        console.print(Text(f"cannot load {model}: {err}", style="red"), soft_wrap=True)
        raise typer.Exit(2) from err
    backend = get_backend("transformers", model=local, batch_size=cfg.batch_size)
    if suite in ("humaneval", "code"):
        rows, metrics = _code_suite(suite, backend, cfg)
    else:
        from tasks.evals import run_model_suite

        judge_ckpt = (Checkpoint(model_dir=str(download_checkpoint(_latest(client, judge))), model_name="judge",
                                 version="cli") if suite == "alignment" else None)
        report = run_model_suite(suite, backend, cfg, ws.corpora, ws=ws, judge=judge_ckpt)
        rows, metrics = report.rows, report.metrics
    target = out or Path(f"eval-{suite}.jsonl")
    write_jsonl(target, rows)
    table = Table(title=f"{model} · {suite}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        table.add_row(key, f"{value:.4g}")
    console.print(table)
    console.print(f"{len(rows)} rows written to {target}", soft_wrap=True)


def _latest(client, uri: str) -> str:
    """``models:/NAME/latest`` → ``models:/NAME/<highest version>``; anything else unchanged."""
    if uri.startswith("models:/") and uri.endswith("/latest"):
        name = uri.removeprefix("models:/").removesuffix("/latest")
        versions = client.search_model_versions(f"name='{name}'")
        if not versions:
            raise typer.BadParameter(f"no version of {name} is registered")
        return f"models:/{name}/{max(int(v.version) for v in versions)}"
    return uri


def _code_suite(suite: str, backend, cfg) -> tuple[list[dict], dict[str, float]]:
    if suite == "humaneval":
        from forge.evals.humaneval import evaluate_completions, generate_completions, load_problems

        problems = load_problems(cfg.limit)
        report = evaluate_completions(problems, generate_completions(backend, problems, cfg, temperature=0.0), cfg)
        rows = [{"id": r.task_id, "source": "humaneval", "score": float(r.passed), "status": r.status}
                for r in report.rows]
        return rows, {"humaneval_pass_at_1": report.pass_at_1, "humaneval_n": float(report.n)}
    from forge.evals.code import evaluate_code_suite

    report = evaluate_code_suite(backend, cfg)
    return [{"id": r["problem_id"], "score": float(r["solved"]), **r} for r in report.table()], report.metrics()


@app.command()
def matrix(
    alias: Annotated[str, typer.Option(help="The version to evaluate, by alias.")] = "candidate",
    model_name: Annotated[str, typer.Option(help="Registered model.")] = "forge-policy",
    profile: Annotated[str, typer.Option(help="Profile whose eval settings and gate apply.")] = "tiny",
    gate: Annotated[bool, typer.Option(help="Let the promotion gate decide afterwards.")] = True,
) -> None:
    """The whole matrix on ``models:/MODEL@ALIAS``, recorded on the version, then the gate (flows/evaluate.py, the
    `evaluate-candidate` deployment's flow)."""
    from forge.workspace import configure_environment, embedded_flow_settings

    configure_environment()  # before Prefect is imported: it reads where results go then (else ~/.prefect, shared)
    from flows.evaluate import evaluate_registered

    with embedded_flow_settings():
        reports = evaluate_registered(profile=profile, model_name=model_name, alias=alias, gate=gate)
    for report in reports:
        shown = {k: v for k, v in report.metrics.items() if k.endswith(("_accuracy", "_pass_at_1", "_win_rate"))}
        console.print(f"{report.suite:12s} " + "  ".join(f"{k} {v:.3f}" for k, v in shown.items()))


def _fmt(value: float, spec: str = ".3f") -> str:
    import math

    return "–" if math.isnan(value) else format(value, spec)  # NaN: nothing paired


@app.command()
def compare(
    a: Annotated[str, typer.Argument(metavar="A", help="Baseline: models:/NAME@ALIAS, NAME/VERSION, @ALIAS or 3.")],
    b: Annotated[str, typer.Argument(metavar="B", help="Compared version, in the same forms.")],
    model_name: Annotated[str, typer.Option("--model-name", help="Registered model of bare refs.")] = "forge-policy",
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples (and permutation patterns).")] = 2000,
    seed: Annotated[int, typer.Option(help="Seed of the resampling.")] = 0,
) -> None:
    """Compare two versions' evals item by item: Δ = B − A per domain and suite, 95 % CI, p, verdict.

    Exit status 2 when a ref names no version or a version has no evals (forge/evals/report.py: the statistics).
    """
    from forge.evals.report import compare_versions
    from forge.workspace import configure_environment

    ws = configure_environment()  # before mlflow is imported: it reads its settings at import
    from registry.tracking import init_mlflow
    from tasks.eval_report import resolve_version, version_items

    client = init_mlflow(ws)
    items = []
    for ref in (a, b):
        try:
            version = resolve_version(client, ref, model_name)
            found = version_items(client, model_name, version)
        except (LookupError, FileNotFoundError) as err:
            console.print(Text(str(err), style="red"), soft_wrap=True)
            raise typer.Exit(2) from None
        if not found:
            console.print(Text(f"{model_name}/{version} ({ref}) has no evals (no eval.<suite>.run_id tag)",
                               style="red"), soft_wrap=True)
            raise typer.Exit(2)
        items.append((version, found))
    (va, items_a), (vb, items_b) = items
    deltas = compare_versions(items_a, items_b, resamples=resamples, seed=seed)
    from rich import box

    table = Table(title=f"{model_name}: v{vb} ({b}) vs v{va} ({a})", box=box.SIMPLE, pad_edge=False,
                  show_edge=False)
    for col in ("domain/suite", "n", f"A v{va}", f"B v{vb}", "Δ", "95% CI", "p", "verdict"):
        table.add_column(col, justify="left" if col in ("domain/suite", "verdict") else "right", no_wrap=True)
    colours = {"better": "green", "worse": "red"}
    suites_of = {d.domain: sum(x.level == "suite" and x.domain == d.domain for x in deltas) for d in deltas}
    for d in deltas:
        if d.level == "suite" and suites_of[d.domain] == 1 and d.name == d.domain:
            continue  # the domain's only suite, of the same name: its row is the domain's
        table.add_row(Text(d.name, style="bold") if d.level == "domain" else f"  {d.name}", str(d.n),
                      _fmt(d.mean_a), _fmt(d.mean_b), _fmt(d.delta, "+.3f"),
                      f"[{_fmt(d.ci_low, '+.2f')}, {_fmt(d.ci_high, '+.2f')}]", _fmt(d.p_value, ".2g"),
                      Text(d.verdict, style=colours.get(d.verdict, "")))
    console.print(table)
    for d in deltas:
        if d.unpaired and d.level == "suite":
            console.print(f"{d.name}: {d.unpaired} items in only one of the two versions (left out)", soft_wrap=True)


if __name__ == "__main__":
    app()
