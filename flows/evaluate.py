"""Evaluation flow: HumanEval pass@1 and the code suite (MBPP + Forge problems, pass@1), both on Forge's judge.
Also deployable on its own (infra/prefect.yaml) to evaluate any registered version."""

from __future__ import annotations

from prefect import flow

from flows._progress import run_stage
from forge.config import RecipeConfig, load_profile
from tasks.evals import code_suite_task, humaneval_task


@flow(name="evaluate")
def evaluate_flow(
    config: RecipeConfig,
    model_dir: str,
    model_name: str = "forge-policy",
    version: str = "",
    parent_run_id: str | None = None,
    lineage: dict | None = None,
) -> dict:
    he = run_stage(
        "eval-humaneval",
        humaneval_task,
        model_dir,
        model_name,
        version,
        config.eval.humaneval,
        parent_run_id=parent_run_id,
        lineage=lineage,
    )
    code = run_stage(
        "eval-code",
        code_suite_task,
        model_dir,
        model_name,
        version,
        config.eval.code,
        parent_run_id=parent_run_id,
        lineage=lineage,
    )
    return {**he["metrics"], **{k: v for k, v in code["metrics"].items() if k.endswith("_pass_at_1")}}


@flow(name="evaluate-registered")
def evaluate_registered(profile: str = "tiny", model_name: str = "forge-policy", alias: str = "candidate") -> dict:
    """Evaluate the version behind ``models:/<model_name>@<alias>`` (the scheduled `evaluate` deployment)."""
    from forge.workspace import Workspace
    from registry.models import download_checkpoint, get_alias_version
    from registry.tracking import init_mlflow

    init_mlflow(Workspace.from_env())
    version = get_alias_version(model_name, alias)
    if version is None:
        raise ValueError(f"models:/{model_name}@{alias} does not exist: run the recipe first")
    local = download_checkpoint(f"models:/{model_name}/{version}")
    return evaluate_flow(load_profile(profile), str(local), model_name, version)
