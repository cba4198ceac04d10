"""Per-domain pools of real SFT conversations (and the side sets later stages need), built from corpora/.

    from forge.data.pools import build_pools
    paths = build_pools(Workspace.from_env(), load_profile("tiny").pools)
    # data/pools/{code,stem,general,deep_search,tool_use}.jsonl  ChatSample rows
    # data/pools/preferences.jsonl                               PreferencePair (HH-RLHF, for the reward model)

What goes where (corpora/README.md has the sources):
- code: MBPP train tasks (1–10, 511–974) as "solve" and "write tests" conversations, and GSM8K word problems
  answered with a Python program assembled from the calculator annotations and checked by evaluating it.
- stem: GSM8K train (worked solution as reasoning, final answer as content) and MATH test rows outside MATH-500.
- general: HH-RLHF harmless-base chosen transcripts, multi-turn. Half of the pairs go to preferences.jsonl
  instead, so the reward model is never scored on conversations the policy was fine-tuned on.
- deep_search: MuSiQue / HotpotQA search-and-visit trajectories (forge.data.trajectories).
- tool_use: GSM8K calculator episodes.
Deep-search synthesis (forge/search/synthesize.py) adds its FB15k-237 graph-walk trajectories to the
deep_search and tool_use pools on top of these.
GSM8K train rows are split so that no two pools share an upstream row. Evaluation sets
never enter a pool: the readers drop them and a :class:`LeakGuard` rejects anything sharing a 13-word run
with an eval prompt. Each pool takes at most ``max_rows_per_source`` rows from any one corpus file.
A row that fails validation is written to ``<home>/quarantine/pools.<name>.bad.jsonl`` and skipped.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, ValidationError

from forge.atomic import atomic_open, atomic_write_text
from forge.config import DOMAINS, PoolsConfig
from forge.data import corpora as C
from forge.data.calc import CalcError, evaluate, format_number, parse_number
from forge.data.jsonl import dump_row
from forge.data.schemas import ChatSample, Message, PreferencePair
from forge.data.trajectories import (
    DEEP_SEARCH_TOOLS,
    TOOL_USE_TOOLS,
    calculator_trajectory,
    hotpot_trajectory,
    musique_trajectory,
)
from forge.workspace import Workspace

GSM8K = "gsm8k/train.jsonl.gz"
MATH = "math/test.jsonl.gz"
MBPP = "mbpp/mbpp.jsonl.gz"
HH = "hh_rlhf_harmless/harmless-base-test.jsonl.gz"
MUSIQUE = "hipporag_musique_hotpotqa/musique_train.json.gz"
HOTPOT = "hipporag_musique_hotpotqa/hotpotqa_train.json.gz"


class PoolBuilder:
    """Writes one pool's rows to ``out`` as they come (what it keeps is their ids: the profile's own sources can be
    far larger than memory); invalid rows and eval leaks go to a quarantine list."""

    def __init__(self, name: str, guard: C.LeakGuard | None, out: TextIO):
        self.name, self.guard, self._out = name, guard, out
        self.ids: set[str] = set()
        self.bad: list[dict] = []

    def add(self, make: Callable[[], BaseModel | None], where: str, text_of: Callable[[BaseModel], str]) -> None:
        try:
            row = make()
        except (ValidationError, ValueError) as err:
            self.bad.append({"where": where, "reason": str(err).splitlines()[0:3]})
            return
        if row is None:
            return
        if self.guard is not None and self.guard.leaks(text_of(row)):
            self.bad.append({"where": where, "reason": ["shares a 13-word run with an evaluation item"]})
            return
        if row.id not in self.ids:  # identical content → identical id → kept once
            self.ids.add(row.id)
            self._out.write(dump_row(row) + "\n")


def chat_text(row: ChatSample) -> str:
    return "\n".join(" ".join(filter(None, [m.content, m.reasoning, *(json.dumps(c.arguments) for c in m.tool_calls)]))
                     for m in row.messages)


def _shuffled(items: list, seed: int, salt: str) -> list:
    out = list(items)
    random.Random(f"{seed}:{salt}").shuffle(out)
    return out


# --- code -------------------------------------------------------------------------------------------------


def mbpp_solve(task: dict) -> ChatSample:
    user = f"{task['text']}\nYour code should pass this test:\n{task['test_list'][0]}"
    answer = f"```python\n{task['code'].strip()}\n```"
    return ChatSample.build(domain="code", source=MBPP, parents=[f"mbpp:{task['task_id']}"],
                            messages=[Message(role="user", content=user), Message(role="assistant", content=answer)])


def mbpp_write_tests(task: dict) -> ChatSample:
    user = f"Write assert-based tests for this function.\nTask: {task['text']}\n```python\n{task['code'].strip()}\n```"
    answer = "```python\n" + "\n".join(task["test_list"]) + "\n```"
    return ChatSample.build(domain="code", source=MBPP, parents=[f"mbpp:{task['task_id']}"],
                            messages=[Message(role="user", content=user), Message(role="assistant", content=answer)])


def gsm8k_program(row: dict) -> ChatSample | None:
    """A word problem answered with a program: one variable per calculator step; a literal equal to an
    earlier step's value becomes that variable. Kept only if evaluating the program gives the final answer."""
    values: list[tuple[str, float]] = []
    lines = []
    for n, m in enumerate(C.CALC_RE.finditer(row["solution"]), start=1):
        expr = m.group(1).strip()
        try:
            value = evaluate(expr)
        except CalcError:
            return None
        for name, prev in reversed(values):
            lit = format_number(prev)
            expr = re.sub(rf"(?<![\w.]){re.escape(lit)}(?![\w.])", name, expr)
        line_text = C.strip_calc_annotations(row["solution"][: m.start()].rsplit("\n", 1)[-1]).strip(" =")
        if line_text:
            lines.append(f"    # {line_text}")
        name = f"step_{n}"
        lines.append(f"    {name} = {expr}")
        values.append((name, value))
    if not values:
        return None
    env = dict(values)
    # Re-run the program's arithmetic with variables bound, to check the substitution kept its meaning.
    for line in lines:
        if line.strip().startswith("step_"):
            var, _, expr = line.strip().partition(" = ")
            for name, val in sorted(env.items(), key=lambda kv: -len(kv[0])):
                expr = re.sub(rf"\b{name}\b", f"({val!r})", expr)
            try:
                env[var] = evaluate(expr)
            except CalcError:
                return None
    final = parse_number(row["final"])
    if final is None or abs(env[values[-1][0]] - final) > 1e-6 * max(1.0, abs(final)) + 0.01:
        return None
    code = "def solve():\n" + "\n".join(lines) + f"\n    return {values[-1][0]}\n\nprint(solve())"
    user = f"Write a Python program that solves this problem and prints the answer.\n{row['question']}"
    answer = f"```python\n{code}\n```\nIt prints {row['final']}."
    return ChatSample.build(domain="code", source=GSM8K, parents=[f"gsm8k/train:{row['index']}"],
                            messages=[Message(role="user", content=user), Message(role="assistant", content=answer)])


# --- stem -------------------------------------------------------------------------------------------------


def gsm8k_stem(row: dict) -> ChatSample:
    reasoning = C.strip_calc_annotations(row["solution"])
    return ChatSample.build(domain="stem", source=GSM8K, parents=[f"gsm8k/train:{row['index']}"], messages=[
        Message(role="user", content=row["question"]),
        Message(role="assistant", reasoning=reasoning, content=f"The answer is {row['final']}."),
    ])


def math_stem(row: dict) -> ChatSample | None:
    boxed = C.last_boxed(row["solution"])
    if boxed is None:
        return None
    return ChatSample.build(domain="stem", source=MATH, parents=[f"math/test:{row['idx']}"], messages=[
        Message(role="user", content=row["problem"]),
        Message(role="assistant", reasoning=row["solution"], content=f"The answer is $\\boxed{{{boxed}}}$."),
    ])


# --- general / preferences -------------------------------------------------------------------------------


def hh_chat(pair: dict, index: int) -> ChatSample | None:
    turns = C.parse_hh_transcript(pair["chosen"])
    if not turns or turns[0][0] != "user":
        return None
    return ChatSample.build(domain="general", source=HH, parents=[f"hh-rlhf/harmless-base/test:{index}"],
                            messages=[Message(role=r, content=t) for r, t in turns])


def hh_preference(pair: dict, index: int) -> PreferencePair | None:
    chosen, rejected = C.parse_hh_transcript(pair["chosen"]), C.parse_hh_transcript(pair["rejected"])
    if not chosen or chosen[:-1] != rejected[:-1] or chosen[-1][0] != "assistant" or rejected[-1][0] != "assistant":
        return None  # the pair must differ only in the final assistant turn
    return PreferencePair.build(source=HH, parents=[f"hh-rlhf/harmless-base/test:{index}"],
                                prompt=[Message(role=r, content=t) for r, t in chosen[:-1]],
                                chosen=chosen[-1][1], rejected=rejected[-1][1])


# --- builders ---------------------------------------------------------------------------------------------


def _take(items: Iterable, cap: int) -> list:
    return list(items)[:cap]


def build_pool_rows(corpora: Path, cfg: PoolsConfig, out_dir: Path) -> tuple[dict[str, PoolBuilder], dict]:
    """Every pool and side set written to ``out_dir/<name>.jsonl`` as its rows are made (each file atomically: a
    failed build leaves the previous files as they were): builders by output name, and a report: rows per pool
    (``rows``) and what each of the profile's own sources gave (``sources``: licence, rows kept, records refused)."""
    guard = C.LeakGuard.from_corpora(corpora)
    names = (*DOMAINS, "preferences")
    with ExitStack() as files:
        out = {name: PoolBuilder(name, guard, files.enter_context(atomic_open(out_dir / f"{name}.jsonl")))
               for name in names}
        sources = _add_rows(corpora, cfg, out)
    return out, {"rows": {name: len(b.ids) for name, b in out.items()}, "sources": sources}


def _add_rows(corpora: Path, cfg: PoolsConfig, out: dict[str, PoolBuilder]) -> list[dict]:
    cap, seed = cfg.max_rows_per_source, cfg.seed

    # GSM8K train: three disjoint slices (stem, tool_use, code), so no question is taught twice.
    gsm = _shuffled(C.load_gsm8k(corpora, "train"), seed, "gsm8k")
    third = len(gsm) // 3
    for row in gsm[:third][:cap]:
        out["stem"].add(lambda r=row: gsm8k_stem(r), f"{GSM8K}:{row['index']}", chat_text)
    for row in gsm[third : 2 * third][:cap]:
        out["tool_use"].add(lambda r=row: _chat("tool_use", GSM8K, f"gsm8k/train:{r['index']}", TOOL_USE_TOOLS,
                                                calculator_trajectory(r["question"], r["solution"], r["final"])),
                            f"{GSM8K}:{row['index']}", chat_text)
    for row in gsm[2 * third :][:cap]:
        out["code"].add(lambda r=row: gsm8k_program(r), f"{GSM8K}:{row['index']}", chat_text)

    for row in _shuffled(C.load_math_train(corpora), seed, "math")[:cap]:
        out["stem"].add(lambda r=row: math_stem(r), f"{MATH}:{row['idx']}", chat_text)

    mbpp_train, _ = C.split_mbpp(corpora)
    for task in _shuffled(mbpp_train, seed, "mbpp")[:cap]:
        out["code"].add(lambda t=task: mbpp_solve(t), f"{MBPP}:{task['task_id']}", chat_text)
        out["code"].add(lambda t=task: mbpp_write_tests(t), f"{MBPP}:{task['task_id']}", chat_text)

    # HH-RLHF less its eval tenth (split_hh): first half of a seeded order → preferences, second half → general chat.
    hh = _shuffled(C.split_hh(corpora)[0], seed, "hh")
    half = len(hh) // 2
    for i, pair in hh[:half][:cap]:
        out["preferences"].add(lambda p=pair, i=i: hh_preference(p, i), f"{HH}:{i}",
                               lambda r: " ".join([*(m.content for m in r.prompt), r.chosen, r.rejected]))
    for i, pair in hh[half:][:cap]:
        out["general"].add(lambda p=pair, i=i: hh_chat(p, i), f"{HH}:{i}", chat_text)

    _deep_search(corpora, cfg, out)
    return _external(cfg, out)


def _external(cfg: PoolsConfig, out: dict[str, PoolBuilder]) -> list[dict]:
    """The profile's own sources (forge/data/sources.py) into their domains' pools; a record that is not JSON, does
    not map or does not validate goes to the pool's quarantine with its file and record number. Returns per source
    what it gave, for data/pools/sources.json."""
    from forge.data.sources import iter_records, to_chat_sample

    report = []
    for domain, sources in cfg.sources.items():
        for src in sources:
            pool, rows_before, bad_before = out[domain], len(out[domain].ids), len(out[domain].bad)
            for n, (file, i, record) in enumerate(iter_records(src), 1):
                if src.max_rows and n > src.max_rows:
                    break
                where = f"{file}:{i}"
                if isinstance(record, Exception):
                    pool.bad.append({"where": where, "reason": [str(record)]})
                    continue
                pool.add(lambda r=record, w=where, s=src, d=domain: to_chat_sample(r, s, d, w), where, chat_text)
            report.append({"name": src.name or src.path, "path": src.path, "domain": domain, "licence": src.licence,
                           "rows": len(pool.ids) - rows_before, "bad": len(pool.bad) - bad_before})
    return report


def _chat(domain: str, source: str, parent: str, tools, messages: list[Message] | None) -> ChatSample | None:
    if messages is None:
        return None
    return ChatSample.build(domain=domain, source=source, parents=[parent], messages=messages, tools=tools)


def _deep_search(corpora: Path, cfg: PoolsConfig, out: dict[str, PoolBuilder]) -> None:
    cap, seed = cfg.max_rows_per_source, cfg.seed
    eval_qs = C.multihop_eval_questions(corpora)
    for item in C.load_musique(corpora)[:cap]:
        if C.normalize_text(item["question"]) in eval_qs:
            continue
        rng = random.Random(f"{seed}:musique:{item['id']}")
        parent = f"musique:{item['id']}"
        out["deep_search"].add(lambda it=item, g=rng, p=parent: _chat(
            "deep_search", MUSIQUE, p, DEEP_SEARCH_TOOLS, musique_trajectory(it, g)), parent, chat_text)
    for item in C.load_hotpotqa(corpora)[:cap]:
        if C.normalize_text(item["question"]) in eval_qs:
            continue
        rng = random.Random(f"{seed}:hotpot:{item['_id']}")
        parent = f"hotpotqa:{item['_id']}"
        out["deep_search"].add(lambda it=item, g=rng, p=parent: _chat(
            "deep_search", HOTPOT, p, DEEP_SEARCH_TOOLS, hotpot_trajectory(it, g)), parent, chat_text)


def build_pools(ws: Workspace, cfg: PoolsConfig) -> dict[str, Path]:
    """Write every pool to ``ws.pools/<name>.jsonl`` atomically; returns name → path."""
    builders, report = build_pool_rows(ws.corpora, cfg, ws.pools)
    # The profile's own sources, with their licences and counts, versioned with the data they gave (only when
    # there are any: a profile without sources writes exactly the files it always did).
    listing = ws.pools / "sources.json"
    if report["sources"]:
        atomic_write_text(listing, json.dumps(report["sources"], indent=1, ensure_ascii=False) + "\n")
    else:
        listing.unlink(missing_ok=True)
    for name, b in builders.items():
        bad_file = ws.quarantine / f"pools.{name}.bad.jsonl"
        if b.bad:
            atomic_write_text(bad_file, "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in b.bad))
        else:
            bad_file.unlink(missing_ok=True)
    return {name: ws.pools / f"{name}.jsonl" for name in builders}


# --- stage-0 pre-training text ----------------------------------------------------------------------------


def _pretraining_documents(corpora: Path) -> list[str]:
    docs = [f"{title}\n{text}" for _, title, text in C.load_paragraphs(corpora)]
    kg = C.KnowledgeGraph.load(corpora)
    docs += [" ".join(kg.facts(m, limit=15)) for m in sorted(kg.out_edges) if kg.has_name(m)]
    docs += [f"{r['question']}\n{C.strip_calc_annotations(r['solution'])}\nThe answer is {r['final']}."
             for r in C.load_gsm8k(corpora, "train")]
    docs += [f"{r['problem']}\n{r['solution']}" for r in C.load_math_train(corpora)]
    docs += [f"# {t['text']}\n{t['code'].strip()}" for t in C.split_mbpp(corpora)[0]]
    docs += [p["chosen"].strip() for _, p in C.split_hh(corpora)[0]]
    return docs


def iter_pretraining_texts(corpora_dir: str | Path, max_chars: int, seed: int = 0) -> Iterator[str]:
    """Plain-text documents for stage-0 pre-training, shuffled across sources, until ``max_chars`` are out.

    Sources: wiki2/MuSiQue/HotpotQA paragraphs, FB15k-237 entity pages, GSM8K train, MATH outside MATH-500,
    MBPP train code, HH-RLHF transcripts. No evaluation set, and no document sharing a 13-word run with one.
    """
    corpora = Path(corpora_dir)
    guard = C.LeakGuard.from_corpora(corpora)
    docs = _shuffled(_pretraining_documents(corpora), seed, "pretraining")
    produced = 0
    for doc in docs:
        if produced >= max_chars:
            return
        if guard.leaks(doc):
            continue
        produced += len(doc)
        yield doc
