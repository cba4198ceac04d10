"""Comparing two versions' evals item by item, and the report plots: plain functions over per-item rows and
headline metrics, no MLflow (tasks/eval_report.py reads them from the registry and logs the report).

    from forge.evals.report import compare_versions, plot_domains_across_versions
    deltas = compare_versions(items_a, items_b)       # items: {suite: [{"id", "score", ...}, ...]} per version
    [(d.name, d.delta, d.ci_low, d.ci_high, d.verdict) for d in deltas]

Why paired: both versions answer the same items, so the item-level differences ``d_i = score_B - score_A`` carry
the comparison; most items are solved by both or neither and cancel, which makes a paired test far more sensitive
than comparing two accuracies as if they were independent samples. Two numbers per comparison:

* a 95 % percentile bootstrap CI of ``mean(d)`` (items resampled with replacement, seeded), which decides
  ``significant`` (the CI excludes 0) and so the verdict;
* a two-sided p-value of the paired sign-flip permutation test: under "no difference" each ``d_i`` is as likely
  to have the opposite sign, so the p-value is the share of sign patterns with ``|sum(d)|`` at least the observed.
  Items with ``d_i = 0`` cannot flip and drop out. Exact (every pattern) up to ``EXACT_FLIPS`` non-zero
  differences, else Monte Carlo with ``resamples`` patterns. With 0/1 scores this is the exact McNemar test.

The two can disagree at the margin (the percentile bootstrap is slightly liberal on small samples); the verdict
follows the CI, the p-value is for the reader.
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from forge.evals.domains import DOMAINS, HEADLINE, SUITE_DOMAIN

EXACT_FLIPS = 16  # up to 2**16 sign patterns: enumerate them all
CHUNK = 1_000_000  # resampled entries drawn at once (bounds memory on big suites)
CI_LEVEL = 0.95


# -- items -------------------------------------------------------------------------------------------------------


def table_rows(table: Mapping) -> list[dict]:
    """An MLflow table artifact (``{"columns": [...], "data": [[...], ...]}``, what ``mlflow.log_table`` writes) as
    a list of row dicts."""
    columns = list(table["columns"])
    return [dict(zip(columns, row, strict=True)) for row in table["data"]]


def scores_by_id(rows: Sequence[Mapping], suite: str = "?") -> dict[str, float]:
    """``id`` → score; rows sharing an id (several samples of one problem) are averaged."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        score = row.get("score")
        if score is None or not 0.0 <= float(score) <= 1.0:
            raise ValueError(f"{suite}: item {row.get('id')!r} has score {score!r}; scores are floats in [0, 1]")
        sums[str(row["id"])] += float(score)
        counts[str(row["id"])] += 1
    return {key: sums[key] / counts[key] for key in sums}


# -- the paired comparison ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DomainDelta:
    """Version B against version A on one suite or one domain (its suites' paired items pooled).

    ``mean_a``/``mean_b`` are over the ``n`` paired items only, so ``delta == mean_b - mean_a``; ``unpaired``
    counts the items only one version has. With no paired item every number is NaN and the verdict "n/a"."""

    name: str
    domain: str
    level: Literal["domain", "suite"]
    n: int
    unpaired: int
    mean_a: float
    mean_b: float
    delta: float
    ci_low: float
    ci_high: float
    p_value: float
    significant: bool

    @property
    def verdict(self) -> str:
        if self.n == 0:
            return "n/a"
        if not self.significant:
            return "noise"
        return "better" if self.delta > 0 else "worse"


def _bootstrap_ci(diffs: np.ndarray, rng: np.random.Generator, resamples: int) -> tuple[float, float]:
    n = diffs.size
    means = np.empty(resamples)
    step = max(1, CHUNK // n)
    for start in range(0, resamples, step):
        k = min(step, resamples - start)
        means[start : start + k] = diffs[rng.integers(0, n, size=(k, n))].mean(axis=1)
    tail = (1 - CI_LEVEL) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def sign_flip_p_value(diffs: np.ndarray, rng: np.random.Generator, resamples: int) -> float:
    """Two-sided p-value of the paired sign-flip permutation test of ``mean(diffs) == 0`` (module docstring)."""
    nonzero = diffs[diffs != 0]
    m = nonzero.size
    if m == 0:
        return 1.0
    observed = abs(nonzero.sum()) - 1e-9 * m  # tolerance: a pattern equal to the observed sum counts
    if m <= EXACT_FLIPS:
        patterns = ((np.arange(2**m)[:, None] >> np.arange(m)) & 1) * 2.0 - 1.0
        return float(np.mean(np.abs(patterns @ nonzero) >= observed))
    hits = 0
    step = max(1, CHUNK // m)
    for start in range(0, resamples, step):
        k = min(step, resamples - start)
        signs = rng.choice((-1.0, 1.0), size=(k, m))
        hits += int(np.sum(np.abs(signs @ nonzero) >= observed))
    return (hits + 1) / (resamples + 1)  # the observed pattern is one of the permutations: p is never 0


def _delta(name: str, domain: str, level: str, pairs: list[tuple[float, float]], unpaired: int,
           *, resamples: int, seed: int) -> DomainDelta:
    if not pairs:
        nan = math.nan
        return DomainDelta(name, domain, level, 0, unpaired, nan, nan, nan, nan, nan, nan, False)
    a, b = np.array(pairs).T
    diffs = b - a
    # Seeded by name, not by position: a suite's numbers do not change when another suite is added.
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    low, high = _bootstrap_ci(diffs, rng, resamples)
    p_value = sign_flip_p_value(diffs, rng, resamples)
    return DomainDelta(name, domain, level, len(pairs), unpaired, float(a.mean()), float(b.mean()),
                       float(diffs.mean()), low, high, p_value, significant=low > 0 or high < 0)


def compare_versions(
    items_a: Mapping[str, Sequence[Mapping]],
    items_b: Mapping[str, Sequence[Mapping]],
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> list[DomainDelta]:
    """B against A, per domain (its suites' paired items pooled: humaneval + code → code) and per suite.

    Args:
        items_a, items_b: suite → per-item rows (``id``, ``score`` in [0, 1]) of version A and version B.
        resamples: bootstrap resamples, and sign patterns when the permutation test is not exact.
        seed: the results are a function of the items and the seed.

    Returns:
        For each domain in ``DOMAINS`` order (then unknown suites, each its own domain) that either version has:
        the domain's row, then its suites' rows by name. Items pair by ``id`` within a suite.
    """
    by_domain: dict[str, list[str]] = defaultdict(list)
    for suite in sorted(set(items_a) | set(items_b)):
        by_domain[SUITE_DOMAIN.get(suite, suite)].append(suite)
    order = [d for d in DOMAINS if d in by_domain] + sorted(d for d in by_domain if d not in DOMAINS)
    out: list[DomainDelta] = []
    for domain in order:
        suite_rows, all_pairs, all_unpaired = [], [], 0
        for suite in by_domain[domain]:
            a = scores_by_id(items_a.get(suite, ()), suite)
            b = scores_by_id(items_b.get(suite, ()), suite)
            pairs = [(a[i], b[i]) for i in sorted(a.keys() & b.keys())]
            unpaired = len(a.keys() ^ b.keys())
            suite_rows.append(_delta(suite, domain, "suite", pairs, unpaired, resamples=resamples, seed=seed))
            all_pairs += pairs
            all_unpaired += unpaired
        out.append(_delta(domain, domain, "domain", all_pairs, all_unpaired, resamples=resamples, seed=seed))
        out += suite_rows
    return out


# -- version references ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VersionRef:
    """A registered version named by number or by alias."""

    model_name: str
    version: str | None = None
    alias: str | None = None


def parse_version_ref(ref: str, default_model: str) -> VersionRef:
    """``models:/m@champion``, ``models:/m/3``, ``m/3``, ``m@champion``, ``@candidate`` or ``3`` (the last two of
    ``default_model``); ValueError, saying which forms are accepted, for anything else."""
    text = ref.strip().removeprefix("models:/")
    forms = "models:/NAME@ALIAS, models:/NAME/VERSION, NAME/VERSION, @ALIAS or VERSION"
    if "@" in text:
        name, alias = text.split("@", 1)
        if alias and "/" not in alias:
            return VersionRef(name or default_model, alias=alias)
    else:
        name, _, version = text.rpartition("/")
        if version.isdigit() and (name or "/" not in text):
            return VersionRef(name or default_model, version=str(int(version)))
    raise ValueError(f"cannot read {ref!r} as a model version; give {forms}")


# -- headline metrics across versions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class VersionHeadlines:
    """One registered version's headline metric per domain (absent: not evaluated there)."""

    version: str
    aliases: tuple[str, ...] = ()
    headline: Mapping[str, float] = field(default_factory=dict)  # domain → value

    @classmethod
    def from_metrics(cls, version: str | int, metrics: Mapping[str, float], aliases: Sequence[str] = ()):
        """From a version's metrics (``registry.models.version_metrics``: metric name → value)."""
        return cls(str(version), tuple(sorted(aliases)), headline_by_domain(metrics))

    @property
    def label(self) -> str:
        return f"v{self.version}" + (f" ({', '.join(self.aliases)})" if self.aliases else "")


def headline_by_domain(metrics: Mapping[str, float]) -> dict[str, float]:
    """Metric name → value (a version's ``metric.*`` tags) to domain → its headline value, where present."""
    return {d: float(metrics[HEADLINE[d]]) for d in DOMAINS if HEADLINE[d] in metrics}


def eval_matrix(rows: Sequence[VersionHeadlines]) -> list[dict]:
    """The version × domain table of headline values (None where not evaluated), one dict per version."""
    return [{"version": r.version, "aliases": ",".join(r.aliases), **{d: r.headline.get(d) for d in DOMAINS}}
            for r in rows]


# -- plots -------------------------------------------------------------------------------------------------------


def _figure(width: float, height: float):
    from matplotlib.figure import Figure  # no pyplot: no global backend state, safe from worker threads

    fig = Figure(figsize=(width, height), dpi=100)
    return fig, fig.add_subplot()


def _style_domain_axis(ax, title: str) -> None:
    ax.set_xticks(range(len(DOMAINS)), [f"{d}\n{HEADLINE[d]}" for d in DOMAINS], fontsize=8)
    ax.set_ylim(0, 1.15)  # room for the deltas written above bars at 1.0
    ax.set_ylabel("headline metric")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def _mark_zeros(ax, bars: list[tuple[float, float]], colour) -> None:
    """A "0" in the bar's colour where a bar has no height: evaluated and scored nothing, unlike "n/a"."""
    for x, v in bars:
        if v == 0:
            ax.text(x, 0.02, "0", ha="center", va="bottom", fontsize=7, color=colour)


def plot_domains_across_versions(rows: Sequence[VersionHeadlines], *, title: str = "Headline metric per domain"):
    """Grouped bars: one group per domain (``DOMAINS``), one bar per version, height = the headline metric.

    A version not evaluated on a domain gets no bar there, an "n/a" in its slot and a footnote. Returns a
    matplotlib ``Figure`` with exactly one bar patch per (version, domain) value present."""
    fig, ax = _figure(max(8.0, 1.2 * len(DOMAINS) + 0.25 * len(DOMAINS) * len(rows)), 4.5)
    width = 0.8 / max(1, len(rows))
    missing = False
    for j, row in enumerate(rows):
        xs = [i - 0.4 + width * (j + 0.5) for i in range(len(DOMAINS))]
        present = [(x, row.headline[d]) for x, d in zip(xs, DOMAINS, strict=True) if d in row.headline]
        color = f"C{j % 10}"
        ax.bar([x for x, _ in present], [v for _, v in present], width * 0.95, label=row.label, color=color)
        _mark_zeros(ax, present, color)
        for x, d in zip(xs, DOMAINS, strict=True):
            if d not in row.headline:
                missing = True
                ax.text(x, 0.02, "n/a", rotation=90, ha="center", va="bottom", fontsize=7, color="0.45")
    _style_domain_axis(ax, title)
    if rows:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # outside: never over a bar
    else:
        ax.text(2.5, 0.5, "no evaluated version", ha="center", color="0.45")
    if missing:
        fig.text(0.01, 0.01, "n/a: that version has no eval of that domain", fontsize=7, color="0.45")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def plot_champion_vs_candidate(
    champion_metrics: Mapping[str, float],
    candidate_metrics: Mapping[str, float],
    *,
    champion_label: str = "champion",
    candidate_label: str = "candidate",
    verdicts: Mapping[str, str] | None = None,
):
    """Side-by-side bars per domain, champion then candidate, with the delta (candidate − champion) written above.

    Args:
        champion_metrics, candidate_metrics: metric name → value, as stored on the versions.
        verdicts: domain → "better"/"worse"/"noise" (``DomainDelta.verdict``), written under the delta and
            colouring it; without one the delta is grey, its significance unknown.
    """
    champion, candidate = headline_by_domain(champion_metrics), headline_by_domain(candidate_metrics)
    fig, ax = _figure(9, 4.5)
    colours = {"better": "tab:green", "worse": "tab:red"}
    for label, values, offset, colour in ((champion_label, champion, -0.2, "0.6"),
                                          (candidate_label, candidate, 0.2, "tab:blue")):
        present = [(i + offset, values[d]) for i, d in enumerate(DOMAINS) if d in values]
        ax.bar([x for x, _ in present], [v for _, v in present], 0.38, label=label, color=colour)
        _mark_zeros(ax, present, colour)
        for i, d in enumerate(DOMAINS):
            if d not in values:
                ax.text(i + offset, 0.02, "n/a", rotation=90, ha="center", va="bottom", fontsize=7, color="0.45")
    for i, d in enumerate(DOMAINS):
        if d in champion and d in candidate:
            delta = candidate[d] - champion[d]
            verdict = (verdicts or {}).get(d)
            text = f"{delta:+.3f}" + (f"\n{verdict}" if verdict else "")
            ax.text(i, max(champion[d], candidate[d]) + 0.02, text, ha="center", va="bottom", fontsize=8,
                    color=colours.get(verdict or "", "0.3"))
    _style_domain_axis(ax, f"{candidate_label} vs {champion_label}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig
