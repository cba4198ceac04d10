"""Measurement: does the tiny policy learn a tool episode whose every copy is token for token, of frequent tokens?

    PYTHONPATH=. .venv/bin/python bench/agentic_python.py [--work DIR] [--sft-steps 100] [--rl-lr 2e-4] \
        [--fixed-width] [--split-digits] [--sft-from DIR] [--rl-temperature T] [--rl-steps N] \
        [--rl-questions-per-step N] [--rl-seed S] [--python-only] [--no-rl] [--sft-batch N] [--episodes-per-row K] \
        [--restate call|both|same]
    PYTHONPATH=. .venv/bin/python bench/agentic_python.py --plot OUT.png RESULT.json ...

Why (issue 13): agentic RL's trajectory reward stays 0 at tiny scale because the policy does not copy a name it read
(bench/agentic_copy.py, bench/copy_pretraining.py). Names are rare tokens, and with byte-level BPE their first token
is spelled differently after a space than after a quote or a newline. This asks the easiest copy there is: an
arithmetic question whose expression stands on its own line (``Compute with the python tool:\\n9*41``), solved by
one ``python`` call that prints it (``print(9*41)``) and an answer that repeats the tool's output. Every token to
copy is a digit (or a pair of digits: the tiny tokenizer merged 50 of the 100 pairs, ``3901`` is ``3 90 1``) or an
operator, among the most frequent tokens there are, and spelled the same where it is read and where it is written.
``--fixed-width --split-digits`` removes the last two obstacles: every factor two digits, every product four, and a
base whose tokenizer splits every digit (``TokenizerConfig.split_digits``), so each token to copy sits a fixed
number of tokens back from where it is written: a copy by position, which needs no induction head.

The base is the tiny profile's (its tokenizer, model and pre-training on corpora/, as the recipe's stage 0 builds
it: ~9 min on 2 cores), then SFT on ``--rows`` scripted episodes (really run in the sandbox) at the agentic stage's
context, then greedy episodes on 64 held-out expressions through the loop agentic RL uses
(forge.search.agents.ReActAgent → forge.search.rollout.run_episodes), then the profile's agentic RL
(forge.training.agentic.train_agentic) on 400 other expressions. What is prepared in ``--work`` is reused when
found there (``--sft-from`` continues an earlier SFT for more steps). Writes bench/results/agentic_python.json.
A run at ``--rl-lr 1e-12`` is the control of one at a real learning rate with the same ``--rl-seed``: the same
questions in the same order, rolled out by the frozen policy, so a rise above it is learning, not easier questions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import random
import sys
import time
from pathlib import Path

from forge.config import SFTConfig, SFTStageConfig, load_profile
from forge.data.pools import iter_pretraining_texts
from forge.data.schemas import ChatSample, SearchQA
from forge.generation.transformers_backend import TransformersBackend
from forge.search.agents import Episode, ReActAgent
from forge.search.rollout import SearchEnvironment
from forge.search.tools import PYTHON_SPEC, SearchTools
from forge.training.agentic import train_agentic
from forge.training.base_model import build_model, pretrain
from forge.training.sft import run_sft_stage
from forge.training.tokenizer import train_tokenizer
from forge.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Compute with the python tool:\n"


def expressions(n: int, seed: int, fixed_width: bool = False) -> list[SearchQA]:
    """``n`` distinct ``a op b`` questions, a and b in 2–99, op one of + - *; the answer is the value.

    ``fixed_width``: a and b in 32–99 and op ``*``, so every expression is five tokens and every value four digits:
    each token to copy (into the call, then from the tool's output into the answer) then sits the same number of
    tokens back from where it is written, a copy by position that needs no induction."""
    rng, out, seen = random.Random(seed), [], set()
    while len(out) < n:
        if fixed_width:
            a, op, b = rng.randint(32, 99), "*", rng.randint(32, 99)
        else:
            a, op, b = rng.randint(2, 99), rng.choice("+-*"), rng.randint(2, 99)
        expr = f"{a}{op}{b}"
        if expr not in seen:
            seen.add(expr)
            value = {"+": a + b, "-": a - b, "*": a * b}[op]
            out.append(SearchQA.build(source="bench:python", parents=[expr], question=PROMPT + expr,
                                      answer=str(value)))
    return out


class PythonOnlyTools(SearchTools):
    """The same tools with only ``python`` described in the system prompt: an episode is 289 tokens instead of 682
    (with the split-digit tokenizer), so a step of packed rows trains on more than twice as many episodes."""

    @property
    def specs(self):
        return [PYTHON_SPEC]


FILL = " so"  # one token of filler (checked by equal_pads)


def solve(qa: SearchQA, tools: SearchTools, restate: str | None = None, pads: tuple[int, ...] = (0, 0, 0, 0)):
    """The scripted episode: print the expression with the python tool (run in the sandbox), answer its output.
    ``restate``: the reasoning names what its turn copies, ``"call"`` in the call's turn (``I run 81*85 in
    python.``), ``"both"`` (or ``"same"``) in the answer's too (``The tool printed 6885.``), so each such copy is two
    shorter ones: question to reasoning to call, tool output to reasoning to answer. ``pads``: filler tokens
    before and after each restatement (``same``: so that all four copies sit equally far back, see equal_pads)."""
    expr = qa.question.removeprefix(PROMPT)
    ep = Episode(tools, qa.question)
    before_call, after_call, before_answer, after_answer = (FILL * n for n in pads)
    out = ep.act(f"{before_call}I run {expr} in python.{after_call}" if restate else "I run the expression in python.",
                 "python", {"code": f"print({expr})"})
    value = out.strip()
    ep.answer(f"{before_answer}The tool printed {value}.{after_answer}" if restate in ("both", "same")
              else "The tool printed the value.", value)
    return ep.finish(qa, "python", value)


def copy_distances(tok, traj) -> list[int]:
    """How many tokens back each of a restated episode's four copies reads: question -> the call's reasoning ->
    the call, the tool's output -> the answer's reasoning -> the answer (positions of the copied strings' first
    tokens; every digit is its own token with ``--split-digits``)."""
    from forge.training.tokenizer import encode_chat

    ids = encode_chat(tok, traj.to_chat_sample(), max_length=1 << 20)["input_ids"]
    pieces = [tok.decode([i]) for i in ids]

    def starts(text: str) -> list[int]:
        n = len(text)
        return [i for i in range(len(pieces) - n + 1) if "".join(pieces[i : i + n]).strip() == text
                and all(len(p.strip()) == 1 for p in pieces[i : i + n])]

    expr, value = traj.question.removeprefix(PROMPT), traj.gold_answer
    q, r1, c = starts(expr)[:3]
    o, r2, a = starts(value)[:3]
    return [r1 - q, c - r1, r2 - o, a - r2]


def equal_pads(tok, qa: SearchQA, tools: SearchTools) -> tuple[tuple[int, ...], int]:
    """Filler before and after each restatement that puts all four copies of the episode the same distance back
    (the longest of the four unpadded), so that one copy by position serves every turn; returns the pads and that
    distance. ``bench/copy_pretraining.py`` found a copy at one fixed distance forms at once in the tiny model."""
    d = copy_distances(tok, solve(qa, tools, "same"))
    target = max(d)
    pads = tuple(target - x for x in d)
    got = copy_distances(tok, solve(qa, tools, "same", pads))
    if got != [target] * 4:
        raise RuntimeError(f"filler {FILL!r} is not one token a word here: distances {got}, wanted {target}")
    return pads, target


def episode_rows(trajs: list, per_row: int) -> list[ChatSample]:
    """SFT rows of ``per_row`` scripted episodes each, one after another in one conversation behind one system
    prompt (every episode's messages as it ran: its question, its call, the tool's output, its answer)."""
    if per_row == 1:
        return [t.to_chat_sample() for t in trajs]
    rows = []
    for i in range(0, len(trajs), per_row):
        group = trajs[i : i + per_row]
        rows.append(ChatSample.build(domain="tool_use", source="bench:python", parents=[t.id for t in group],
                                     messages=[m for t in group for m in t.messages], tools=group[0].tools))
    return rows


def teacher_forced_copies(model_dir: Path, trajs: list) -> dict[str, float]:
    """Share of the digits the model predicts right (argmax) in each assistant turn of held-out scripted episodes,
    fed the episode as written: the call's turn (the factors copied from the question, and with ``--restate`` into
    its reasoning first) and the answer's (the value copied from the tool's output). Tells a copy that never formed
    from one that formed but was led astray when sampling."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forge.training.tokenizer import encode_chat

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    right = {"call_turn": [0, 0], "answer_turn": [0, 0]}
    for traj in trajs:
        enc = encode_chat(tok, traj.to_chat_sample(), max_length=1 << 20)
        ids, mask = enc["input_ids"], enc["completion_mask"]
        with torch.no_grad():
            predicted = model(torch.tensor([ids])).logits[0].argmax(-1).tolist()
        turn = -1  # the assistant turns are the mask's runs of 1, in order
        for i in range(1, len(ids)):
            turn += mask[i] and not mask[i - 1]
            if mask[i] and tok.decode([ids[i]]).isdigit():
                kind = list(right)[turn]
                right[kind][0] += predicted[i - 1] == ids[i]
                right[kind][1] += 1
    return {f"{kind}_digits_right": round(hit / max(total, 1), 3) for kind, (hit, total) in right.items()}


def plot(results: list[Path], out: Path) -> None:
    """Trajectory reward per RL step of result files (runs from one SFT checkpoint: trained against frozen, one
    line each, paired runs of a seed in one colour), with each run's 5-step moving mean."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for path in results:
        rl = json.loads(path.read_text())["rl"]
        values = rl["trajectory_reward_per_step"]
        frozen = rl["learning_rate"] < 1e-9
        seed = rl.get("seed", 0)
        label = f"seed {seed}, " + ("frozen (lr 1e-12)" if frozen else f"trained (lr {rl['learning_rate']:g})")
        style = {"color": f"C{seed}", "linestyle": "--" if frozen else "-"}
        steps = range(1, len(values) + 1)
        ax.plot(steps, values, alpha=0.25, **style)
        windows = [values[max(0, j - 4) : j + 1] for j in range(len(values))]
        ax.plot(steps, [sum(w) / len(w) for w in windows], linewidth=2, label=label, **style)
    ax.set_xlabel("agentic RL step")
    ax.set_ylabel("trajectory reward (share of episodes answered right)")
    ax.set_title("Agentic RL on python-tool episodes, trained against frozen (thin: per step, thick: 5-step mean)")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", type=Path, nargs="+", metavar=("OUT.png", "RESULT.json"),
                        help="draw the RL curves of result files into OUT.png and stop")
    parser.add_argument("--work", type=Path, default=Path("/tmp/agentic-python"))
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--sft-steps", type=int, default=100)
    parser.add_argument("--sft-lr", type=float, default=0.002)
    parser.add_argument("--sft-from", type=Path, help="SFT from this checkpoint (an earlier run's SFT: more steps "
                        "without redoing the first ones) instead of the base")
    parser.add_argument("--sft-max-length", type=int, help="packed SFT rows of this many tokens (default: the "
                        "agentic stage's context; an episode is ~60 tokens, so shorter rows make a step cheaper)")
    parser.add_argument("--sft-batch", type=int, default=8, help="packed SFT rows a step")
    parser.add_argument("--episodes-per-row", type=int, default=1, help="scripted episodes in one SFT row, one after "
                        "another behind one system prompt (each a user question and its two turns), so a step's "
                        "tokens are mostly episodes rather than the tools' description")
    parser.add_argument("--restate", choices=("call", "both", "same"), help="the reasoning of the call's turn "
                        "(call) or of both turns (both) names what the turn copies; same: both, with filler that "
                        "puts every copy equally far back (needs --split-digits --fixed-width)")
    parser.add_argument("--rl-lr", type=float, default=2e-4)
    parser.add_argument("--rl-temperature", type=float, default=1.0, help="rollout sampling temperature")
    parser.add_argument("--rl-steps", type=int, help="agentic RL steps (default: the tiny profile's)")
    parser.add_argument("--rl-seed", type=int, default=0, help="seed of RL's question order and sampling")
    parser.add_argument("--rl-questions-per-step", type=int, help="questions per RL step (default: the profile's)")
    parser.add_argument("--fixed-width", action="store_true", help="two-digit factors 32-99, products of 4 digits")
    parser.add_argument("--split-digits", action="store_true", help="a base whose tokenizer splits every digit")
    parser.add_argument("--python-only", action="store_true", help="describe only the python tool to the policy")
    parser.add_argument("--no-rl", action="store_true", help="stop after the held-out greedy episodes of the SFT")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.plot:
        plot(args.plot[1:], args.plot[0])
        return
    if args.restate == "same" and not (args.split_digits and args.fixed_width):
        parser.error("--restate same needs --split-digits --fixed-width (every copy a fixed number of tokens)")
    variant = (("-fixed" if args.fixed_width else "") + ("-digits" if args.split_digits else "")
               + ("-pyonly" if args.python_only else ""))
    args.out = args.out or REPO / "bench" / "results" / f"agentic_python{variant}.json"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cfg = load_profile("tiny")
    ws = Workspace.from_env()
    tools = SearchTools.load(ws)
    if args.python_only:
        tools = PythonOnlyTools(**{f.name: getattr(tools, f.name) for f in dataclasses.fields(tools)})
    started = time.monotonic()
    if args.split_digits:
        cfg = cfg.model_copy(update={"base": cfg.base.model_copy(update={
            "tokenizer": cfg.base.tokenizer.model_copy(update={"split_digits": True})})})
    base = args.work / ("base-digits" if args.split_digits else "base")
    reused = base.exists()
    if not reused:
        tok = train_tokenizer(iter_pretraining_texts(ws.corpora, cfg.base.tokenizer.max_training_chars, cfg.seed),
                              cfg.base.tokenizer)
        texts = list(iter_pretraining_texts(ws.corpora, cfg.base.max_corpus_chars, cfg.seed))
        pretrain(build_model(cfg.base, tok), tok, texts, cfg.base, cfg.runtime, base)

    qas = expressions(args.rows + 464, seed=0, fixed_width=args.fixed_width)
    sft_qas, rl_qas, eval_qas = qas[: args.rows], qas[args.rows : args.rows + 400], qas[args.rows + 400 :]
    pads, distance = (0, 0, 0, 0), None
    if args.restate == "same":
        from transformers import AutoTokenizer

        pads, distance = equal_pads(AutoTokenizer.from_pretrained(base), sft_qas[0], tools)
        print(f"every copy {distance} tokens back: filler {pads}", flush=True)

    def scripted(qa: SearchQA):
        return solve(qa, tools, args.restate, pads)

    sft_trajs = [scripted(qa) for qa in sft_qas]  # each run in the sandbox once
    rows = episode_rows(sft_trajs, args.episodes_per_row)
    sft_length = args.sft_max_length or cfg.agentic_rl.context_tokens
    sft_dir = args.work / (f"sft-{args.sft_steps}-{args.sft_lr:g}-{args.rows}-{sft_length}{variant}"
                           + (f"-b{args.sft_batch}" if args.sft_batch != 8 else "")
                           + (f"-k{args.episodes_per_row}" if args.episodes_per_row > 1 else "")
                           + (f"-restate-{args.restate}" if args.restate else "")
                           + (f"-from-{args.sft_from.name}" if args.sft_from else ""))
    sft_seconds = None
    if not sft_dir.exists():
        sft_started = time.monotonic()
        stage = SFTStageConfig(name="python-sft", max_length=sft_length, max_steps=args.sft_steps,
                               learning_rate=args.sft_lr, per_device_batch_size=args.sft_batch)
        run_sft_stage(args.sft_from or base, rows, rows[:16], stage, SFTConfig(packing=True, save_steps=10_000),
                      cfg.runtime, sft_dir)
        sft_seconds = time.monotonic() - sft_started
    prepared = time.monotonic() - started

    rl = cfg.agentic_rl.model_copy(update={
        "learning_rate": args.rl_lr, "max_tool_calls": 2, "temperature": args.rl_temperature,
        "max_steps": args.rl_steps or cfg.agentic_rl.max_steps,
        "questions_per_step": args.rl_questions_per_step or cfg.agentic_rl.questions_per_step})

    def greedy(model_dir: Path) -> dict:
        agent = ReActAgent(TransformersBackend(model_dir, batch_size=32, device="cpu"), max_turns=rl.max_tool_calls + 1,
                           max_new_tokens=64 + max(pads))  # a turn's filler on top of its ~40 tokens
        trajs = agent.run_many(eval_qas, tools)
        return {"success": sum(t.correct for t in trajs) / len(trajs),
                "examples": [{"expression": t.question.removeprefix(PROMPT), "gold": t.gold_answer,
                              "calls": [c.arguments.get("code") for m in t.messages for c in m.tool_calls],
                              "final": t.final_answer} for t in trajs[:8]]}

    # The command as given (the RL settings it left to the profile are in the report's "rl" record)
    script = Path(sys.argv[0]).resolve()
    script = script.relative_to(REPO) if script.is_relative_to(REPO) else script
    command = " ".join(["PYTHONPATH=. python", str(script), *sys.argv[1:]])
    before = greedy(sft_dir)
    before["teacher_forced"] = teacher_forced_copies(sft_dir, [scripted(qa) for qa in eval_qas])
    sft_record = {"rows": len(rows), "episodes_per_row": args.episodes_per_row, "batch": args.sft_batch,
                  "restate": args.restate, "copy_distance": distance, "filler": pads,
                  "steps": args.sft_steps, "learning_rate": args.sft_lr, "max_length": sft_length,
                  "seconds": round(sft_seconds, 1) if sft_seconds is not None else None,
                  "from": str(args.sft_from) if args.sft_from else "base"}
    if args.no_rl:
        report = {"benchmark": "agentic_python", "command": command,
                  "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()}, "sft": sft_record,
                  "prepare_seconds": round(prepared, 1), "heldout_greedy_before_rl": before}
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}: held-out success {before['success']:.3f}")
        return
    env = SearchEnvironment.from_config(tools, rl_qas, rl, seed=args.rl_seed)
    rl_dir = args.work / (f"rl-{args.rl_lr:g}-t{rl.temperature:g}-{rl.max_steps}x{rl.questions_per_step}"
                          f"-s{args.rl_seed}-{sft_dir.name}")
    result = train_agentic(sft_dir, env, rl, cfg.runtime, rl_dir, seed=args.rl_seed)
    after = greedy(rl_dir)
    report = {
        "benchmark": "agentic_python",
        "command": command,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg": os.getloadavg()},
        "base": {"profile": "tiny", "split_digits": args.split_digits, "prepared_by_an_earlier_run": reused},
        "sft": {**sft_record,
                "scripted_correct": sum(t.correct for t in sft_trajs[:50]) / 50},
        "prepare_seconds": round(prepared, 1),
        "heldout_greedy_before_rl": before,
        "rl": {"learning_rate": args.rl_lr, "steps": rl.max_steps, "temperature": rl.temperature,
               "questions_per_step": rl.questions_per_step, "num_generations": rl.num_generations,
               "seed": args.rl_seed,
               "seconds": round(result.seconds, 1),
               "trajectory_reward_per_step": [round(v, 4) for v in result.series("trajectory_reward")[1]],
               **{k: round(v, 4) for k, v in result.window_metrics(["trajectory_reward", "tool_calls",
                                                                     "turn_reward"]).items()}},
        "heldout_greedy_after_rl": after,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
