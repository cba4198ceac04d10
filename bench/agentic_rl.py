"""Measurement: does agentic RL raise the trajectory reward of a small policy that sometimes succeeds?

    PYTHONPATH=. .venv/bin/python bench/agentic_rl.py [--profile tiny] [--work DIR] [--modes no_loss negative_reward]

The tiny recipe's SFT policy exists only after a full ``forge run``, so this builds one the way the recipe builds
its own, smaller and on the task: the tiny profile's tokenizer (BPE on the pre-training texts), a Llama of
``--hidden`` × ``--layers`` pre-trained on the offline encyclopedia's pages (what the tools serve; each repeats its
title on every line) and SFT'd on :class:`forge.search.lookups.LookupAgent`'s solutions to lookup questions
(``--sft-stages``). The prepared policy is kept in ``--work`` and reused when found there. With the defaults it
does not succeed yet: it never copies a name it has read (the result's ``note``), so this measures a null result
until a policy that copies is built here. ``--entity-tokens`` adds every page title to the tokenizer as one token (a
whole-word match): a name is then one id in the question, in the call's arguments, in the tool response and in the
answer, and every copy a lookup asks is "the latest name read" (the head at the end of the question, the tail at the
end of the response), which an attention head can find by the token's kind and recency, not by matching the token
before it (bench/copy_pretraining.py: that kind of copy did not form in any budget tried).

Then the profile's ``agentic_rl`` stage runs from it (:func:`forge.training.agentic.train_agentic` in the environment
:meth:`forge.search.rollout.SearchEnvironment.from_config` builds, as tasks/agentic.py does) on lookups held out
from those SFT rows, once per ``--modes`` entry (how a rejected turn is treated), plus a control with a learning
rate of 1e-12 (the same sampling, no learning: the noise the windows carry). Reported per run: the mean trajectory
reward, turn reward, rejected-turn share and tool calls per episode over the first and last 20% of steps, the
stage's seconds, and the greedy success rate on 64 lookups held out from both SFT and RL, before and after.
Writes bench/results/agentic_rl.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import tempfile
import time
from pathlib import Path

from tokenizers import AddedToken

from forge.config import SFTConfig, SFTStageConfig, load_profile
from forge.data.pools import iter_pretraining_texts
from forge.generation.transformers_backend import TransformersBackend
from forge.search.agents import ReActAgent
from forge.search.lookups import LookupAgent, SftSeen, build_lookup_qas, sft_seen
from forge.search.rollout import SearchEnvironment
from forge.search.tools import SearchTools
from forge.training.agentic import CURVES, train_agentic
from forge.training.base_model import build_model, pretrain
from forge.training.sft import run_sft_stage
from forge.training.tokenizer import train_tokenizer
from forge.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent
KEYS = (*CURVES, "answered", "context_reductions")


def success_rate(model_dir: Path, qas, tools, max_turns: int, max_new_tokens: int) -> float:
    """Greedy episodes through the same loop (ReActAgent → forge.search.rollout.run_episodes): share answered right."""
    agent = ReActAgent(TransformersBackend(model_dir, batch_size=32, device="cpu"), max_turns=max_turns,
                       max_new_tokens=max_new_tokens)
    trajs = agent.run_many(qas, tools)
    return sum(t.correct for t in trajs) / len(trajs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--pretrain-steps", type=int, default=800, help="steps on the encyclopedia's pages")
    parser.add_argument("--sft-stages", nargs="+", default=["200:0.002:1000", "400:0.001:3000"],
                        help="SFT stages, each STEPS:LEARNING_RATE:ROWS (the first ROWS lookup solutions)")
    parser.add_argument("--modes", nargs="+", default=["no_loss", "negative_reward"])
    parser.add_argument("--no-control", action="store_true", help="skip the learning-rate-1e-12 control run")
    parser.add_argument("--entity-tokens", action="store_true",
                        help="add every page title to the tokenizer as one token (a whole-word match), so a name is "
                        "one id wherever it is read or written")
    parser.add_argument("--work", type=Path, help="where the policy is prepared, or was (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "agentic_rl.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cfg = load_profile(args.profile)
    rl = cfg.agentic_rl
    work = args.work or Path(tempfile.mkdtemp(prefix="agentic-bench-"))
    ws = Workspace.from_env()
    tools = SearchTools.load(ws)
    g = tools.graph

    started = time.monotonic()
    stages = [(int(a), float(b), int(c)) for a, b, c in (x.split(":") for x in args.sft_stages)]
    sft_qas = build_lookup_qas(g, max(n for _, _, n in stages), min_hops=rl.min_hops, max_hops=rl.max_hops, seed=1000)
    rows = [LookupAgent().run(qa, tools).to_chat_sample() for qa in sft_qas]
    seen = sft_seen(rows)
    rl_qas = build_lookup_qas(g, rl.questions, min_hops=rl.min_hops, max_hops=rl.max_hops, seen=seen, seed=cfg.seed)
    both = SftSeen(seen.pages | {qa.gold_path[0].casefold() for qa in rl_qas}, seen.questions)
    eval_qas = build_lookup_qas(g, 64, min_hops=rl.min_hops, max_hops=rl.max_hops, seen=both, seed=7)

    size = {"hidden_size": args.hidden, "num_layers": args.layers, "intermediate_size": args.hidden * 688 // 256}
    base_cfg = cfg.base.model_copy(update={**size, "max_steps": args.pretrain_steps, "eval_every": 100})
    if not (work / "base").exists():
        tok = train_tokenizer(iter_pretraining_texts(ws.corpora, cfg.base.tokenizer.max_training_chars, cfg.seed),
                              cfg.base.tokenizer)
        if args.entity_tokens:
            titles = sorted({g.title(m) for m in g.entities})
            tok.add_tokens([AddedToken(t, single_word=True, normalized=False) for t in titles])
        pages = [p.text for p in tools.pages]
        random.Random(cfg.seed).shuffle(pages)
        pretrain(build_model(base_cfg, tok), tok, pages, base_cfg, cfg.runtime, work / "base")
    reused = (work / f"sft-{len(stages) - 1}").exists()
    previous = work / "base"
    for k, (steps, lr, n) in enumerate(stages):
        stage = SFTStageConfig(name=f"lookup-sft-{k}", max_length=cfg.base.max_position_embeddings, max_steps=steps,
                               learning_rate=lr, per_device_batch_size=8)
        if not (work / f"sft-{k}").exists():
            run_sft_stage(previous, rows[:n], rows[:16], stage, SFTConfig(packing=True, save_steps=10_000),
                          cfg.runtime, work / f"sft-{k}")
        previous = work / f"sft-{k}"
    sft_dir = previous
    turns = rl.max_tool_calls + 1
    before = success_rate(sft_dir, eval_qas, tools, turns, rl.max_new_tokens)
    prepared = time.monotonic() - started

    runs = []
    plan = [(mode, rl.learning_rate) for mode in args.modes] + ([] if args.no_control else [(args.modes[0], 1e-12)])
    for mode, lr in plan:
        run_cfg = rl.model_copy(update={"rejected_turns": mode, "learning_rate": lr})
        env = SearchEnvironment.from_config(tools, rl_qas, run_cfg, seed=cfg.seed)
        out = work / f"rl-{mode}-{lr:g}"
        result = train_agentic(sft_dir, env, run_cfg, cfg.runtime, out, seed=cfg.seed)
        runs.append({
            "rejected_turns": mode, "learning_rate": lr, "seconds": round(result.seconds, 1),
            **{k: {"first20": round(result.window_mean(k, 0.0, 0.2), 4),
                   "last20": round(result.window_mean(k, 0.8, 1.0), 4)} for k in KEYS},
            "trajectory_reward_per_step": [round(v, 4) for v in result.series("trajectory_reward")[1]],
            "heldout_success_after": success_rate(out, eval_qas, tools, turns, rl.max_new_tokens),
        })
        print(json.dumps(runs[-1]))

    report = {
        "benchmark": "agentic_rl",
        "command": "PYTHONPATH=. python bench/agentic_rl.py " + " ".join(
            [f"--profile {args.profile}", f"--hidden {args.hidden}", f"--layers {args.layers}",
             f"--pretrain-steps {args.pretrain_steps}", "--sft-stages " + " ".join(args.sft_stages),
             "--modes " + " ".join(args.modes)]
            + (["--no-control"] if args.no_control else []) + (["--entity-tokens"] if args.entity_tokens else [])),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "omp_num_threads": os.environ.get("OMP_NUM_THREADS")},
        "policy": {"size": f"{args.layers} layers × {args.hidden}", "entity_tokens": args.entity_tokens,
                   "pretrain_steps_on_pages": args.pretrain_steps,
                   "sft_stages": [{"steps": a, "learning_rate": b, "rows": c} for a, b, c in stages],
                   "prepare_seconds": round(prepared, 1), "prepared_by_an_earlier_run": reused},
        "questions": {"rl": len(rl_qas), "heldout_eval": len(eval_qas),
                      "rl_heads_visited_by_sft": sum(qa.gold_path[0].casefold() in seen.pages for qa in rl_qas)},
        "settings": rl.model_dump(mode="json"),
        "heldout_success_before": before,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
