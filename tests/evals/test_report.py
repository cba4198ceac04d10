"""The eval report: the paired comparison's statistics (pure), and the registry side against the session's real
MLflow store (tests/conftest.py): versions whose eval runs follow forge/evals/domains.py's contract.

    .venv/bin/pytest tests/evals/test_report.py -q
"""

from __future__ import annotations

import uuid
from pathlib import Path

import mlflow
import pytest
from typer.testing import CliRunner

from forge.evals.cli import app
from forge.evals.domains import DOMAINS, HEADLINE, ITEMS_ARTIFACT, MODEL_TAG, SUITE_TAG, run_tag
from forge.evals.report import (
    VersionHeadlines,
    compare_versions,
    parse_version_ref,
    plot_champion_vs_candidate,
    plot_domains_across_versions,
    sign_flip_p_value,
)
from registry.models import set_version_metrics
from registry.tracking import init_mlflow, log_table
from tasks.eval_report import (
    CHAMPION_PLOT,
    COMPARE_TABLE,
    DOMAINS_PLOT,
    MATRIX_TABLE,
    log_eval_report,
    resolve_version,
    version_items,
)


def items(n: int, correct: set[int] | int, prefix: str = "q") -> list[dict]:
    """``n`` items ``q0..q{n-1}``; those in ``correct`` (or the first ``correct``) score 1, the rest 0."""
    hits = set(range(correct)) if isinstance(correct, int) else correct
    return [{"id": f"{prefix}{i}", "source": "test", "score": float(i in hits), "answer": "x"} for i in range(n)]


# -- the statistics ----------------------------------------------------------------------------------------------


def by_name(deltas, level="domain"):
    return {d.name: d for d in deltas if d.level == level}


def test_a_30_point_gain_on_100_items_is_significant():
    delta = by_name(compare_versions({"math": items(100, 40)}, {"math": items(100, 70)}))["math"]
    assert (delta.n, delta.mean_a, delta.mean_b) == (100, 0.4, 0.7)
    assert delta.delta == pytest.approx(0.3)
    assert 0 < delta.ci_low < 0.3 < delta.ci_high
    assert delta.p_value < 0.01 and delta.significant and delta.verdict == "better"


@pytest.mark.parametrize("a_correct, b_correct", [
    (set(range(15)), set(range(16))),                       # one more item solved, nothing else changed
    (set(range(15)), set(range(11)) | set(range(15, 20))),  # 4 lost, 5 gained: net one item, +3.3 points
    (set(range(16)), set(range(15))),                       # one item fewer: -3.3 points
])
def test_one_item_of_30_is_noise(a_correct, b_correct):
    delta = by_name(compare_versions({"code": items(30, a_correct)}, {"code": items(30, b_correct)}))["code"]
    assert abs(delta.delta) == pytest.approx(1 / 30)
    assert delta.ci_low <= 0 <= delta.ci_high
    assert not delta.significant and delta.verdict == "noise"
    assert delta.p_value > 0.5


def test_a_big_loss_is_worse():
    delta = by_name(compare_versions({"science": items(100, 70)}, {"science": items(100, 40)}))["science"]
    assert delta.verdict == "worse" and delta.ci_high < 0


def test_items_pair_by_id_within_a_suite_and_pool_into_their_domain():
    a = {"code": items(30, 15), "humaneval": items(20, 10), "math": items(10, 5)}
    b = {"code": items(30, 15)[:25], "humaneval": items(20, 10, prefix="other")}  # no math; humaneval ids differ
    deltas = compare_versions(a, b)
    assert [(d.level, d.name) for d in deltas] == [
        ("domain", "code"), ("suite", "code"), ("suite", "humaneval"), ("domain", "math"), ("suite", "math")]
    suites, domains = by_name(deltas, "suite"), by_name(deltas)
    assert (suites["code"].n, suites["code"].unpaired) == (25, 5)
    assert (suites["humaneval"].n, suites["humaneval"].unpaired, suites["humaneval"].verdict) == (0, 40, "n/a")
    assert (domains["code"].n, domains["code"].unpaired) == (25, 45)
    assert domains["math"].verdict == "n/a"


def test_rows_sharing_an_id_are_averaged_and_ties_count_half():
    a = {"alignment": [{"id": "p1", "score": 0.5}, {"id": "p2", "score": 0.0}]}
    b = {"alignment": [{"id": "p1", "score": 1.0}, {"id": "p1", "score": 0.0}, {"id": "p2", "score": 1.0}]}
    delta = by_name(compare_versions(a, b))["alignment"]
    assert (delta.n, delta.mean_a, delta.mean_b) == (2, 0.25, 0.75)


def test_a_score_outside_0_1_is_refused():
    with pytest.raises(ValueError, match="math: item 'q0' has score 2.0"):
        compare_versions({"math": [{"id": "q0", "score": 2.0}]}, {"math": items(1, 1)})


def test_the_comparison_is_a_function_of_items_and_seed():
    # Partial credit (scores between 0 and 1): the bootstrap quantiles fall on distinct values for distinct seeds.
    a = {"math": [{"id": i, "score": i / 60} for i in range(60)]}
    b = {"math": [{"id": i, "score": (i * 7 % 60) / 60} for i in range(60)]}
    assert compare_versions(a, b, seed=3) == compare_versions(a, b, seed=3)
    assert compare_versions(a, b, seed=3)[0].ci_low != compare_versions(a, b, seed=4)[0].ci_low


@pytest.mark.parametrize("diffs, p", [
    ([1, 1, 1], 2 / 8),            # exact: of 8 sign patterns only +++ and --- reach |3|
    ([1, -1, 0, 0], 1.0),          # balanced: every pattern is at least as extreme as 0
    ([0, 0], 1.0),                 # no discordant item: nothing to test
    ([1.0] * 10, 2 / 1024),        # exact up to EXACT_FLIPS non-zero differences
])
def test_sign_flip_p_value(diffs, p):
    import numpy as np

    assert sign_flip_p_value(np.array(diffs, dtype=float), np.random.default_rng(0), 100) == pytest.approx(p)


@pytest.mark.parametrize("ref, expected", [
    ("models:/forge-policy@champion", ("forge-policy", None, "champion")),
    ("models:/forge-policy/3", ("forge-policy", "3", None)),
    ("forge-policy/3", ("forge-policy", "3", None)),
    ("other@candidate", ("other", None, "candidate")),
    ("@candidate", ("forge-policy", None, "candidate")),
    ("3", ("forge-policy", "3", None)),
    ("03", ("forge-policy", "3", None)),
])
def test_parse_version_ref(ref, expected):
    parsed = parse_version_ref(ref, "forge-policy")
    assert (parsed.model_name, parsed.version, parsed.alias) == expected


@pytest.mark.parametrize("ref", ["champion", "forge-policy/", "/3", "x@", "a/b", "@a/b", ""])
def test_parse_version_ref_refuses(ref):
    with pytest.raises(ValueError, match="cannot read"):
        parse_version_ref(ref, "forge-policy")


# -- plots -------------------------------------------------------------------------------------------------------


def headline_metrics(**values: float) -> dict[str, float]:
    return {HEADLINE[domain]: value for domain, value in values.items()}


def test_domains_plot_has_one_bar_per_evaluated_version_and_domain():
    rows = [
        VersionHeadlines.from_metrics(1, headline_metrics(code=0.3, math=0.4, science=0.0, alignment=0.5)),
        VersionHeadlines.from_metrics(2, headline_metrics(code=0.35, math=0.7, science=0.52, tool_use=0.6,
                                                          deep_search=0.2), aliases=["champion"]),
        VersionHeadlines.from_metrics(3, {**headline_metrics(**dict.fromkeys(DOMAINS, 0.5)), "loss": 2.0},
                                      aliases=["candidate"]),
    ]
    fig = plot_domains_across_versions(rows)
    ax = fig.axes[0]
    assert len(ax.patches) == 4 + 5 + 6
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["v1", "v2 (champion)", "v3 (candidate)"]
    assert sum(t.get_text() == "n/a" for t in ax.texts) == 2 + 1  # v1: tool_use, deep_search; v2: alignment
    assert [t.get_text() for t in ax.texts].count("0") == 1  # v1's science: evaluated, no height, still seen
    assert all(0 <= p.get_height() <= 1 for p in ax.patches)
    fig.savefig("/tmp/eval_report_domains.png")  # to look at


def test_champion_vs_candidate_plot_writes_each_delta():
    champion = headline_metrics(code=0.3, math=0.4, science=0.5)
    candidate = headline_metrics(code=0.32, math=0.7, tool_use=0.6)
    fig = plot_champion_vs_candidate(champion, candidate, verdicts={"math": "better", "code": "noise"})
    ax = fig.axes[0]
    assert len(ax.patches) == 3 + 3
    texts = [t.get_text() for t in ax.texts]
    assert "+0.300\nbetter" in texts and "+0.020\nnoise" in texts
    assert texts.count("n/a") == 3 + 3  # champion: alignment, tool_use, deep_search; candidate: science, ...
    fig.savefig("/tmp/eval_report_champion_vs_candidate.png")


# -- against the registry ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry(workspace, tmp_path_factory):
    """A model with three versions: v1 champion and v2 candidate, both evaluated (math 40 → 70 of 100, code 15 →
    16 of 30, humaneval unchanged); v3 registered without evals."""
    client = init_mlflow(workspace)
    name = f"report-policy-{uuid.uuid4().hex[:8]}"
    client.create_registered_model(name)
    source = tmp_path_factory.mktemp("ckpt")
    (source / "config.json").write_text("{}")
    evals = {
        "1": {"math": items(100, 40), "code": items(30, 15), "humaneval": items(20, 10)},
        "2": {"math": items(100, 70), "code": items(30, set(range(11)) | set(range(15, 20))),
              "humaneval": items(20, 10)},
    }
    for version in ("1", "2", "3"):
        with mlflow.start_run() as run:
            pass
        assert client.create_model_version(name, str(source), run.info.run_id).version == int(version)
        for suite, rows in evals.get(version, {}).items():
            with mlflow.start_run(tags={MODEL_TAG: f"{name}/{version}", SUITE_TAG: suite}) as eval_run:
                log_table(rows, ITEMS_ARTIFACT)
            client.set_model_version_tag(name, version, run_tag(suite), eval_run.info.run_id)
        if version in evals:
            scores = {s: sum(r["score"] for r in rows) / len(rows) for s, rows in evals[version].items()}
            set_version_metrics(name, version, {"math_accuracy": scores["math"], "code_pass_at_1": scores["code"],
                                                "humaneval_pass_at_1": scores["humaneval"]}, client=client)
    client.set_registered_model_alias(name, "champion", "1")
    client.set_registered_model_alias(name, "candidate", "2")
    return client, name


def test_version_items_reads_each_suites_table_back(registry):
    client, name = registry
    found = version_items(client, name, "1")
    assert sorted(found) == ["code", "humaneval", "math"]
    assert len(found["math"]) == 100 and found["math"][0] == {"id": "q0", "source": "test", "score": 1.0,
                                                             "answer": "x"}
    assert version_items(client, name, "3") == {}


def test_compare_finds_the_paired_items_in_the_registry(registry):
    client, name = registry
    deltas = by_name(compare_versions(version_items(client, name, "1"), version_items(client, name, "2")))
    assert deltas["math"].verdict == "better" and deltas["math"].n == 100
    assert deltas["code"].verdict == "noise" and deltas["code"].n == 50  # code + humaneval pooled


@pytest.mark.parametrize("ref, version", [("@champion", "1"), (None, "2"), ("2", "2"), ("3", "3")])
def test_resolve_version(registry, ref, version):
    client, name = registry
    ref = ref or f"models:/{name}@candidate"
    assert resolve_version(client, ref, name) == version


@pytest.mark.parametrize("ref, message", [
    ("@nope", "has no alias 'nope'"),
    ("9", "has no version 9"),
    ("other-model/1", "names model 'other-model'"),
    ("latest", "cannot read 'latest'"),
])
def test_resolve_version_says_what_is_missing(registry, ref, message):
    client, name = registry
    with pytest.raises(LookupError, match=message):
        resolve_version(client, ref, name)


def test_cli_compare_prints_the_table(registry):
    _, name = registry
    result = CliRunner().invoke(app, ["compare", "@champion", "@candidate", "--model-name", name])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    math = next(line for line in lines if line.lstrip("│ ").startswith("math"))
    assert "0.400" in math and "0.700" in math and "+0.300" in math and "better" in math
    code = next(line for line in lines if line.lstrip("│ ").startswith("code"))
    assert "50" in code and "noise" in code
    assert any(line.lstrip("│ ").startswith("humaneval") for line in lines)  # code's two suites, each a row


@pytest.mark.parametrize("refs, message", [
    (["@champion", "@nope"], "has no alias 'nope'"),
    (["1", "3"], "has no evals"),
])
def test_cli_compare_exits_2_when_a_version_cannot_be_compared(registry, refs, message):
    _, name = registry
    result = CliRunner().invoke(app, ["compare", *refs, "--model-name", name])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_log_eval_report_logs_plots_and_tables_into_the_active_run(registry):
    client, name = registry
    with mlflow.start_run() as run:
        report = log_eval_report(client, name, "2")
    assert (report["champion"], report["candidate"]) == ("1", "2")
    logged = {f.path for f in client.list_artifacts(run.info.run_id, "eval_report")}
    assert logged == {DOMAINS_PLOT, CHAMPION_PLOT, MATRIX_TABLE, COMPARE_TABLE} == set(report["artifacts"])
    png = Path(client.download_artifacts(run.info.run_id, DOMAINS_PLOT))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [row["version"] for row in report["matrix"]] == ["1", "2", "3"]
    assert report["matrix"][1]["math"] == 0.7 and report["matrix"][2]["math"] is None
    verdicts = {row["name"]: row["verdict"] for row in report["comparison"] if row["level"] == "domain"}
    assert verdicts == {"code": "noise", "math": "better"}


def test_log_eval_report_needs_an_active_run(registry):
    client, name = registry
    with pytest.raises(RuntimeError, match="active MLflow run"):
        log_eval_report(client, name, "2")
