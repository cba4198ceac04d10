"""The deep-search entity-relation graph: FB15k-237 with readable relation labels, unique page titles, dates.

Built on :class:`forge.data.corpora.KnowledgeGraph` (triples, Wikidata names/descriptions, Freebase years) and
adds what search, walks and questions need:

- a readable, *unique* label per relation (``/people/person/place_of_birth`` → ``place of birth``; collapsed
  Freebase CVT paths keep their context, ``…/spouse_s./people/marriage/location_of_ceremony`` →
  ``location of ceremony (spouse)``). Questions are written with these labels and answer uniqueness is checked
  with them, so two relations must never share one;
- a unique page title per entity (the English Wikipedia title where Wikidata gives one);
- a coarse type per entity (the Freebase domain of the relations it heads: ``people``, ``film``, ``location``…);
- the latest dated fact about the entity or its neighbours (for time-aware head selection).

    g = SearchGraph.load(ws.corpora)
    g.title(mid), g.label(relation), g.tails(mid, relation)

The graph is read-only once loaded, so what walks and agents ask again and again (an entity's named edges by
relation, its years, the sorted entity list, per-date indexes) is computed once per entity or per graph and kept
in :attr:`SearchGraph._memo`; the accessors hand out copies.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from forge.data.corpora import DATE_ATTRS, KnowledgeGraph, load_json

# Freebase path segments whose last word alone reads badly or collides; the label says what the fact means.
LABEL_OVERRIDES = {
    "/award/award_nominee/award_nominations./award/award_nomination/award_nominee": "award co-nominee",
    "/award/award_winner/awards_won./award/award_honor/award_winner": "award co-winner",
    "/location/location/contains": "contains",
    "/film/film/release_date_s./film/film_regional_release_date/film_release_region": "release region",
}


def relation_words(relation: str) -> str:
    """Readable words for a Freebase relation path (unique-ness is enforced by :func:`relation_labels`)."""
    if relation in LABEL_OVERRIDES:
        return LABEL_OVERRIDES[relation]
    parts = relation.strip("/").split("./")
    last = parts[-1].rsplit("/", 1)[-1].replace("_", " ")
    if len(parts) == 1:
        return last
    context = re.sub(r"_s$", "", parts[0].rsplit("/", 1)[-1]).replace("_", " ")
    return last if context == last else f"{last} ({context})"


def relation_labels(relations: list[str]) -> dict[str, str]:
    """One label per relation; where two relations would read the same, each gets its subject type appended."""
    words = {r: relation_words(r) for r in relations}
    clashes = Counter(words.values())
    labels = {}
    for r, w in words.items():
        if clashes[w] > 1:
            subject = r.strip("/").split("/")[1].replace("_", " ")
            w = f"{w} [{subject}]"
        labels[r] = w
    # Still colliding (same subject type): the collapsed node's own domain, then a number, tell them apart.
    for stage in (lambda r: r.split("./")[-1].strip("/").split("/")[0], None):
        again = Counter(labels.values())
        seen: Counter = Counter()
        for r in sorted(labels):
            w = labels[r]
            if again[w] > 1:
                seen[w] += 1
                labels[r] = f"{w} ({stage(r).replace('_', ' ')})" if stage else f"{w} #{seen[w]}"
    if len(set(labels.values())) != len(labels):  # pragma: no cover - the numbering makes them unique
        raise ValueError("relation labels are not unique")
    return labels


def _wiki_title(url: str | None) -> str | None:
    if not url or "/wiki/" not in url:
        return None
    return unquote(url.rsplit("/wiki/", 1)[1]).replace("_", " ").strip() or None


@dataclass
class SearchGraph:
    kg: KnowledgeGraph
    labels: dict[str, str]  # relation → unique readable label
    relation_of_label: dict[str, str]
    titles: dict[str, str]  # mid → unique page title
    mid_of_title: dict[str, str]  # casefolded title → mid
    types: dict[str, str]  # mid → coarse type
    in_relations: dict[str, Counter]  # mid → Counter of relations pointing at it
    paragraphs: dict[str, tuple[str, str]]  # mid → (corpus, real Wikipedia paragraph)
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    @functools.cache
    def load(cls, corpora: Path) -> SearchGraph:
        corpora = Path(corpora)
        kg = KnowledgeGraph.load(corpora)
        relations = sorted({r for edges in kg.out_edges.values() for r, _ in edges})
        labels = relation_labels(relations)
        wiki = load_json(corpora / "kg_fb15k237" / "entity2wikidata.json.gz")
        mids = sorted(m for m in kg.degree if kg.has_name(m))
        titles = _unique_titles(kg, mids, wiki)
        in_rel: dict[str, Counter] = defaultdict(Counter)
        type_votes: dict[str, Counter] = defaultdict(Counter)
        for h, edges in kg.out_edges.items():
            for r, t in edges:
                in_rel[t][r] += 1
                type_votes[h][r.strip("/").split("/")[0]] += 1
        types = {m: (type_votes[m].most_common(1)[0][0] if type_votes[m] else "other") for m in mids}
        g = cls(kg=kg, labels=labels, relation_of_label={v: k for k, v in labels.items()}, titles=titles,
                mid_of_title={t.casefold(): m for m, t in titles.items()}, types=types, in_relations=dict(in_rel),
                paragraphs={})
        g.paragraphs = _match_paragraphs(corpora, g, wiki)
        return g

    # --- naming -----------------------------------------------------------------------------------------
    def name(self, mid: str) -> str:
        return self.kg.name(mid)

    def title(self, mid: str) -> str:
        return self.titles.get(mid, self.kg.name(mid))

    def description(self, mid: str) -> str | None:
        return self.kg.descriptions.get(mid)

    def with_description(self, description: str) -> list[str]:
        """Entities whose Wikidata description is exactly ``description``."""
        def build() -> dict[str, list[str]]:
            index: dict[str, list[str]] = defaultdict(list)
            for m in self.titles:
                if m in self.kg.descriptions:
                    index[self.kg.descriptions[m]].append(m)
            return dict(index)

        return list(self.cached("by_description", build).get(description, []))

    def resolve(self, title: str) -> str | None:
        """The entity whose page title is ``title`` (case-insensitive), or None."""
        return self.mid_of_title.get(" ".join(title.split()).casefold())

    def label(self, relation: str) -> str:
        return self.labels[relation]

    # --- structure --------------------------------------------------------------------------------------
    def cached(self, key: str, build: Callable[[], Any]) -> Any:
        """``build()``, computed once per graph under ``key`` (an index over the whole, read-only graph)."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    @property
    def entities(self) -> list[str]:
        return list(self.cached("entities", lambda: tuple(sorted(self.titles))))

    def degree(self, mid: str) -> int:
        return self.kg.degree.get(mid, 0)

    def _named_edges(self, mid: str) -> tuple[tuple[tuple[str, str], ...], dict[str, tuple[str, ...]]]:
        """The entity's named out-edges in graph order, and the same grouped by relation (kept per entity)."""
        memo = self.cached("named_edges", dict)
        found = memo.get(mid)
        if found is None:
            edges = tuple((r, t) for r, t in self.kg.out_edges.get(mid, []) if t in self.titles)
            by_relation: dict[str, list[str]] = {}
            for r, t in edges:
                by_relation.setdefault(r, []).append(t)
            found = memo[mid] = (edges, {r: tuple(ts) for r, ts in by_relation.items()})
        return found

    def out_edges(self, mid: str) -> list[tuple[str, str]]:
        """Outgoing (relation, tail) pairs whose tail has a page (unnamed Freebase nodes are skipped)."""
        return list(self._named_edges(mid)[0])

    def tails(self, mid: str, relation: str) -> list[str]:
        return list(self._named_edges(mid)[1].get(relation, ()))

    def _dates(self, mid: str) -> tuple[tuple[tuple[str, int], ...], dict[str, int]]:
        """The entity's sorted (attribute, year) facts and the earliest year per attribute (kept per entity)."""
        memo = self.cached("dates", dict)
        found = memo.get(mid)
        if found is None:
            facts = tuple(sorted(set(self.kg.years.get(mid, []))))
            earliest: dict[str, int] = {}
            for a, y in facts:  # sorted: the first year of an attribute is its smallest
                earliest.setdefault(a, y)
            found = memo[mid] = (facts, earliest)
        return found

    def years(self, mid: str) -> list[tuple[str, int]]:
        """(date attribute, year) facts, e.g. ("date_of_birth", 1961)."""
        return list(self._dates(mid)[0])

    def year(self, mid: str, attr: str) -> int | None:
        return self._dates(mid)[1].get(attr)

    def dated_between(self, attr: str, low: int, high: int) -> list[str]:
        """Entities whose :meth:`year` for ``attr`` lies in [low, high], by year then mid (a per-attribute index
        over every entity, sorted by year and searched by bisection)."""
        def build() -> dict[str, tuple[list[int], list[str]]]:
            rows: dict[str, list[tuple[int, str]]] = defaultdict(list)
            for m in self.titles:
                for a, y in self._dates(m)[1].items():
                    rows[a].append((y, m))
            return {a: ([y for y, _ in sorted(r)], [m for _, m in sorted(r)]) for a, r in rows.items()}

        years, mids = self.cached("dated", build).get(attr, ([], []))
        return mids[bisect_left(years, low) : bisect_right(years, high)]

    def last_update(self, mid: str) -> int | None:
        """Latest year among the entity's own dated facts and those of its direct neighbours.

        FB15k-237 has no revision history; a page is taken to change when something it links to happens
        (a film of an actor is released, a team member is born), which is what makes an entity 'recent'."""
        years = [y for _, y in self.kg.years.get(mid, [])]
        for _, t in self.kg.out_edges.get(mid, []):
            years += [y for _, y in self.kg.years.get(t, [])]
        return max(years) if years else None

    def fact_sentence(self, head: str, relation: str, tail: str) -> str:
        return f"The {self.labels[relation]} of {self.title(head)} is {self.title(tail)}."

    def date_sentence(self, mid: str, attr: str, year: int) -> str:
        return f"{self.title(mid)} {DATE_ATTRS[attr]} {year}."


def _unique_titles(kg: KnowledgeGraph, mids: list[str], wiki: dict) -> dict[str, str]:
    """Wikipedia title where known, else the name; clashes get the description (or the mid) in brackets."""
    raw = {m: _wiki_title((wiki.get(m) or {}).get("wikipedia")) or kg.name(m) for m in mids}
    counts = Counter(t.casefold() for t in raw.values())
    titles = {}
    for m, t in raw.items():
        if counts[t.casefold()] > 1:
            t = f"{t} ({kg.descriptions.get(m) or m})"
        titles[m] = t
    counts = Counter(t.casefold() for t in titles.values())
    return {m: (t if counts[t.casefold()] == 1 else f"{t} [{m}]") for m, t in titles.items()}


def _match_paragraphs(corpora: Path, g: SearchGraph, wiki: dict) -> dict[str, tuple[str, str]]:
    """Real Wikipedia text for entities whose title appears in wiki2 / MuSiQue / HotpotQA / Re-DocRED."""
    from forge.data.corpora import load_paragraphs

    by_title: dict[str, list[str]] = defaultdict(list)
    for m in g.titles:
        by_title[g.title(m).casefold()].append(m)
        name = g.name(m).casefold()
        if name != g.title(m).casefold():
            by_title[name].append(m)
    found: dict[str, tuple[str, str]] = {}

    def offer(corpus: str, title: str, text: str) -> None:
        cands = by_title.get(title.strip().casefold(), [])
        if len(cands) == 1 and cands[0] not in found and len(text.split()) >= 8:
            found[cands[0]] = (corpus, " ".join(text.split()))

    for corpus, title, text in load_paragraphs(corpora):
        offer(corpus, title, text)
    for split in ("dev", "test"):
        for doc in load_json(corpora / "kg_redocred" / f"{split}_revised.json.gz"):
            text = " ".join(" ".join(s) for s in doc["sents"])
            offer("kg_redocred", doc["title"], re.sub(r" ([,.;:)])", r"\1", text))
    return found
