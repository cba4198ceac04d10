"""Deep-search data synthesis end to end, in shards (the library behind ``flows/search.py`` and ``forge synth``).

    shard = synthesize_shard(ws, cfg, i)                    # QAs + trajectories (+ critic verdicts) of head shard i
    out = merge_shards(ws, cfg, shards, pools, review=...)  # reviews applied, filtered SFT pools, summary

``review`` is the step that stores the trajectories for people to judge and hands back the reviewed ones: the
caller passes :func:`forge.review.feedback.apply_reviews` (tasks/search.py, ``forge synth search``), so the search
engine never imports the review store.

Outputs under ``data/search/``:
- ``shards/shard-XXXX.qa.jsonl`` / ``.traj.jsonl``: per shard (a killed run redoes only missing shards);
- ``qa.jsonl`` (SearchQA with gold path and walk), ``trajectories.jsonl`` (SearchTrajectory with verdicts);
- ``pools/deep_search.jsonl``, ``pools/tool_use.jsonl``: the mix's pools for those two domains — the rows
  forge/data/pools.py built from corpora (MuSiQue / HotpotQA search trajectories, GSM8K calculator episodes),
  plus SFT samples from correct trajectories with the effective (human over critic) turn masks.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from itertools import chain
from pathlib import Path
from typing import Any

from forge.config import DeepSearchConfig
from forge.data.jsonl import read_jsonl, scan_jsonl, write_jsonl
from forge.data.schemas import ChatSample, SearchQA, SearchTrajectory, TurnVerdict
from forge.search.agents import SCRIPTED_AGENTS, ReActAgent
from forge.search.critic import judge_trajectory, llm_judge
from forge.search.heads import select_heads
from forge.search.tools import SearchTools
from forge.search.walks import WalkParams, rewrite_question, synthesize_qas
from forge.workspace import Workspace

log = logging.getLogger(__name__)


def search_dir(ws: Workspace) -> Path:
    return ws.data / "search"


def teacher(cfg: DeepSearchConfig) -> Any:
    """The teacher backend when ``cfg.teacher_base_url`` is set (LLM filter, rewrite, critic), else None."""
    if not cfg.teacher_base_url:
        return None
    from forge.generation import endpoint_backend

    return endpoint_backend(cfg.teacher_base_url, cfg.teacher_model)


def shard_heads(tools: SearchTools, cfg: DeepSearchConfig) -> list[list[str]]:
    """Recent, specific head entities in a seeded order, dealt round-robin into ``cfg.num_shards`` shards."""
    sel = select_heads(tools.graph, reference_year=cfg.reference_year, window_days=cfg.recency_window_days,
                       min_degree=cfg.min_head_degree, max_degree=cfg.max_hub_degree,
                       use_embeddings=cfg.use_embeddings, backend=teacher(cfg))
    heads = list(sel.heads)
    random.Random(f"{cfg.seed}:heads").shuffle(heads)
    return [heads[i :: cfg.num_shards] for i in range(cfg.num_shards)]


def run_agents(qas: list[SearchQA], tools: SearchTools, agents: list[str], backend: Any = None,
               policy: ReActAgent | None = None) -> list[SearchTrajectory]:
    """Every scripted agent on every QA, then the ``policy`` agent (a model through the tools) on all of them in
    one batch; each trajectory carries the critic's verdicts (rule-based; with a teacher ``backend`` a turn passes
    only if the rules and the LLM critic both pass it)."""
    pairs = [(SCRIPTED_AGENTS[name]().run(qa, tools), qa) for qa in qas for name in agents]
    if policy is not None:
        pairs += zip(policy.run_many(qas, tools), qas, strict=True)
    out = []
    for traj, qa in pairs:
        verdicts = judge_trajectory(traj, qa, tools.graph)
        if backend is not None:
            verdicts = combine_verdicts(verdicts, llm_judge(backend, traj, qa))
        out.append(traj.model_copy(update={"verdicts": verdicts}))
    return out


def policy_agent(cfg: DeepSearchConfig, model: Any) -> ReActAgent:
    """The ReAct agent over ``model`` (a generation backend: the teacher endpoint or the base model), greedy, with
    the profile's tool-call and token budgets."""
    return ReActAgent(model, max_turns=cfg.policy_agent_max_tool_calls + 1,
                      max_new_tokens=cfg.policy_agent_max_new_tokens)


def combine_verdicts(rule: list[TurnVerdict], llm: list[TurnVerdict]) -> list[TurnVerdict]:
    by_index = {v.message_index: v for v in llm}
    out = []
    for v in rule:
        other = by_index.get(v.message_index)
        if other is None or other.passed or not v.passed:
            out.append(v)
        else:
            out.append(other)  # the rules passed it, the LLM did not: the LLM's verdict and reasons stand
    return out


def rewrite_questions(qas: list[SearchQA], backend: Any) -> list[SearchQA]:
    """LLM obfuscation of the template questions; a rewrite that drops a year keeps the template."""
    out = []
    for qa in qas:
        text = rewrite_question(backend, qa.question)
        out.append(qa if text is None else SearchQA.build(**{**qa.model_dump(exclude={"id"}), "question": text}))
    return out


def synthesize_shard(ws: Workspace, cfg: DeepSearchConfig, shard: int, agent_model: Any = None) -> dict[str, Any]:
    """QAs and trajectories for one head-entity shard, written to ``data/search/shards/``. With ``cfg.policy_agent``
    the policy agent's trajectories join the scripted ones: over the teacher when the profile names one, else over
    ``agent_model`` (a generation backend: the recipe's base model)."""
    backend = teacher(cfg)
    agent_backend = (backend or agent_model) if cfg.policy_agent else None
    if cfg.policy_agent and agent_backend is None:
        raise ValueError("deep_search.policy_agent needs deep_search.teacher_base_url or the recipe's base model")
    started = time.time()
    tools = SearchTools.load(ws, dense=cfg.dense_rerank)
    heads = shard_heads(tools, cfg)[shard]
    quota = math.ceil(cfg.num_questions / cfg.num_shards)
    qas = synthesize_qas(tools.graph, heads, quota, min_hops=cfg.walk_length_min, max_hops=cfg.walk_length_max,
                         params=WalkParams(max_hub_degree=cfg.max_hub_degree,
                                           obfuscate_head_prob=cfg.obfuscate_head_prob, seed=cfg.seed))
    if backend is not None:
        qas = rewrite_questions(qas, backend)
    qa_seconds = time.time() - started
    trajs = run_agents(qas, tools, list(cfg.agents), backend,
                       policy_agent(cfg, agent_backend) if agent_backend is not None else None)
    base = search_dir(ws) / "shards" / f"shard-{shard:04d}"
    write_jsonl(base.with_suffix(".qa.jsonl"), qas)
    write_jsonl(base.with_suffix(".traj.jsonl"), trajs)
    seconds = time.time() - started
    log.info("search shard %d/%d: %d QAs, %d trajectories in %.1f s", shard + 1, cfg.num_shards, len(qas),
             len(trajs), seconds)
    return {"shard": shard, "qa_path": str(base.with_suffix(".qa.jsonl")),
            "traj_path": str(base.with_suffix(".traj.jsonl")), "qas": len(qas), "trajectories": len(trajs),
            "qa_seconds": round(qa_seconds, 2), "seconds": round(seconds, 2)}


Review = Callable[[list[SearchTrajectory], list[SearchQA]], tuple[list[SearchTrajectory], dict[str, Any]]]


def merge_shards(ws: Workspace, cfg: DeepSearchConfig, shards: list[dict[str, Any]],
                 pool_paths: dict[str, str] | None = None, *, review: Review) -> dict[str, Any]:
    """Join the shards, apply the reviews, write the filtered pools; returns paths and figures.

    ``review(trajectories, qas)`` returns the trajectories no reviewer rejected, with human verdicts over the
    critic's (a turn a reviewer rejected is not trained on, one a reviewer accepted is), and counts of what the
    reviews changed, which land in ``stats["review"]``.
    """
    out = search_dir(ws)
    qas = [qa for s in shards for qa in read_jsonl(s["qa_path"], SearchQA, max_bad_ratio=0.0).rows]
    trajs = [t for s in shards for t in read_jsonl(s["traj_path"], SearchTrajectory, max_bad_ratio=0.0).rows]
    write_jsonl(out / "qa.jsonl", qas)
    write_jsonl(out / "trajectories.jsonl", trajs)
    reviewed, effect = review(trajs, qas)
    samples = [t.to_chat_sample() for t in reviewed if t.correct]
    samples = [s for s in samples if any(m.loss for m in s.messages if m.role == "assistant")]
    pools = write_pools(out / "pools", samples, pool_paths or {})
    stats = summarize(qas, trajs)
    stats.update(samples={d: sum(s.domain == d for s in samples) for d in ("deep_search", "tool_use")}, review=effect)
    return {"qa_path": str(out / "qa.jsonl"), "traj_path": str(out / "trajectories.jsonl"), "pools": pools,
            "stats": stats}


def write_pools(out: Path, samples: list[ChatSample], pool_paths: dict[str, str]) -> dict[str, str]:
    """deep_search / tool_use pools: the existing pool rows (``pool_paths``, streamed: a profile's own sources can
    make them large), plus ``samples``."""
    paths = {}
    for domain in ("deep_search", "tool_use"):
        existing = (row for _, row in scan_jsonl(pool_paths[domain], ChatSample)) if domain in pool_paths else ()
        paths[domain] = str(out / f"{domain}.jsonl")
        write_jsonl(paths[domain], chain(existing, (s for s in samples if s.domain == domain)))
    return paths


def summarize(qas: list[SearchQA], trajs: list[SearchTrajectory]) -> dict[str, Any]:
    by_agent: dict[str, list[SearchTrajectory]] = {}
    for t in trajs:
        by_agent.setdefault(t.agent, []).append(t)
    turns = [v for t in trajs for v in t.verdicts]
    return {
        "qas": len(qas),
        "hops": dict(sorted(Counter(len(q.gold_relations) for q in qas).items())),
        "obfuscated_heads": sum(1 for q in qas if (q.walk or {}).get("head_condition")),
        "trajectories": len(trajs),
        "accuracy": {a: sum(t.correct for t in ts) / len(ts) for a, ts in sorted(by_agent.items())},
        "turns": len(turns),
        "turn_pass_rate": sum(v.passed for v in turns) / max(1, len(turns)),
    }
