"""The promotion gate: a pure decision over the profile's metric matrix, and the thin adapter that moves aliases.

    from registry.promotion import decide_promotion, promote, rollback, sign_off
    sign_off(client, "forge-policy", "7", by="ana")                 # only where policy.require_signoff
    decision = promote(client, "forge-policy", cfg.promotion)      # candidate alias vs champion alias
    rollback(client, "forge-policy")                               # champion back to the one before

The matrix (``PromotionConfig``, forge/config.py): every declared metric has a direction, a tolerance, a weight
and the domain it measures. A candidate is promoted when

1. it carries every declared metric (an eval that did not run is not a pass; this holds for the first one too),
2. no metric is worse than the champion's beyond its tolerance, whatever the others gained,
3. the weighted aggregate ``Σ weight × improvement`` (improvement: candidate − champion where higher is better,
   champion − candidate where lower is) over the weighted metrics both versions carry is above
   ``policy.tie_tolerance``; within it the aggregate is a tie, promoted only with ``on_tie: promote``. With no
   weighted metric declared, or none the champion carries, this rule does not apply;
4. where ``policy.require_signoff``, a person signed the version off (``forge signoff VERSION --by NAME``).

Aliases: ``candidate`` (set by the training flow), ``champion`` (what serves), ``previous-champion``. Every
champion a promotion replaces is pushed onto a history kept in the registered model's tag
``forge.champion_history`` (a JSON list), so rollback can be repeated. Every decision is recorded on the
candidate version's tags: ``promotion.decision``, ``.reasons``, ``.compared_to``, ``.at``, ``.aggregate`` and
``.evidence`` (per metric: candidate, champion, tolerance, weight, domain, ok); every rollback on the restored
version's (``rollback.*``). Promotions and rollbacks of one model take turns (registry/locks.py), so two at once
leave one champion and a history with both moves in it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

from mlflow import MlflowClient

from forge.config import GatedMetric, PromotionConfig
from registry.locks import LOCK_TIMEOUT_S, promotion_lock, registry_uri
from registry.models import get_alias_version, version_metrics

CANDIDATE, CHAMPION, PREVIOUS = "candidate", "champion", "previous-champion"
HISTORY_TAG = "forge.champion_history"
SIGNOFF_TAG, SIGNOFF_AT_TAG, SIGNOFF_NOTE_TAG = "promotion.signoff", "promotion.signoff_at", "promotion.signoff_note"
MAX_HISTORY = 100  # a model tag holds at most 5000 characters; older entries are dropped first
MAX_TAG_CHARS = 5000  # MLflow's limit on a tag value
_EPS = 1e-12  # float noise: a candidate exactly at the tolerance edge passes


class RollbackError(RuntimeError):
    """There is no previous champion to roll back to."""


@dataclass(frozen=True)
class Decision:
    promote: bool
    reasons: list[str]
    # every declared metric -> candidate, champion, tolerance, weight, domain, ok (False: it blocks the candidate)
    compared: dict[str, dict] = field(default_factory=dict)
    aggregate: float | None = None  # Σ weight × improvement; None where the aggregate rule did not apply
    unchanged: bool = False  # the candidate already was the champion: nothing was decided or recorded


def _value(scores: dict[str, float] | None, metric: str) -> float | None:
    value = (scores or {}).get(metric)
    return None if value is None or math.isnan(value) else value


def _improvement(gate: GatedMetric, value: float, best: float) -> float:
    """How much better ``value`` is than ``best`` on this metric (negative: worse)."""
    return value - best if gate.direction == "higher" else best - value


def _judge_aggregate(terms: dict[str, float], policy: PromotionConfig) -> tuple[bool, float | None, str]:
    """Rule 3 of the module docstring over ``terms`` (metric → weight × improvement, the weighted metrics both
    versions carry): passes?, the aggregate (None where the rule does not apply), and the reason."""
    if not any(gate.weight > 0 for gate in policy.metrics.values()):
        return True, None, "aggregate: not applied (no declared metric has a weight: each one is a guard only)"
    if not terms:
        return True, None, "aggregate: not applied (the champion carries none of the weighted metrics)"
    aggregate = sum(terms.values())
    rule = f"aggregate {aggregate:+.4g} = Σ weight × improvement over {', '.join(terms)}"
    if aggregate > policy.tie_tolerance:
        return True, aggregate, f"{rule}: better than the champion"
    if aggregate < -policy.tie_tolerance:
        return False, aggregate, f"{rule}: worse than the champion overall (it must be > 0)"
    wins = policy.on_tie == "promote"
    outcome = "the newer version wins" if wins else "the champion stays (it must be > 0)"
    tie = f"a tie (|aggregate| ≤ {policy.tie_tolerance:g}), on_tie={policy.on_tie}"
    return wins, aggregate, f"{rule}: {tie}: {outcome}"


def decide_promotion(
    candidate: dict[str, float],
    champion: dict[str, float] | None,
    policy: PromotionConfig,
    *,
    signed_off_by: str | None = None,
    version: str = "VERSION",
) -> Decision:
    """Judge ``candidate``'s metrics against ``champion``'s (None: there is none yet) by the four rules of the module
    docstring, on the metrics the profile declares (``policy.metrics``) and nothing else.

    A declared metric the champion lacks is not compared and does not count in the aggregate. Metrics a version
    carries without being declared (a stage's own diagnostics, an eval the profile does not gate on) neither block
    nor pass a candidate; the reasons list them as ignored. ``signed_off_by`` is who signed the candidate off (its
    ``promotion.signoff`` tag); ``version`` only names the candidate in the sign-off hint.
    """
    reasons = [] if champion is not None else ["first candidate: there is no champion to compare with"]
    compared: dict[str, dict] = {}
    terms: dict[str, float] = {}
    for metric, gate in sorted(policy.metrics.items()):
        value, best = _value(candidate, metric), _value(champion, metric)
        name = f"{metric} ({gate.domain})" if gate.domain else metric
        ok = value is not None
        if value is None:
            reasons.append(f"{name}: the candidate has no value (an eval that did not run is not a pass)")
        elif champion is None:
            reasons.append(f"{name}: {value:.4g}")
        elif best is None:
            reasons.append(f"{name}: {value:.4g}, not compared (the champion has no value)")
        else:
            gain = _improvement(gate, value, best)
            ok = -gain <= gate.tolerance + _EPS
            if gate.weight > 0:
                terms[metric] = gate.weight * gain
            verdict = "ok" if ok else f"worse by {-gain:.4g} > tolerance {gate.tolerance:g}"
            reasons.append(f"{name}: {value:.4g} vs champion {best:.4g} ({gate.direction} is better): {verdict}")
        compared[metric] = {
            "candidate": value,
            "champion": best,
            "tolerance": gate.tolerance,
            "weight": gate.weight,
            "domain": gate.domain,
            "ok": ok,
        }
    aggregate_ok, aggregate = True, None
    if champion is not None:
        aggregate_ok, aggregate, reason = _judge_aggregate(terms, policy)
        reasons.append(reason)
    signed_off = signed_off_by is not None and signed_off_by.strip() != ""
    if signed_off:
        reasons.append(f"signed off by {signed_off_by}")
    elif policy.require_signoff:
        reasons.append(f"awaiting human sign-off (forge signoff {version} --by NAME)")
    ignored = sorted((set(candidate) | set(champion or {})) - set(policy.metrics))
    if ignored:
        reasons.append(f"ignored (not declared in promotion.metrics): {', '.join(ignored)}")
    promote = all(c["ok"] for c in compared.values()) and aggregate_ok and (signed_off or not policy.require_signoff)
    return Decision(promote, reasons, compared, aggregate)


def capped_json(items: list, limit: int = MAX_TAG_CHARS) -> str:
    """``items`` as a JSON list of at most ``limit`` characters: trailing items are dropped and a last one says how
    many, so the tag stays valid JSON (order the items most important first)."""
    kept, text = list(items), json.dumps(items)
    while len(text) > limit and kept:
        kept.pop()
        text = json.dumps([*kept, f"{len(items) - len(kept)} more left out (a tag holds {limit} characters)"])
    return text


def evidence(decision: Decision) -> list[dict]:
    """One row per declared metric, the blocking ones first: what ``promotion.evidence`` records."""
    rows = [{"metric": metric, **entry} for metric, entry in decision.compared.items()]
    return sorted(rows, key=lambda row: row["ok"])


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _history(client: MlflowClient, name: str) -> list[str]:
    return json.loads(client.get_registered_model(name).tags.get(HISTORY_TAG, "[]"))


def _set_history(client: MlflowClient, name: str, history: list[str]) -> None:
    client.set_registered_model_tag(name, HISTORY_TAG, json.dumps(history[-MAX_HISTORY:]))


def sign_off(client: MlflowClient, model_name: str, version: str | int, by: str, note: str | None = None) -> None:
    """Record that ``by`` (a person) approves ``version`` for promotion: tags ``promotion.signoff`` (who),
    ``promotion.signoff_at`` and, with a note, ``promotion.signoff_note``. A policy with ``require_signoff`` refuses
    versions without it; the next ``promote`` of the version reads it."""
    if not by.strip():
        raise ValueError("sign-off needs the name of who signs (--by NAME)")
    version = str(version)
    client.get_model_version(model_name, version)  # a version that does not exist is an error, not a new tag
    client.set_model_version_tag(model_name, version, SIGNOFF_TAG, by.strip())
    client.set_model_version_tag(model_name, version, SIGNOFF_AT_TAG, _now())
    if note:
        client.set_model_version_tag(model_name, version, SIGNOFF_NOTE_TAG, note[:MAX_TAG_CHARS])


def promote(
    client: MlflowClient,
    model_name: str,
    policy: PromotionConfig,
    version: str | int | None = None,
    *,
    lock_timeout_s: float = LOCK_TIMEOUT_S,
) -> Decision:
    """Gate ``version`` (default: the ``candidate`` alias) against the ``champion`` alias and, if it passes,
    make it the champion. The decision is recorded on the candidate version either way.

    Reading the champion, deciding and moving the aliases happen under the model's promotion lock
    (registry/locks.py): a second promoter waits, then judges its candidate against the champion the first left.
    """
    with promotion_lock(registry_uri(client), model_name, timeout_s=lock_timeout_s):
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
        signed_off_by = client.get_model_version(model_name, version).tags.get(SIGNOFF_TAG)
        decision = decide_promotion(
            version_metrics(model_name, version, client=client),
            champion_metrics,
            policy,
            signed_off_by=signed_off_by,
            version=version,
        )
        for key, value in {
            "promotion.decision": "promoted" if decision.promote else "refused",
            "promotion.reasons": capped_json(decision.reasons),
            "promotion.compared_to": champion or "none",
            "promotion.at": _now(),
            "promotion.aggregate": "n/a" if decision.aggregate is None else repr(decision.aggregate),
            "promotion.evidence": capped_json(evidence(decision)),
        }.items():
            client.set_model_version_tag(model_name, version, key, value)
        if decision.promote:
            if champion is not None:
                _set_history(client, model_name, [*_history(client, model_name), champion])
                client.set_registered_model_alias(model_name, PREVIOUS, champion)
            client.set_registered_model_alias(model_name, CHAMPION, version)
        return decision


def rollback(client: MlflowClient, model_name: str, *, lock_timeout_s: float = LOCK_TIMEOUT_S) -> str:
    """Make the champion before the current one the champion again; returns its version. Repeatable while the
    history lasts; raises :class:`RollbackError` when there is nothing to roll back to. Takes the promotion lock."""
    with promotion_lock(registry_uri(client), model_name, timeout_s=lock_timeout_s):
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
