"""Measurement: can a small policy answer lookups when every name it must copy is the same tokens where it reads it
and where it writes it?

    PYTHONPATH=. .venv/bin/python bench/agentic_copy.py --base DIR [--steps 200 300] [--rows 1000 2000] [--rl-lr 2e-4]

Why (the note on issue 13, 2026-11-26): with byte-level BPE a name in the question is `` Jon`` `` St`` ``one`` but in
the call's JSON (``"page": "Jon Stone"``) ``J`` ``on`` `` St`` ``one``, and an answer at the start of the content
is spelled without the tool response's leading space. Here the 1-hop lookups (forge/search/lookups.py) quote their
head (``What is the music of "Poltergeist (1982 film)"?``) and the scripted solution answers with the response's
words, leading space included (``normalize_answer`` strips it), so every copy is token for token. ``--base`` is a
model pre-trained on the encyclopedia's pages (``bench/agentic_rl.py --work DIR`` leaves one in ``DIR/base``). SFT
runs in stages (``--steps``, each on the first ``--rows`` solutions), each continuing the last; after each the greedy
success on 64 held-out lookups is measured; ``--rl-lr`` then runs the profile's agentic RL from the last stage.
Writes bench/results/agentic_copy.json.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from forge.config import SFTConfig, SFTStageConfig, load_profile
from forge.generation.transformers_backend import TransformersBackend
from forge.search.agents import Episode, ReActAgent, fact_tails
from forge.search.lookups import SftSeen, build_lookup_qas, sft_seen
from forge.search.rollout import SearchEnvironment
from forge.search.tools import SearchTools
from forge.training.agentic import train_agentic
from forge.training.sft import run_sft_stage
from forge.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="a model pre-trained on the pages")
    parser.add_argument("--work", type=Path, default=Path("/tmp/agentic-copy"))
    parser.add_argument("--steps", type=int, nargs="+", default=[200, 300])
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 2000])
    parser.add_argument("--learning-rate", type=float, default=0.002)
    parser.add_argument("--rl-lr", type=float, help="run agentic RL from the last SFT stage at this learning rate")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "agentic_copy.json")
    args = parser.parse_args()
    if len(args.steps) != len(args.rows):
        parser.error("--steps and --rows need one value per SFT stage")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cfg = load_profile("tiny")
    rl = cfg.agentic_rl.model_copy(update={"min_hops": 1, "max_hops": 1})
    tools = SearchTools.load(Workspace.from_env())
    g = tools.graph

    def quoted(qa):
        label = qa.walk["hops"][0]["label"]
        return qa.model_copy(update={"question": f'What is the {label} of "{g.title(qa.walk["head"])}"?'})

    def solve(qa):
        ep, head, label = Episode(tools, qa.question), g.title(qa.walk["head"]), qa.walk["hops"][0]["label"]
        page = ep.act(f'I need the {label} of "{head}".', "visit", {"page": head, "goal": label})
        tail = fact_tails(page, head, label)[0]  # a 1-hop lookup's head page names its single tail
        ep.answer(f"The {label} of {head} is {tail}.", " " + tail)
        return ep.finish(qa, "lookup", tail)

    sft_qas = [quoted(q) for q in build_lookup_qas(g, max(args.rows), min_hops=1, max_hops=1, seed=1000)]
    rows = [solve(qa).to_chat_sample() for qa in sft_qas]
    seen = sft_seen(rows)
    rl_qas = [quoted(q) for q in build_lookup_qas(g, rl.questions, min_hops=1, max_hops=1, seen=seen, seed=0)]
    both = SftSeen(seen.pages | {qa.gold_path[0].casefold() for qa in rl_qas}, seen.questions)
    eval_qas = [quoted(q) for q in build_lookup_qas(g, 64, min_hops=1, max_hops=1, seen=both, seed=7)]

    def success(model_dir: Path) -> tuple[float, list[dict]]:
        agent = ReActAgent(TransformersBackend(model_dir, batch_size=32, device="cpu"), max_turns=rl.max_tool_calls + 1,
                           max_new_tokens=rl.max_new_tokens)
        trajs = agent.run_many(eval_qas, tools)
        calls = [[c.arguments.get("page") for m in t.messages for c in m.tool_calls] for t in trajs[:8]]
        return (sum(t.correct for t in trajs) / len(trajs),
                [{"gold_page": q.gold_path[0], "pages_visited": c, "final": t.final_answer, "gold": t.gold_answer}
                 for q, t, c in zip(eval_qas, trajs, calls)])

    report: dict = {"benchmark": "agentic_copy", "base": str(args.base), "stages": []}
    previous = args.base
    for k, (steps, n) in enumerate(zip(args.steps, args.rows)):
        out = args.work / f"sft-{k}-{steps}-{n}"
        if not out.exists():
            stage = SFTStageConfig(name=f"lookup-sft-{k}", max_length=cfg.base.max_position_embeddings,
                                   max_steps=steps, learning_rate=args.learning_rate, per_device_batch_size=8)
            run_sft_stage(previous, rows[:n], rows[:16], stage, SFTConfig(packing=True, save_steps=10_000),
                          cfg.runtime, out)
        rate, examples = success(out)
        report["stages"].append({"steps": steps, "rows": n, "heldout_success": rate, "examples": examples})
        print(json.dumps({"stage": k, "heldout_success": rate}))
        previous = out
    if args.rl_lr:
        env = SearchEnvironment.from_config(tools, rl_qas, rl, seed=cfg.seed)
        run_cfg = rl.model_copy(update={"learning_rate": args.rl_lr})
        result = train_agentic(previous, env, run_cfg, cfg.runtime, args.work / f"rl-{args.rl_lr:g}", seed=cfg.seed)
        report["rl"] = {"learning_rate": args.rl_lr,
                        "trajectory_reward_per_step": [round(v, 4) for v in result.series("trajectory_reward")[1]],
                        **result.window_metrics(["trajectory_reward", "turn_reward", "tool_calls"])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
