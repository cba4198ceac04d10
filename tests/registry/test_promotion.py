"""The promotion decision, one commented row per case.

.venv/bin/pytest tests/registry/test_promotion.py -q
"""

import pytest

from forge.config import ConfigError, GatedMetric, PromotionConfig, load_profile
from registry.promotion import decide_promotion

HE, LOSS, OTHER, UNDECLARED = "humaneval_pass_at_1", "sft_heldout_loss", "search_accuracy", "reward_last20"
POLICY = PromotionConfig(metrics={
    HE: GatedMetric(direction="higher", tolerance=0.02),
    LOSS: GatedMetric(direction="lower"),
    OTHER: GatedMetric(direction="higher"),
})

CASES = [
    # (candidate, champion, promote)
    # no champion yet: the first candidate is promoted whatever it scores
    ({HE: 0.0}, None, True),
    # equal on every metric: not worse, promoted
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
    assert decision.reasons
    if champion is not None:
        compared = {m for m in POLICY.metrics if m in champion or candidate.get(m) is None}
        assert set(decision.compared) == compared
        assert all(c["ok"] for c in decision.compared.values()) is promote


def test_refusal_names_the_offending_metric():
    decision = decide_promotion({HE: 0.40, LOSS: 2.5, OTHER: 0.5}, {HE: 0.30, LOSS: 2.0, OTHER: 0.5}, POLICY)
    assert not decision.promote
    assert decision.compared[LOSS]["ok"] is False and decision.compared[HE]["ok"] is True
    assert any(r.startswith(LOSS) and "worse by 0.5" in r for r in decision.reasons)


GOOD = {HE: 0.30, LOSS: 2.0, OTHER: 0.5}


@pytest.mark.parametrize("champion_extra, candidate_extra", [
    ({UNDECLARED: 9.0}, {}),  # the champion carries a metric the candidate lacks
    ({UNDECLARED: 9.0}, {UNDECLARED: -9.0}),  # the candidate is far worse on it
    ({}, {UNDECLARED: 1.0}),  # only the candidate carries it
])
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


def test_a_profile_declares_direction_and_tolerance(tmp_path):
    tiny = load_profile("tiny").promotion.metrics
    assert tiny["sft_heldout_loss"].direction == "lower" and tiny["humaneval_pass_at_1"].tolerance == 0.02
    bad = tmp_path / "bad.yaml"
    bad.write_text("promotion:\n  metrics:\n    humaneval_pass_at_1: {direction: up}\n")
    with pytest.raises(ConfigError, match=r"promotion\.metrics\.humaneval_pass_at_1\.direction"):
        load_profile(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("promotion: {metrics: {}}\n")
    with pytest.raises(ConfigError, match="promotion.metrics"):  # a gate that compares nothing passes anything
        load_profile(empty)
