"""The promotion gate: the pure decision, one commented row per case, then the adapter on a real MLflow store
(decision tags, sign-off through the CLI) and two promoters in two processes at once, on SQLite and PostgreSQL.

.venv/bin/pytest tests/registry/test_promotion.py -q
"""

import json
import multiprocessing
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forge.cli import app
from forge.config import ConfigError, GatedMetric, PromotionConfig, load_profile
from registry.locks import PromotionLockTimeout, promotion_lock, registry_uri
from registry.models import get_alias_version, set_alias, set_version_metrics
from registry.promotion import (
    HISTORY_TAG,
    MAX_TAG_CHARS,
    SIGNOFF_TAG,
    capped_json,
    decide_promotion,
    evidence,
    promote,
    rollback,
)

HE, LOSS, OTHER, UNDECLARED = "humaneval_pass_at_1", "sft_heldout_loss", "search_accuracy", "reward_last20"
MATH = "math_accuracy"
POLICY = PromotionConfig(
    metrics={
        HE: GatedMetric(direction="higher", tolerance=0.02),
        LOSS: GatedMetric(direction="lower"),
        OTHER: GatedMetric(direction="higher"),
    }
)  # guards only (no weights): the aggregate rule does not apply

CASES = [
    # (candidate, champion, promote)
    # no champion yet: the first candidate is promoted whatever it scores, once every declared eval ran
    ({HE: 0.0, LOSS: 9.0, OTHER: 0.0}, None, True),
    # no champion yet, but a declared metric is missing: even the first candidate is refused
    ({HE: 0.9, LOSS: 2.0}, None, False),
    # no champion yet, a NaN score: as missing
    ({HE: 0.9, LOSS: float("nan"), OTHER: 0.5}, None, False),
    # equal on every metric: not worse, promoted (no weights, so no aggregate to improve)
    ({HE: 0.30, LOSS: 2.0, OTHER: 0.5}, {HE: 0.30, LOSS: 2.0, OTHER: 0.5}, True),
    # better on every metric (higher pass@1, lower loss)
    ({HE: 0.35, LOSS: 1.8, OTHER: 0.6}, {HE: 0.30, LOSS: 2.0, OTHER: 0.5}, True),
    # worse within the per-metric tolerance (0.02 on pass@1)
    ({HE: 0.285, LOSS: 2.0, OTHER: 0.5}, {HE: 0.30, LOSS: 2.0, OTHER: 0.5}, True),
    # exactly at the tolerance edge: still within it
    ({HE: 0.28, LOSS: 2.0, OTHER: 0.5}, {HE: 0.30}, True),
    # worse beyond the tolerance
    ({HE: 0.27, LOSS: 2.0, OTHER: 0.5}, {HE: 0.30, LOSS: 2.0}, False),
    # lower-is-better metric got higher (worse), tolerance 0: refused even though pass@1 improved
    ({HE: 0.40, LOSS: 2.1, OTHER: 0.5}, {HE: 0.30, LOSS: 2.0}, False),
    # lower-is-better metric got lower (better)
    ({HE: 0.3, LOSS: 1.5, OTHER: 0.5}, {LOSS: 2.0}, True),
    # a declared metric with tolerance 0: any drop refuses
    ({HE: 0.3, LOSS: 2.0, OTHER: 0.499}, {HE: 0.3, LOSS: 2.0, OTHER: 0.5}, False),
    # a declared metric the candidate lacks: an eval that did not run is not a pass
    ({HE: 0.9, OTHER: 0.5}, {HE: 0.3, LOSS: 2.0, OTHER: 0.5}, False),
    # a NaN score counts as missing
    ({HE: float("nan"), LOSS: 2.0, OTHER: 0.5}, {HE: 0.3, LOSS: 2.0, OTHER: 0.5}, False),
    # a declared metric the champion lacks is not compared
    ({HE: 0.3, LOSS: 2.0, OTHER: 0.0}, {HE: 0.3, LOSS: 2.0}, True),
]


@pytest.mark.parametrize("candidate, champion, promote", CASES)
def test_decide_promotion(candidate, champion, promote):
    decision = decide_promotion(candidate, champion, POLICY)
    assert decision.promote is promote, decision.reasons
    assert decision.reasons and decision.aggregate is None
    assert set(decision.compared) == set(POLICY.metrics)  # the evidence covers every declared metric
    assert all(c["ok"] for c in decision.compared.values()) is promote  # guards only: a refusal names a metric


def test_refusal_names_the_offending_metric():
    decision = decide_promotion({HE: 0.40, LOSS: 2.5, OTHER: 0.5}, {HE: 0.30, LOSS: 2.0, OTHER: 0.5}, POLICY)
    assert not decision.promote
    assert decision.compared[LOSS]["ok"] is False and decision.compared[HE]["ok"] is True
    assert any(r.startswith(LOSS) and "worse by 0.5" in r for r in decision.reasons)


def test_without_weights_the_aggregate_rule_says_it_does_not_apply():
    decision = decide_promotion({HE: 0.3, LOSS: 2.0, OTHER: 0.5}, {HE: 0.3, LOSS: 2.0, OTHER: 0.5}, POLICY)
    assert decision.promote and any(
        r.startswith("aggregate: not applied (no declared metric has a weight") for r in decision.reasons
    )


MATRIX = PromotionConfig(
    metrics={
        HE: GatedMetric(direction="higher", tolerance=0.02, weight=1, domain="code"),
        MATH: GatedMetric(direction="higher", tolerance=0.02, weight=1, domain="math"),
        LOSS: GatedMetric(direction="lower", tolerance=0.05, domain="general"),  # weight 0: a guard only
    }
)
TIES_PROMOTE = MATRIX.model_copy(update={"on_tie": "promote"})
COARSE_TIES = MATRIX.model_copy(update={"tie_tolerance": 0.01})
MATH_HEAVY = PromotionConfig(
    metrics={**MATRIX.metrics, MATH: GatedMetric(direction="higher", tolerance=0.02, weight=3, domain="math")}
)
CHAMPION = {HE: 0.30, MATH: 0.50, LOSS: 2.0}

MATRIX_CASES = [
    # (candidate, policy, promote, aggregate)
    # better on both weighted metrics: +0.05 + 0.05
    ({HE: 0.35, MATH: 0.55, LOSS: 2.0}, MATRIX, True, 0.10),
    # code down within its tolerance, math up by more: +0.01 overall
    ({HE: 0.29, MATH: 0.52, LOSS: 2.0}, MATRIX, True, 0.01),
    # code down within its tolerance, math up by less: −0.005 overall, refused though no metric broke its tolerance
    ({HE: 0.285, MATH: 0.51, LOSS: 2.0}, MATRIX, False, -0.005),
    # equal on every metric: a tie, and a tie keeps the champion by default
    (CHAMPION, MATRIX, False, 0.0),
    # the same tie with on_tie: promote moves to the newer version
    (CHAMPION, TIES_PROMOTE, True, 0.0),
    # a gain and an equal loss cancel out (to float noise): a tie too
    ({HE: 0.32, MATH: 0.48, LOSS: 2.0}, MATRIX, False, 0.0),
    # a gain inside a wider tie_tolerance is a tie
    ({HE: 0.305, MATH: 0.50, LOSS: 2.0}, COARSE_TIES, False, 0.005),
    # a gain beyond it is not
    ({HE: 0.32, MATH: 0.50, LOSS: 2.0}, COARSE_TIES, True, 0.02),
    # a guard (weight 0) that improves does not count: still a tie on the weighted metrics
    ({HE: 0.30, MATH: 0.50, LOSS: 1.0}, MATRIX, False, 0.0),
    # a guard worse beyond its tolerance refuses whatever the aggregate
    ({HE: 0.50, MATH: 0.70, LOSS: 2.06}, MATRIX, False, 0.40),
    # a domain (math) worse beyond its tolerance refuses however much the other gained
    ({HE: 0.90, MATH: 0.47, LOSS: 2.0}, MATRIX, False, 0.57),
    # weights scale improvements: math weighs 3, so −0.01 on math outweighs +0.02 on code
    ({HE: 0.32, MATH: 0.49, LOSS: 2.0}, MATH_HEAVY, False, -0.01),
    # the same candidate with equal weights: +0.01 overall
    ({HE: 0.32, MATH: 0.49, LOSS: 2.0}, MATRIX, True, 0.01),
]


@pytest.mark.parametrize("candidate, policy, promote, aggregate", MATRIX_CASES)
def test_the_weighted_aggregate_must_improve(candidate, policy, promote, aggregate):
    decision = decide_promotion(candidate, CHAMPION, policy)
    assert decision.promote is promote, decision.reasons
    assert decision.aggregate == pytest.approx(aggregate, abs=1e-9)
    rule = next(r for r in decision.reasons if r.startswith("aggregate"))
    assert f"over {HE}, {MATH}" in rule and "Σ weight × improvement" in rule  # the value and the rule, stated


def test_a_champion_without_the_weighted_metrics_is_not_compared_on_them():
    decision = decide_promotion({HE: 0.30, MATH: 0.50, LOSS: 2.0}, {LOSS: 2.0}, MATRIX)
    assert decision.promote and decision.aggregate is None, decision.reasons
    assert "aggregate: not applied (the champion carries none of the weighted metrics)" in decision.reasons


SIGNED = MATRIX.model_copy(update={"require_signoff": True})


@pytest.mark.parametrize(
    "champion, signed_off_by, promote",
    [
        (CHAMPION, None, False),  # better, but nobody signed it off
        (CHAMPION, "  ", False),  # a blank name is no sign-off
        (CHAMPION, "ana", True),  # signed off and better
        (None, None, False),  # the first candidate needs a sign-off as well
        (None, "ana", True),
    ],
)
def test_a_policy_can_require_a_human_sign_off(champion, signed_off_by, promote):
    better = {HE: 0.35, MATH: 0.55, LOSS: 2.0}
    decision = decide_promotion(better, champion, SIGNED, signed_off_by=signed_off_by, version="7")
    assert decision.promote is promote, decision.reasons
    awaiting = "awaiting human sign-off (forge signoff 7 --by NAME)" in decision.reasons
    assert awaiting is not promote
    assert (f"signed off by {signed_off_by}" in decision.reasons) is promote


def test_evidence_fits_a_tag_and_stays_json():
    many = PromotionConfig(
        metrics={
            f"suite_{i:03d}_pass_at_1": GatedMetric(direction="higher", weight=1, domain="code") for i in range(200)
        }
    )
    candidate = {m: 0.5 for m in many.metrics} | {"suite_150_pass_at_1": 0.1}
    decision = decide_promotion(candidate, {m: 0.5 for m in many.metrics}, many)
    text = capped_json(evidence(decision))
    rows = json.loads(text)
    assert len(text) <= MAX_TAG_CHARS and len(rows) < 200
    assert rows[0]["metric"] == "suite_150_pass_at_1" and rows[0]["ok"] is False  # what blocked comes first
    assert rows[-1].endswith("more left out (a tag holds 5000 characters)")
    assert set(rows[1]) == {"metric", "candidate", "champion", "tolerance", "weight", "domain", "ok"}
    assert json.loads(capped_json(["short"])) == ["short"]


GOOD = {HE: 0.30, LOSS: 2.0, OTHER: 0.5}


@pytest.mark.parametrize(
    "champion_extra, candidate_extra",
    [
        ({UNDECLARED: 9.0}, {}),  # the champion carries a metric the candidate lacks
        ({UNDECLARED: 9.0}, {UNDECLARED: -9.0}),  # the candidate is far worse on it
        ({}, {UNDECLARED: 1.0}),  # only the candidate carries it
    ],
)
def test_an_undeclared_metric_never_blocks(champion_extra, candidate_extra):
    decision = decide_promotion({**GOOD, **candidate_extra}, {**GOOD, **champion_extra}, POLICY)
    assert decision.promote, decision.reasons
    assert UNDECLARED not in decision.compared
    assert any(r.startswith("ignored") and UNDECLARED in r for r in decision.reasons)


def test_an_undeclared_metric_never_passes():
    # A regression on a declared metric is refused however much better the candidate is on an undeclared one.
    worse = {**GOOD, HE: 0.10, UNDECLARED: 100.0}
    decision = decide_promotion(worse, {**GOOD, UNDECLARED: 0.0}, POLICY)
    assert not decision.promote and not decision.compared[HE]["ok"]


def test_a_profile_declares_direction_tolerance_weight_and_domain(tmp_path):
    tiny = load_profile("tiny").promotion
    gate = tiny.metrics
    assert gate["sft_heldout_loss"].direction == "lower" and gate["humaneval_pass_at_1"].tolerance == 0.02
    assert gate["sft_heldout_loss"].weight == 0 and gate["sft_heldout_loss"].domain == "general"  # a guard
    weighted = {g.domain for g in gate.values() if g.weight > 0}
    assert weighted == {"code", "math", "science", "alignment", "tool_use", "deep_search"}  # the paper's six domains
    assert tiny.on_tie == "promote" and tiny.require_signoff is False  # tiny scale: code scores tie at 0
    for text, field in [
        ("humaneval_pass_at_1: {direction: up}", r"promotion\.metrics\.humaneval_pass_at_1\.direction"),
        ("humaneval_pass_at_1: {direction: higher, weight: -1}", r"promotion\.metrics\.humaneval_pass_at_1\.weight"),
        ("humaneval_pass_at_1: {direction: higher, domain: maths}", r"humaneval_pass_at_1\.domain"),
    ]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(f"promotion:\n  metrics:\n    {text}\n")
        with pytest.raises(ConfigError, match=field):
            load_profile(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("promotion: {metrics: {}}\n")
    with pytest.raises(ConfigError, match="promotion.metrics"):  # a gate that compares nothing passes anything
        load_profile(empty)


# --- the adapter on a real store ---


def new_version(client, model_name: str, metrics: dict[str, float]) -> str:
    """A registered version carrying ``metrics`` as ``metric.*`` tags (no weights behind it: the gate reads tags)."""
    if not client.search_registered_models(f"name = '{model_name}'"):
        client.create_registered_model(model_name)
    version = client.create_model_version(model_name, str(Path(__file__).parent)).version
    set_version_metrics(model_name, version, metrics, client=client)
    return str(version)


def test_a_domain_regression_is_refused_with_its_evidence_on_the_version(client, model_name):
    v1 = new_version(client, model_name, CHAMPION)
    assert promote(client, model_name, MATRIX, version=v1).promote
    v2 = new_version(client, model_name, {HE: 0.90, MATH: 0.47, LOSS: 2.0})  # code far up, math beyond tolerance
    decision = promote(client, model_name, MATRIX, version=v2)
    assert not decision.promote and get_alias_version(model_name, "champion", client=client) == v1
    tags = client.get_model_version(model_name, v2).tags
    assert tags["promotion.decision"] == "refused" and tags["promotion.compared_to"] == v1 and tags["promotion.at"]
    reasons = json.loads(tags["promotion.reasons"])
    assert any(r.startswith(f"{MATH} (math): 0.47 vs champion 0.5") and "worse by 0.03" in r for r in reasons)
    assert float(tags["promotion.aggregate"]) == pytest.approx(0.57)
    rows = json.loads(tags["promotion.evidence"])
    assert rows[0] == {
        "metric": MATH,
        "candidate": 0.47,
        "champion": 0.5,
        "tolerance": 0.02,
        "weight": 1.0,
        "domain": "math",
        "ok": False,
    }
    assert {r["metric"] for r in rows} == set(MATRIX.metrics)
    first = client.get_model_version(model_name, v1).tags
    assert first["promotion.aggregate"] == "n/a" and first["promotion.compared_to"] == "none"


def test_a_first_candidate_missing_a_declared_metric_is_refused(client, model_name):
    v1 = new_version(client, model_name, {HE: 0.30, LOSS: 2.0})  # the math eval did not run
    decision = promote(client, model_name, MATRIX, version=v1)
    assert not decision.promote and get_alias_version(model_name, "champion", client=client) is None
    reasons = json.loads(client.get_model_version(model_name, v1).tags["promotion.reasons"])
    assert f"{MATH} (math): the candidate has no value (an eval that did not run is not a pass)" in reasons


def test_sign_off_required_refuses_then_promotes_after_forge_signoff(client, model_name, tmp_path):
    profile = tmp_path / "signed.yaml"
    profile.write_text(f"promotion:\n  require_signoff: true\n  metrics:\n    {HE}: {{direction: higher}}\n")
    runner = CliRunner()
    v1 = new_version(client, model_name, {HE: 0.30})
    set_alias(model_name, "candidate", v1, client=client)
    waiting = runner.invoke(app, ["promote", "--model", model_name, "--profile", str(profile)])
    assert waiting.exit_code == 1 and f"awaiting human sign-off (forge signoff {v1} --by NAME)" in waiting.output
    tags = client.get_model_version(model_name, v1).tags
    assert tags["promotion.decision"] == "refused" and get_alias_version(model_name, "champion", client=client) is None

    signed = runner.invoke(app, ["signoff", "--model", model_name, v1, "--by", "ana", "--note", "read 20 samples"])
    assert signed.exit_code == 0, signed.output
    tags = client.get_model_version(model_name, v1).tags
    assert tags[SIGNOFF_TAG] == "ana" and tags["promotion.signoff_at"] and tags["promotion.signoff_note"]
    promoted = runner.invoke(app, ["promote", "--model", model_name, "--profile", str(profile)])
    assert promoted.exit_code == 0 and "signed off by ana" in promoted.output, promoted.output
    assert get_alias_version(model_name, "champion", client=client) == v1
    assert client.get_model_version(model_name, v1).tags["promotion.decision"] == "promoted"

    missing = runner.invoke(app, ["signoff", "--model", model_name, "99", "--by", "ana"])
    assert missing.exit_code == 1 and "99" in missing.output


def test_promote_and_rollback_wait_for_the_lock(store, model_name):
    client = store
    v1 = new_version(client, model_name, CHAMPION)
    with promotion_lock(registry_uri(client), model_name):  # another promoter is mid-move
        with pytest.raises(PromotionLockTimeout):
            promote(client, model_name, MATRIX, version=v1, lock_timeout_s=0.3)
        with pytest.raises(PromotionLockTimeout):
            rollback(client, model_name, lock_timeout_s=0.3)
    assert get_alias_version(model_name, "champion", client=client) is None  # nothing moved meanwhile
    assert promote(client, model_name, MATRIX, version=v1).promote


def test_two_promoters_at_once_leave_one_consistent_champion(store, model_name, monkeypatch):
    """Two processes promote two candidates at once, each pausing inside the critical section for the other
    (tests/registry/_promoter.py): the lock makes them take turns, so the second judges against the first's winner,
    and the aliases and history show both moves."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # spawned children get sys.path and import it by name
    # A spawned child first re-runs the parent's __main__; after an AppTest (tests/dashboards) that is a dashboard
    # page, which dies outside Streamlit. A bare __main__ gives the child nothing to re-run.
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    from _promoter import promote_in_step

    client, uri = store, registry_uri(store)
    v1 = new_version(client, model_name, CHAMPION)
    assert promote(client, model_name, TIES_PROMOTE, version=v1).promote
    better = {HE: 0.35, MATH: 0.55, LOSS: 2.0}  # both beat v1 and tie with each other: whoever goes second wins too
    v2, v3 = new_version(client, model_name, better), new_version(client, model_name, better)

    ctx = multiprocessing.get_context("spawn")
    start, window = ctx.Barrier(2), ctx.Barrier(2)
    procs = [
        ctx.Process(target=promote_in_step, args=(uri, model_name, v, TIES_PROMOTE, start, window, 1.0))
        for v in (v2, v3)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]

    decided = {v: client.get_model_version(model_name, v).tags for v in (v2, v3)}
    assert [t["promotion.decision"] for t in decided.values()] == ["promoted", "promoted"]
    compared_to = sorted(t["promotion.compared_to"] for t in decided.values())
    first = next(v for v, t in decided.items() if t["promotion.compared_to"] == v1)
    second = v3 if first == v2 else v2
    assert compared_to == sorted([v1, first]), "both promoters judged against the same champion"
    assert get_alias_version(model_name, "champion", client=client) == second
    assert get_alias_version(model_name, "previous-champion", client=client) == first
    assert json.loads(client.get_registered_model(model_name).tags[HISTORY_TAG]) == [v1, first]
