"""Prefect tasks for the evaluation matrix (§3; forge/evals/domains.py has the contract): HumanEval and the code
suite on the judge (code run only in the sandbox), then math, science, tool use, alignment and deep search
(forge/evals/suites.py), then the report (forge/evals/report.py). Each suite's run logs its per-item table
(``eval_items.json``) and summary; the version gets the summary as ``metric.*`` tags, where the promotion gate reads
the ones the profile declares, and the run id as ``eval.<suite>.run_id``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import mlflow

from forge.config import CodeSuiteConfig, GenerationConfig, HumanEvalConfig, SuiteConfig
from forge.evals.domains import ITEMS_ARTIFACT, MODEL_TAG, SUITE_TAG, run_tag
from forge.stages import Checkpoint, EvalReport
from registry.tracking import STAGE_TAG, StageContext, log_table
from tasks._cache import cached_task, uncached_task

JUDGE_TAG = "forge.judge"


def _tags(suite: str, model: Checkpoint) -> dict[str, str]:
    return {STAGE_TAG: f"eval/{suite}", MODEL_TAG: model.ref, SUITE_TAG: suite}


@cached_task(
    name="eval-humaneval",
    modules=("forge.evals.humaneval", "forge.code.sandbox", "forge.generation.transformers_backend"),
)
def humaneval_task(*, ctx: StageContext, model: Checkpoint, cfg: HumanEvalConfig, generation: GenerationConfig
                   ) -> EvalReport:
    """Generate one greedy completion per problem, judge it in the sandbox, log per-problem rows + summary."""
    from forge.evals.humaneval import evaluate_completions, generate_completions, load_problems
    from forge.generation import local_backend

    problems = load_problems(cfg.limit)
    with ctx.start_run("eval-humaneval", _tags("humaneval", model)) as run:
        with local_backend(generation, model.model_dir, batch_size=cfg.batch_size) as backend:
            completions = generate_completions(backend, problems, cfg, temperature=0.0)
        report = evaluate_completions(problems, completions, cfg)
        metrics = {"humaneval_pass_at_1": report.pass_at_1, "humaneval_passed": float(report.passed),
                   "humaneval_n": float(report.n)}
        items = [{"id": r.task_id, "source": "humaneval", "score": float(r.passed), "status": r.status,
                  "error": r.error} for r in report.rows]
        log_table(items, ITEMS_ARTIFACT, metrics=metrics)  # the version gets them from eval-report
    return EvalReport(suite="humaneval", model=model.ref, run_id=run.info.run_id, metrics=metrics)


@cached_task(
    name="eval-code-suite",
    modules=("forge.evals.code", "forge.code.judge", "forge.code.runner", "forge.generation.transformers_backend"),
)
def code_suite_task(*, ctx: StageContext, model: Checkpoint, cfg: CodeSuiteConfig, generation: GenerationConfig
                    ) -> EvalReport:
    """Greedy answers to MBPP + Forge's problems (and HumanEval when listed), pass@1 on Forge's judge."""
    from forge.evals.code import evaluate_code_suite
    from forge.generation import local_backend

    with ctx.start_run("eval-code", _tags("code", model)) as run:
        with local_backend(generation, model.model_dir, batch_size=cfg.batch_size) as backend:
            report = evaluate_code_suite(backend, cfg)
        metrics = report.metrics()
        items = [{"id": r["problem_id"], "source": r["source"], "score": float(r["solved"]), **r}
                 for r in report.table()]
        log_table(items, ITEMS_ARTIFACT, metrics=metrics)  # the version gets them from eval-report
    return EvalReport(suite="code", model=model.ref, run_id=run.info.run_id, metrics=metrics)


@cached_task(name="eval-suite", modules=("forge.evals.suites", "forge.generation.transformers_backend",
                                         "forge.training.pairwise_rm", "forge.search.evaluation"))
def eval_suite_task(*, ctx: StageContext, model: Checkpoint, suite: str, cfg: SuiteConfig,
                    generation: GenerationConfig, seed: int = 0, judge: Checkpoint | None = None) -> EvalReport:
    """Run one model-run suite (math, science, tool_use, alignment, deep_search) on ``model``; alignment needs
    ``judge``, the pair-wise RM that decides each model-vs-reference pair."""
    from forge.generation import local_backend
    from forge.workspace import Workspace

    ws = Workspace.from_env()
    tags = _tags(suite, model) | ({JUDGE_TAG: judge.ref} if judge is not None else {})
    with ctx.start_run(f"eval-{suite}", tags) as run:
        with local_backend(generation, model.model_dir, batch_size=cfg.batch_size) as backend:
            report = run_model_suite(suite, backend, cfg, ws.corpora, ws=ws, seed=seed, judge=judge)
        metrics = {**report.metrics, f"{suite}_seconds": round(report.seconds, 1)}
        log_table(report.rows, ITEMS_ARTIFACT, metrics=metrics)
    return EvalReport(suite=suite, model=model.ref, run_id=run.info.run_id, metrics=metrics)


def run_model_suite(suite: str, backend: Any, cfg: Any, corpora: Path, *, ws: Any = None, seed: int = 0,
                    judge: Checkpoint | None = None) -> Any:
    """Dispatch to forge/evals/suites.py, loading what the suite needs beside the model (the judge, the tools)."""
    from forge.evals import suites

    if suite == "alignment":
        if judge is None:
            raise ValueError("the alignment suite needs a judge: a pair-wise RM checkpoint (forge-rm-pairwise)")
        from forge.training.pairwise_rm import PairwiseScorer

        scorer = PairwiseScorer(judge.model_dir, max_length=cfg.judge_max_length, batch_size=cfg.batch_size)
        return suites.run_alignment(backend, cfg, corpora, scorer)
    if suite == "deep_search":
        from forge.data.corpora import load_multihop_eval
        from forge.search.evaluation import evaluate_deep_search, reachable_multihop
        from forge.search.tools import SearchTools
        from forge.workspace import Workspace

        start = time.monotonic()
        tools = SearchTools.load(ws or Workspace.from_env())
        multihop = reachable_multihop(tools, load_multihop_eval(corpora), cfg.multihop_questions)
        rows, metrics = evaluate_deep_search(
            backend, tools, questions=cfg.questions, max_tool_calls=cfg.max_tool_calls,
            max_new_tokens=cfg.max_new_tokens, min_hops=cfg.min_hops, max_hops=cfg.max_hops, seed=seed,
            multihop=multihop)
        return suites.SuiteReport("deep_search", rows, metrics, time.monotonic() - start)
    runners = {"math": suites.run_math, "science": suites.run_science, "tool_use": suites.run_tool_use}
    if suite not in runners:
        raise ValueError(f"unknown suite {suite!r}; model-run suites: {', '.join(suites.MODEL_SUITES)}")
    return runners[suite](backend, cfg, corpora)


@uncached_task(name="eval-report")
def eval_report_task(*, ctx: StageContext, model: Checkpoint, reports: list[EvalReport]) -> EvalReport:
    """Put every suite's metrics and run id on the model version (what the promotion gate and the report read),
    then the matrix as pictures, before the gate decides: every version's headline metric per domain, and the
    candidate against the champion with paired per-domain deltas (tasks/eval_report.py). Not cached: it reads
    the registry as it is now, and writes the version's tags again on every run (a run killed between a suite
    and this stage leaves a cached suite whose metrics are not on the version yet)."""
    from registry.models import set_version_metrics
    from tasks.eval_report import log_eval_report

    client = mlflow.MlflowClient()
    for report in reports:
        if report.model != model.ref:
            raise ValueError(f"eval-report for {model.ref}: the {report.suite} report is of {report.model}")
        set_version_metrics(model.model_name, model.version, report.metrics, client=client)
        client.set_model_version_tag(model.model_name, model.version, run_tag(report.suite), report.run_id)
    with ctx.start_run("eval-report", {STAGE_TAG: "eval/report", MODEL_TAG: model.ref}) as run:
        logged = log_eval_report(client, model.model_name, model.version)
        mlflow.set_tag("forge.champion", logged["champion"] or "none")
    return EvalReport(suite="report", model=model.ref, run_id=run.info.run_id, metrics={})
