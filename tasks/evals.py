"""Prefect tasks for evaluation: HumanEval pass@1 and the code suite (MBPP + Forge problems) of a registered
checkpoint, code run only in the sandbox. Each stores its summary on the version as ``metric.*`` tags, where the
promotion gate reads the ones the profile declares."""

from __future__ import annotations

import mlflow

from forge.config import CodeSuiteConfig, HumanEvalConfig
from forge.stages import Checkpoint, EvalReport
from registry.tracking import STAGE_TAG, StageContext, log_table
from tasks._cache import cached_task

MODEL_TAG = "forge.model"


@cached_task(
    name="eval-humaneval",
    modules=("forge.evals.humaneval", "forge.code.sandbox", "forge.generation.transformers_backend"),
)
def humaneval_task(*, ctx: StageContext, model: Checkpoint, cfg: HumanEvalConfig) -> EvalReport:
    """Generate one greedy completion per problem, judge it in the sandbox, log per-problem rows + summary."""
    from forge.evals.humaneval import evaluate_completions, generate_completions, load_problems
    from forge.generation import get_backend
    from registry.models import set_version_metrics

    problems = load_problems(cfg.limit)
    with ctx.start_run("eval-humaneval", {STAGE_TAG: "eval/humaneval", MODEL_TAG: model.ref}) as run:
        backend = get_backend("transformers", model=model.model_dir, batch_size=cfg.batch_size)
        completions = generate_completions(backend, problems, cfg, temperature=0.0)
        report = evaluate_completions(problems, completions, cfg)
        metrics = {"humaneval_pass_at_1": report.pass_at_1, "humaneval_passed": float(report.passed),
                   "humaneval_n": float(report.n)}
        mlflow.log_metrics(metrics)
        log_table(report.table(), "humaneval_results.json")
    set_version_metrics(model.model_name, model.version, {"humaneval_pass_at_1": report.pass_at_1})
    return EvalReport(suite="humaneval", model=model.ref, run_id=run.info.run_id, metrics=metrics)


@cached_task(
    name="eval-code-suite",
    modules=("forge.evals.code", "forge.code.judge", "forge.code.runner", "forge.generation.transformers_backend"),
)
def code_suite_task(*, ctx: StageContext, model: Checkpoint, cfg: CodeSuiteConfig) -> EvalReport:
    """Greedy answers to MBPP + Forge's problems (and HumanEval when listed), pass@1 on Forge's judge."""
    from forge.evals.code import evaluate_code_suite
    from forge.generation import get_backend
    from registry.models import set_version_metrics

    with ctx.start_run("eval-code", {STAGE_TAG: "eval/code", MODEL_TAG: model.ref}) as run:
        backend = get_backend("transformers", model=model.model_dir, batch_size=cfg.batch_size)
        report = evaluate_code_suite(backend, cfg)
        metrics = report.metrics()
        mlflow.log_metrics(metrics)
        log_table(report.table(), "code_suite_results.json")
    pass_at_1 = {k: v for k, v in metrics.items() if k.endswith("_pass_at_1")}
    set_version_metrics(model.model_name, model.version, pass_at_1)
    return EvalReport(suite="code", model=model.ref, run_id=run.info.run_id, metrics=metrics)
