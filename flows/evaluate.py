"""Evaluation flow: HumanEval pass@1 and the code suite (MBPP + Forge problems, pass@1), both on Forge's judge.
Also deployable on its own (infra/prefect.yaml) to evaluate any registered version."""

from __future__ import annotations

from prefect import flow
from prefect.runtime import flow_run

from flows._stages import RecipeRun
from forge.config import RecipeConfig, load_profile
from forge.stages import Checkpoint, EvalReport
from tasks.evals import code_suite_task, humaneval_task


@flow(name="evaluate")
def evaluate_flow(config: RecipeConfig, run: RecipeRun, *, model: Checkpoint) -> list[EvalReport]:
    return [
        run.stage("eval-humaneval", humaneval_task, model=model, cfg=config.eval.humaneval),
        run.stage("eval-code", code_suite_task, model=model, cfg=config.eval.code),
    ]


@flow(name="evaluate-registered")
def evaluate_registered(profile: str = "tiny", model_name: str = "forge-policy", alias: str = "candidate"
                        ) -> list[EvalReport]:
    """Evaluate the version behind ``models:/<model_name>@<alias>`` (the scheduled `evaluate` deployment)."""
    from forge.workspace import Workspace
    from registry.models import download_checkpoint, get_alias_version
    from registry.tracking import FLOW_RUN_ID_TAG, PROFILE_TAG, StageContext, init_mlflow

    init_mlflow(Workspace.from_env())
    version = get_alias_version(model_name, alias)
    if version is None:
        raise ValueError(f"models:/{model_name}@{alias} does not exist: run the recipe first")
    local = download_checkpoint(f"models:/{model_name}/{version}")
    model = Checkpoint(model_dir=str(local), model_name=model_name, version=version)
    run = RecipeRun(StageContext(tags={FLOW_RUN_ID_TAG: str(flow_run.id), PROFILE_TAG: profile}))
    return evaluate_flow(load_profile(profile), run, model=model)
