"""Prefect task for the release step: mark the new version `candidate`, then let the gate decide on `champion`."""

from __future__ import annotations

from forge.config import PromotionConfig
from forge.stages import Checkpoint, Release
from tasks._cache import uncached_task


@uncached_task(name="promote")
def promote_task(*, candidate: Checkpoint, policy: PromotionConfig) -> Release:
    """Alias ``candidate`` to the version, then the gate of ``registry.promotion`` (the profile's declared metrics)
    moves ``champion`` to it or refuses; the decision is recorded on the version either way."""
    from forge.workspace import Workspace
    from registry.models import set_alias
    from registry.promotion import promote
    from registry.tracking import init_mlflow

    client = init_mlflow(Workspace.from_env())
    set_alias(candidate.model_name, "candidate", candidate.version)
    decision = promote(client, candidate.model_name, policy, version=candidate.version)
    outcome = "already champion" if decision.unchanged else "promoted" if decision.promote else "refused"
    return Release(model_name=candidate.model_name, version=candidate.version, promoted=decision.promote,
                   outcome=outcome, reasons=list(decision.reasons))
