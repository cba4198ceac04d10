"""Prefect task for the release step: mark the new version `candidate`, then let the gate decide on `champion`."""

from __future__ import annotations

from prefect import task

from forge.config import PromotionConfig


@task(name="promote")
def promote_task(model_name: str, version: str, policy: PromotionConfig) -> dict:
    from forge.workspace import Workspace
    from registry.models import set_alias
    from registry.promotion import promote
    from registry.tracking import init_mlflow

    client = init_mlflow(Workspace.from_env())
    set_alias(model_name, "candidate", version)
    decision = promote(client, model_name, policy, version=version)
    outcome = "already champion" if decision.unchanged else "promoted" if decision.promote else "refused"
    return {"promoted": decision.promote, "outcome": outcome, "reasons": list(decision.reasons), "version": version}
