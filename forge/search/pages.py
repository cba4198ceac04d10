"""One page per entity: what ``visit`` returns and what ``search`` indexes.

A page is rendered, deterministically, from the graph: the title, the Wikidata description, the dated facts,
every outgoing fact as a sentence (sorted, so the same entity always gives the same page) and, where the
entity's title matches one, a real Wikipedia paragraph from wiki2_corpus, MuSiQue/HotpotQA or Re-DocRED.

    page = render_page(g, mid)
    page.text          # the full page
    page.lines         # its sentences, one per line
"""

from __future__ import annotations

from dataclasses import dataclass

from forge.search.graph import SearchGraph


@dataclass(frozen=True)
class Page:
    mid: str
    title: str
    lines: tuple[str, ...]  # description, dates, facts, paragraph: one sentence (or paragraph) per line

    @property
    def text(self) -> str:
        return "\n".join((self.title, *self.lines))

    @property
    def summary(self) -> str:
        """The search snippet: description and dates."""
        return " ".join(self.lines[:3])


def describe(g: SearchGraph, mid: str) -> str:
    desc = g.description(mid)
    if not desc:
        return f"{g.title(mid)}."
    article = "an" if desc[0].lower() in "aeiou" else "a"
    return f"{g.title(mid)} is {article} {desc}."


def render_page(g: SearchGraph, mid: str) -> Page:
    lines = [describe(g, mid)]
    lines += [g.date_sentence(mid, attr, year) for attr, year in g.years(mid)]
    facts = sorted({(g.label(r), g.title(t), r, t) for r, t in g.out_edges(mid)})
    lines += [g.fact_sentence(mid, r, t) for _, _, r, t in facts]
    if mid in g.paragraphs:
        corpus, text = g.paragraphs[mid]
        lines.append(f"From Wikipedia ({corpus}): {text}")
    return Page(mid=mid, title=g.title(mid), lines=tuple(lines))
