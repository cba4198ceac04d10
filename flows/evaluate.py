"""Evaluation flow: the matrix over the paper's six domains (§3; forge/evals/domains.py): HumanEval and the code
suite on Forge's judge, then math, science, tool use, alignment (judged by the pair-wise RM) and deep search.
Also deployable on its own (infra/prefect.yaml ``evaluate-candidate``): evaluate ``@candidate``, then the gate.
The suites are independent: on a Ray cluster (the profile's ``cluster.ray_address``) they run side by side."""

from __future__ import annotations

import logging

from prefect import flow
from prefect.runtime import flow_run

from flows._stages import RecipeRun
from flows.links import logs_to_flow_run, name_phase_run
from forge.config import ProfileName, RecipeConfig, load_profile
from forge.evals.suites import MODEL_SUITES
from forge.fanout import on_cluster
from forge.stages import Checkpoint, EvalReport
from tasks.evals import code_suite_task, eval_report_task, eval_suite_task, humaneval_task

JUDGE_MODEL = "forge-rm-pairwise"
log = logging.getLogger("forge")


@flow(name="evaluate", flow_run_name=name_phase_run)
def evaluate_flow(config: RecipeConfig, run: RecipeRun, *, model: Checkpoint, judge: Checkpoint) -> list[EvalReport]:
    """Every suite on ``model``; ``judge`` (the pair-wise RM) decides the alignment suite's pairs."""
    gen = {"model": model, "generation": config.generation}  # the profile's backend: vLLM on the GPU profile
    suites = [("eval-humaneval", humaneval_task, {**gen, "cfg": config.eval.humaneval}),
              ("eval-code", code_suite_task, {**gen, "cfg": config.eval.code})]
    for suite in MODEL_SUITES:
        extra = {"judge": judge} if suite == "alignment" else {}
        suites.append((f"eval-{suite}", eval_suite_task, {**gen, "suite": suite, "seed": config.seed,
                                                          "cfg": getattr(config.eval, suite), **extra}))
    reports = run.stages(suites)  # independent: side by side on a Ray cluster (forge/fanout.py)
    run.stage("eval-report", eval_report_task, model=model, reports=reports)
    return reports


def registered(model_name: str, version: str) -> Checkpoint:
    """A registered version as a Checkpoint, its files downloaded once into the workspace (a stable path, so the
    eval tasks' cache keys do not change from one call to the next)."""
    import shutil

    from forge.workspace import Workspace
    from registry.models import download_checkpoint

    dst = Workspace.from_env().models / "registry" / f"{model_name}-{version}"
    if not dst.is_dir():  # downloaded beside, then renamed: a killed download leaves no half folder at dst
        part = dst.with_name(dst.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        download_checkpoint(f"models:/{model_name}/{version}", dst_path=part)
        part.rename(dst)
    return Checkpoint(model_dir=str(download_checkpoint(dst)), model_name=model_name, version=version)


@flow(name="evaluate-registered")
def evaluate_registered(profile: ProfileName = "tiny", model_name: str = "forge-policy", alias: str = "candidate",
                        gate: bool = True) -> list[EvalReport]:
    """Evaluate ``models:/<model_name>@<alias>`` on the whole matrix (the judge: the latest ``forge-rm-pairwise``),
    then, when ``gate``, let the profile's promotion gate decide on it (registry/promotion.py)."""
    from mlflow import MlflowClient

    from forge.workspace import Workspace
    from registry.models import get_alias_version
    from registry.promotion import promote
    from registry.tracking import FLOW_RUN_ID_TAG, PROFILE_TAG, StageContext, init_mlflow

    client = init_mlflow(Workspace.from_env())
    version = get_alias_version(model_name, alias)
    if version is None:
        raise ValueError(f"models:/{model_name}@{alias} does not exist: run the recipe first")
    judges = client.search_model_versions(f"name='{JUDGE_MODEL}'")
    if not judges:
        raise ValueError(f"no {JUDGE_MODEL} version is registered: the alignment suite needs one (run the recipe)")
    judge = registered(JUDGE_MODEL, str(max(int(v.version) for v in judges)))
    cfg = load_profile(profile)
    run = RecipeRun(StageContext(tags={FLOW_RUN_ID_TAG: str(flow_run.id), PROFILE_TAG: profile}))
    with logs_to_flow_run(str(flow_run.id)):
        reports = on_cluster(evaluate_flow, cfg.cluster)(cfg, run, model=registered(model_name, version), judge=judge)
        if gate:
            decision = promote(MlflowClient(), model_name, cfg.promotion, version=version)
            verdict = f"{model_name}/{version}: {'promoted' if decision.promote else 'refused'}: " + "; ".join(
                decision.reasons)
            print(verdict)  # `forge eval matrix` shows it
            log.info(verdict)  # and the Prefect run's logs hold it
    return reports
