"""Prefect tasks for evaluation: HumanEval pass@1 of a registered checkpoint, code run only in the sandbox."""

from __future__ import annotations

import mlflow

from forge.config import HumanEvalConfig
from registry.tracking import STAGE_TAG, log_table, start_stage_run
from tasks._cache import cached_task


@cached_task(
    name="eval-humaneval",
    modules=("forge.evals.humaneval", "forge.code.sandbox", "forge.generation.transformers_backend"),
)
def humaneval_task(
    model_dir: str,
    model_name: str,
    version: str,
    cfg: HumanEvalConfig,
    parent_run_id: str | None = None,
    lineage: dict | None = None,
) -> dict:
    """Generate one greedy completion per problem, judge it in the sandbox, log per-problem rows + summary."""
    from forge.evals.humaneval import evaluate_completions, generate_completions, load_problems
    from forge.generation import get_backend
    from registry.models import set_version_metrics

    problems = load_problems(cfg.limit)
    tags = {**(lineage or {}), STAGE_TAG: "eval/humaneval", "forge.model": f"{model_name}/{version}"}
    with start_stage_run("eval-humaneval", parent_run_id=parent_run_id, tags=tags) as run:
        backend = get_backend("transformers", model=model_dir, batch_size=cfg.batch_size)
        completions = generate_completions(backend, problems, cfg, temperature=0.0)
        report = evaluate_completions(problems, completions, cfg)
        metrics = {
            "humaneval_pass_at_1": report.pass_at_1,
            "humaneval_passed": float(report.passed),
            "humaneval_n": float(report.n),
        }
        mlflow.log_metrics(metrics)
        log_table(report.table(), "humaneval_results.json")
    set_version_metrics(model_name, version, {"humaneval_pass_at_1": report.pass_at_1})
    return {"metrics": metrics, "run_id": run.info.run_id}
