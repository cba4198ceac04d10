"""The eval report's MLflow side: find a version's per-item eval tables from the registry, resolve version refs,
and log the report (plots + the version × domain matrix) into the active run.

    from tasks.eval_report import log_eval_report, resolve_version, version_items
    items = version_items(client, "forge-policy", resolve_version(client, "@champion", "forge-policy"))
    with mlflow.start_run():
        log_eval_report(client, "forge-policy", candidate_version="7")

Plain functions, no Prefect: the ``eval-report`` task calls :func:`log_eval_report`, ``forge eval compare`` the
others. Here rather than in forge/evals/report.py because they need both the eval contract (forge/evals/domains.py)
and the registry's helpers, and the library rooms may not import the registry (tests/test_architecture.py).
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import asdict
from pathlib import Path

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from forge.evals.domains import ITEMS_ARTIFACT, run_tag
from forge.evals.report import (
    VersionHeadlines,
    compare_versions,
    eval_matrix,
    parse_version_ref,
    plot_champion_vs_candidate,
    plot_domains_across_versions,
    table_rows,
)
from registry.models import METRIC_TAG_PREFIX, get_alias_version, version_metrics
from registry.tracking import log_table

CHAMPION, CANDIDATE = "champion", "candidate"
DOMAINS_PLOT = "eval_report/domains_by_version.png"
CHAMPION_PLOT = "eval_report/champion_vs_candidate.png"
MATRIX_TABLE = "eval_report/eval_matrix.json"
COMPARE_TABLE = "eval_report/champion_vs_candidate.json"
_RUN_TAG = re.compile(re.escape(run_tag("SUITE")).replace("SUITE", "(?P<suite>.+)") + "$")


def resolve_version(client: MlflowClient, ref: str, model_name: str) -> str:
    """The version number ``ref`` names (``forge.evals.report.parse_version_ref``'s forms); LookupError, saying
    what is missing, when the alias or the version does not exist."""
    try:
        parsed = parse_version_ref(ref, model_name)
    except ValueError as err:
        raise LookupError(str(err)) from None
    if parsed.model_name != model_name:
        raise LookupError(f"{ref!r} names model {parsed.model_name!r}, not {model_name!r} (pass --model-name)")
    if parsed.alias is not None:
        version = get_alias_version(model_name, parsed.alias, client=client)
        if version is None:
            raise LookupError(f"{model_name} has no alias {parsed.alias!r}")
        return version
    try:
        client.get_model_version(model_name, parsed.version)
    except MlflowException:
        raise LookupError(f"{model_name} has no version {parsed.version}") from None
    return parsed.version


def suite_runs(client: MlflowClient, model_name: str, version: str | int) -> dict[str, str]:
    """suite → the run id of that suite's latest eval of the version (its ``eval.<suite>.run_id`` tags)."""
    tags = client.get_model_version(model_name, str(version)).tags
    return {m["suite"]: run_id for key, run_id in tags.items() if (m := _RUN_TAG.match(key))}


def version_items(client: MlflowClient, model_name: str, version: str | int) -> dict[str, list[dict]]:
    """suite → the per-item rows (``id``, ``source``, ``score``, ...) of the version's eval runs; {} without evals.

    Raises FileNotFoundError when a tagged run has no ``eval_items.json`` (the eval contract is broken)."""
    out: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for suite, run_id in sorted(suite_runs(client, model_name, version).items()):
            try:
                path = client.download_artifacts(run_id, ITEMS_ARTIFACT, dst_path=tmp)
            except (MlflowException, OSError) as err:
                raise FileNotFoundError(
                    f"{model_name}/{version}: eval run {run_id} of suite {suite!r} has no {ITEMS_ARTIFACT} ({err})"
                ) from None
            out[suite] = table_rows(json.loads(Path(path).read_text()))
    return out


def version_headlines(client: MlflowClient, model_name: str) -> list[VersionHeadlines]:
    """Every registered version's headline metrics and aliases, oldest first."""
    versions = client.search_model_versions(f"name = '{model_name}'")
    rows = []
    for mv in sorted(versions, key=lambda mv: int(mv.version)):
        metrics = {k[len(METRIC_TAG_PREFIX) :]: float(v) for k, v in mv.tags.items() if k.startswith(METRIC_TAG_PREFIX)}
        rows.append(VersionHeadlines.from_metrics(mv.version, metrics, aliases=mv.aliases or ()))
    return rows


def _plotted(rows: list[VersionHeadlines], keep: set[str], max_versions: int) -> list[VersionHeadlines]:
    """The versions worth a bar: those in ``keep`` (champion, candidate) and the newest evaluated others."""
    evaluated = [r for r in rows if r.headline or r.version in keep]
    others = [r for r in evaluated if r.version not in keep][-max(0, max_versions - len(keep)) :]
    chosen = {r.version for r in others} | keep
    return [r for r in evaluated if r.version in chosen]


def log_eval_report(
    client: MlflowClient, model_name: str, candidate_version: str | int, *, max_versions: int = 8
) -> dict:
    """Log the eval report of ``candidate_version`` into the active MLflow run.

    Artifacts: ``DOMAINS_PLOT`` (the headline metric per domain, one bar per version: the champion, the
    candidate and the newest others up to ``max_versions``), ``MATRIX_TABLE`` (every version × domain), and,
    when there is a champion, ``CHAMPION_PLOT`` plus ``COMPARE_TABLE`` (the paired comparison of their items,
    when both have any). Returns what was logged: champion, candidate, artifacts, matrix, comparison.
    """
    if mlflow.active_run() is None:
        raise RuntimeError("log_eval_report logs into the active MLflow run; start one first")
    candidate = str(candidate_version)
    champion = get_alias_version(model_name, CHAMPION, client=client)
    rows = version_headlines(client, model_name)
    by_version = {r.version: r for r in rows}
    if candidate not in by_version:
        raise LookupError(f"{model_name} has no version {candidate}")
    keep = {candidate} | ({champion} if champion else set())
    plotted = _plotted(rows, keep, max_versions)
    title = f"{model_name}: headline metric per domain" + (
        f" ({len(plotted)} of {len(rows)} versions)" if len(plotted) < len(rows) else "")
    mlflow.log_figure(plot_domains_across_versions(plotted, title=title), DOMAINS_PLOT)
    matrix = eval_matrix(rows)
    log_table(matrix, MATRIX_TABLE)
    artifacts = [DOMAINS_PLOT, MATRIX_TABLE]
    comparison: list[dict] = []
    if champion is not None:
        items_champion = version_items(client, model_name, champion)
        items_candidate = version_items(client, model_name, candidate)
        verdicts = {}
        if items_champion and items_candidate:
            deltas = compare_versions(items_champion, items_candidate)
            comparison = [{**asdict(d), "verdict": d.verdict} for d in deltas]
            verdicts = {d.domain: d.verdict for d in deltas if d.level == "domain"}
            log_table(comparison, COMPARE_TABLE)
            artifacts.append(COMPARE_TABLE)
        fig = plot_champion_vs_candidate(
            version_metrics(model_name, champion, client=client),
            version_metrics(model_name, candidate, client=client),
            champion_label=by_version[champion].label,
            candidate_label=by_version[candidate].label,
            verdicts=verdicts,
        )
        mlflow.log_figure(fig, CHAMPION_PLOT)
        artifacts.append(CHAMPION_PLOT)
    return {"model": model_name, "champion": champion, "candidate": candidate, "artifacts": artifacts,
            "matrix": matrix, "comparison": comparison}
