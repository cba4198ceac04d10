"""Prefect tasks for evaluation: HumanEval pass@1 and the code suite (MBPP + Forge problems) of a registered
checkpoint, code run only in the sandbox."""

from __future__ import annotations

import mlflow

from forge.config import CodeSuiteConfig, HumanEvalConfig
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


@cached_task(
    name="eval-code-suite",
    modules=("forge.evals.code", "forge.code.judge", "forge.code.runner", "forge.generation.transformers_backend"),
)
def code_suite_task(
    model_dir: str,
    model_name: str,
    version: str,
    cfg: CodeSuiteConfig,
    parent_run_id: str | None = None,
    lineage: dict | None = None,
) -> dict:
    """Greedy answers to MBPP + Forge's problems (and HumanEval when listed), pass@1 on Forge's judge."""
    from forge.evals.code import evaluate_code_suite
    from forge.generation import get_backend
    from registry.models import set_version_metrics

    tags = {**(lineage or {}), STAGE_TAG: "eval/code", "forge.model": f"{model_name}/{version}"}
    with start_stage_run("eval-code", parent_run_id=parent_run_id, tags=tags) as run:
        backend = get_backend("transformers", model=model_dir, batch_size=cfg.batch_size)
        report = evaluate_code_suite(backend, cfg)
        metrics = report.metrics()
        mlflow.log_metrics(metrics)
        log_table(report.table(), "code_suite_results.json")
    set_version_metrics(model_name, version, {k: v for k, v in metrics.items() if k.endswith("_pass_at_1")})
    return {"metrics": metrics, "run_id": run.info.run_id}
