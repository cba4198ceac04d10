"""The promotion decision, one commented row per case.

.venv/bin/pytest tests/registry/test_promotion.py -q
"""

import pytest

from forge.config import PromotionConfig
from registry.promotion import decide_promotion

POLICY = PromotionConfig(
    tolerance={"humaneval_pass_at_1": 0.02}, default_tolerance=0.0, lower_is_better=["sft_heldout_loss"]
)
HE, LOSS, OTHER = "humaneval_pass_at_1", "sft_heldout_loss", "search_accuracy"

CASES = [
    # (candidate, champion, promote)
    # no champion yet: the first candidate is promoted whatever it scores
    ({HE: 0.0}, None, True),
    # equal on every metric: not worse, promoted
    ({HE: 0.30, LOSS: 2.0}, {HE: 0.30, LOSS: 2.0}, True),
    # better on every metric (higher pass@1, lower loss)
    ({HE: 0.35, LOSS: 1.8}, {HE: 0.30, LOSS: 2.0}, True),
    # worse within the per-metric tolerance (0.02 on pass@1)
    ({HE: 0.285, LOSS: 2.0}, {HE: 0.30, LOSS: 2.0}, True),
    # exactly at the tolerance edge: still within it
    ({HE: 0.28}, {HE: 0.30}, True),
    # worse beyond the tolerance
    ({HE: 0.27, LOSS: 2.0}, {HE: 0.30, LOSS: 2.0}, False),
    # lower-is-better metric got higher (worse), default tolerance 0: refused even though pass@1 improved
    ({HE: 0.40, LOSS: 2.1}, {HE: 0.30, LOSS: 2.0}, False),
    # lower-is-better metric got lower (better)
    ({LOSS: 1.5}, {LOSS: 2.0}, True),
    # a metric without a per-metric tolerance uses the default (0.0): any drop refuses
    ({OTHER: 0.499}, {OTHER: 0.5}, False),
    # the champion has a metric the candidate lacks: an eval that did not run is not a pass
    ({HE: 0.9}, {HE: 0.3, LOSS: 2.0}, False),
    # a NaN score counts as missing
    ({HE: float("nan")}, {HE: 0.3}, False),
    # metrics only the candidate has are not compared
    ({HE: 0.3, OTHER: 0.0}, {HE: 0.3}, True),
]


@pytest.mark.parametrize("candidate, champion, promote", CASES)
def test_decide_promotion(candidate, champion, promote):
    decision = decide_promotion(candidate, champion, POLICY)
    assert decision.promote is promote, decision.reasons
    assert decision.reasons
    if champion is not None:
        assert set(decision.compared) == set(champion)
        assert all(c["ok"] for c in decision.compared.values()) is promote


def test_refusal_names_the_offending_metric():
    decision = decide_promotion({HE: 0.40, LOSS: 2.5}, {HE: 0.30, LOSS: 2.0}, POLICY)
    assert not decision.promote
    assert decision.compared[LOSS]["ok"] is False and decision.compared[HE]["ok"] is True
    assert any(r.startswith(LOSS) and "worse by 0.5" in r for r in decision.reasons)


def test_default_tolerance_applies_when_set():
    lenient = PromotionConfig(tolerance={}, default_tolerance=0.1, lower_is_better=[])
    assert decide_promotion({OTHER: 0.45}, {OTHER: 0.5}, lenient).promote
    assert not decide_promotion({OTHER: 0.35}, {OTHER: 0.5}, lenient).promote
