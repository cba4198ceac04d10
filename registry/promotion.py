"""The promotion gate: a pure decision over the profile's declared metrics, and the thin adapter that moves aliases.

    from registry.promotion import decide_promotion, promote, rollback
    decision = promote(client, "forge-policy", cfg.promotion)      # candidate alias vs champion alias
    rollback(client, "forge-policy")                               # champion back to the one before

Aliases: ``candidate`` (set by the training flow), ``champion`` (what serves), ``previous-champion``. Every
champion a promotion replaces is pushed onto a history kept in the registered model's tag
``forge.champion_history`` (a JSON list), so rollback can be repeated. Every decision is recorded on the
candidate version's tags (``promotion.*``) and every rollback on the restored version's (``rollback.*``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

from mlflow import MlflowClient

from forge.config import PromotionConfig
from registry.models import get_alias_version, version_metrics

CANDIDATE, CHAMPION, PREVIOUS = "candidate", "champion", "previous-champion"
HISTORY_TAG = "forge.champion_history"
MAX_HISTORY = 100  # a model tag holds at most 5000 characters; older entries are dropped first
_EPS = 1e-12  # float noise: a candidate exactly at the tolerance edge passes


class RollbackError(RuntimeError):
    """There is no previous champion to roll back to."""


@dataclass(frozen=True)
class Decision:
    promote: bool
    reasons: list[str]
    compared: dict[str, dict] = field(default_factory=dict)  # metric -> candidate, champion, tolerance, ok
    unchanged: bool = False  # the candidate already was the champion: nothing was decided or recorded


def decide_promotion(
    candidate: dict[str, float], champion: dict[str, float] | None, policy: PromotionConfig
) -> Decision:
    """Compare the metrics the profile declares (``policy.metrics``: name → direction, tolerance), nothing else.

    Promote when there is no champion, or when on every declared metric the candidate is not worse than the
    champion by more than that metric's tolerance. A declared metric the candidate lacks (or has as NaN) refuses
    the promotion: an eval that did not run is not a pass. A declared metric the champion lacks is not compared.
    Metrics a version carries without being declared (a stage's own diagnostics, an eval the profile does not gate
    on) neither block nor pass a candidate; the reasons list them as ignored.
    """
    ignored = sorted((set(candidate) | set(champion or {})) - set(policy.metrics))
    note = [f"ignored (not declared in promotion.metrics): {', '.join(ignored)}"] if ignored else []
    if champion is None:
        return Decision(True, ["first candidate: there is no champion to compare with", *note])
    reasons: list[str] = []
    compared: dict[str, dict] = {}
    for metric, gate in sorted(policy.metrics.items()):
        value, best = candidate.get(metric), champion.get(metric)
        if value is None or math.isnan(value):
            compared[metric] = {"candidate": None, "champion": best, "tolerance": gate.tolerance, "ok": False}
            reasons.append(f"{metric}: the candidate has no value (an eval that did not run is not a pass)")
            continue
        if best is None or math.isnan(best):
            reasons.append(f"{metric}: {value:.4g}, not compared (the champion has no value)")
            continue
        worse_by = (value - best) if gate.direction == "lower" else (best - value)
        ok = worse_by <= gate.tolerance + _EPS
        compared[metric] = {"candidate": value, "champion": best, "tolerance": gate.tolerance, "ok": ok}
        verdict = "ok" if ok else f"worse by {worse_by:.4g} > tolerance {gate.tolerance:g}"
        reasons.append(f"{metric}: {value:.4g} vs champion {best:.4g} ({gate.direction} is better): {verdict}")
    return Decision(all(c["ok"] for c in compared.values()), reasons + note, compared)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _history(client: MlflowClient, name: str) -> list[str]:
    return json.loads(client.get_registered_model(name).tags.get(HISTORY_TAG, "[]"))


def _set_history(client: MlflowClient, name: str, history: list[str]) -> None:
    client.set_registered_model_tag(name, HISTORY_TAG, json.dumps(history[-MAX_HISTORY:]))


def promote(
    client: MlflowClient, model_name: str, policy: PromotionConfig, version: str | int | None = None
) -> Decision:
    """Gate ``version`` (default: the ``candidate`` alias) against the ``champion`` alias and, if it passes,
    make it the champion. The decision is recorded on the candidate version either way."""
    if version is None:
        version = get_alias_version(model_name, CANDIDATE, client=client)
        if version is None:
            raise ValueError(f"{model_name}: no version given and no '{CANDIDATE}' alias set")
    version = str(version)
    champion = get_alias_version(model_name, CHAMPION, client=client)
    if champion == version:
        # A re-run of an unchanged recipe proposes the same version again: keep its original decision record.
        return Decision(True, [f"version {version} is already the champion"], unchanged=True)
    champion_metrics = version_metrics(model_name, champion, client=client) if champion else None
    decision = decide_promotion(version_metrics(model_name, version, client=client), champion_metrics, policy)
    for key, value in {
        "promotion.decision": "promoted" if decision.promote else "refused",
        "promotion.reasons": json.dumps(decision.reasons),
        "promotion.compared_to": champion or "none",
        "promotion.at": _now(),
    }.items():
        client.set_model_version_tag(model_name, version, key, value)
    if decision.promote:
        if champion is not None:
            _set_history(client, model_name, [*_history(client, model_name), champion])
            client.set_registered_model_alias(model_name, PREVIOUS, champion)
        client.set_registered_model_alias(model_name, CHAMPION, version)
    return decision


def rollback(client: MlflowClient, model_name: str) -> str:
    """Make the champion before the current one the champion again; returns its version. Repeatable while the
    history lasts; raises :class:`RollbackError` when there is nothing to roll back to."""
    history = _history(client, model_name)
    if not history:
        raise RollbackError(
            f"{model_name}: no previous champion to roll back to (no promotion has replaced a champion yet)"
        )
    restored = history.pop()
    current = get_alias_version(model_name, CHAMPION, client=client)
    client.set_registered_model_alias(model_name, CHAMPION, restored)
    _set_history(client, model_name, history)
    if history:
        client.set_registered_model_alias(model_name, PREVIOUS, history[-1])
    else:
        client.delete_registered_model_alias(model_name, PREVIOUS)
    client.set_model_version_tag(model_name, restored, "rollback.restored_at", _now())
    client.set_model_version_tag(model_name, restored, "rollback.replaced", current or "none")
    if current is not None:
        client.set_model_version_tag(model_name, current, "rollback.demoted_at", _now())
    return restored
