"""Measurement: does the tiny base learn to copy (induction) within its pre-training budget if part of it is copying?

    PYTHONPATH=. .venv/bin/python bench/copy_pretraining.py [--shares 0 0.25 1.0]
    PYTHONPATH=. .venv/bin/python bench/copy_pretraining.py --blocks fixed variable --shares 1.0 \
        --hidden 128 --layers 2 --steps 500 --batch 32 --seq-len 128 --learning-rate 0.003

Why (issue 13): agentic RL's lookups need the policy to write a name it read (the question's head into the visit
call, the tool response's tail into the answer), and the tiny policy respells names (bench/agentic_copy.py). A
model copies through induction heads; this asks whether the tiny profile's pre-training (its model, tokenizer,
steps, batch and learning rate; a plain loop of the same shape as forge/training/base_model.py's) forms them when a
share of its blocks are copy blocks: stretches of 40–100 tokens of the pre-training text, each followed by a
8–48-token span of itself. Measured on held-out text after each run: the held-out loss, and the copy accuracy, the
share of a repeated span's tokens (its first excepted, which nothing predicts) that greedy decoding gets right.

``--blocks`` picks the copy blocks: ``text`` (the above), or random tokens, which only copying predicts: ``fixed``,
a block of random tokens whose second half repeats its first (every copy the same distance back, which one
position-keyed head solves), or ``variable``, random spans of 6–30 tokens each repeated after a random gap of 0–30
(the distance varies, so only an induction head, matching the token before, copies), or ``curriculum``: ``variable``
whose spread grows over the first ``--ramp`` share of the steps from one distance (16-token spans repeated at once).
``--symbols N`` draws the random tokens from N ids instead of the whole vocabulary. For random blocks the copy
accuracy is measured on random tokens too: a 30-token span followed by its first 20 tokens, the same at half a block
(the distance ``fixed`` trains), and the repeats of ``variable`` blocks (``varied``; every ``--eval-every`` steps
too).
Writes bench/results/copy_pretraining.json (``--out``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import torch

from forge.config import load_profile
from forge.data.pools import iter_pretraining_texts
from forge.training.base_model import build_model, pretraining_blocks
from forge.training.tokenizer import train_tokenizer

REPO = Path(__file__).resolve().parent.parent


def copy_block(blocks: torch.Tensor, seq_len: int, rng: random.Random) -> torch.Tensor:
    """Text stretches each followed by a span of itself, to ``seq_len`` tokens."""
    out: list[int] = []
    while len(out) < seq_len:
        block = blocks[rng.randrange(len(blocks))].tolist()
        start = rng.randrange(0, seq_len - 100)
        text = block[start:start + rng.randint(40, 100)]
        n = rng.randint(8, min(48, len(text)))
        at = rng.randrange(0, len(text) - n + 1)
        out += text + text[at:at + n]
    return torch.tensor(out[:seq_len])


FIRST_RANDOM_ID = 100  # random tokens start past the special tokens


def random_tokens(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(FIRST_RANDOM_ID, vocab) for _ in range(n)]


def random_block(kind: str, seq_len: int, vocab: int, rng: random.Random, progress: float = 1.0) -> torch.Tensor:
    """Random tokens copied at a fixed or a varying distance; for
    ``curriculum``, the varying one whose spread grows with ``progress`` (0: every span 16 tokens repeated right
    after itself, one distance; 1: ``variable``'s spans of 6–30 after gaps of 0–30)."""
    if kind == "fixed":
        half = random_tokens(rng, seq_len // 2, vocab)
        return torch.tensor((half + half)[:seq_len])
    spread = min(1.0, progress) if kind == "curriculum" else 1.0
    shortest, longest, widest = round(16 - 10 * spread), round(16 + 14 * spread), round(30 * spread)
    out: list[int] = []
    while len(out) < seq_len:
        span = random_tokens(rng, rng.randint(shortest, longest), vocab)
        out += span + random_tokens(rng, rng.randint(0, widest), vocab) + span
    return torch.tensor(out[:seq_len])


def random_copy_accuracy(model, vocab: int, distance: int = 30, n: int = 16) -> float:
    """Greedy accuracy on the first 20 tokens of a ``distance``-token random span written again after it."""
    rng = random.Random(5)
    spans = torch.tensor([random_tokens(rng, distance, vocab) for _ in range(n)])
    x = torch.cat([spans, spans[:, :20]], 1)
    pred = model(input_ids=x).logits[:, distance:-1].argmax(-1)
    return (pred == x[:, distance + 1:]).float().mean().item()


def varied_copy_accuracy(model, vocab: int, n: int = 32) -> float:
    """Greedy accuracy on the repeats of ``variable`` blocks (spans of 6–30 after gaps of 0–30; each repeat's first
    token excepted): copying at distances from 6 to 60, which only an induction head does."""
    rng = random.Random(7)
    right = total = 0
    for _ in range(n):
        span = random_tokens(rng, rng.randint(6, 30), vocab)
        prefix = random_tokens(rng, rng.randint(0, 30), vocab)
        gap = random_tokens(rng, rng.randint(0, 30), vocab)
        ids = prefix + span + gap + span
        pred = model(input_ids=torch.tensor([ids])).logits[0].argmax(-1)
        start = len(ids) - len(span)
        right += sum(int(pred[start + j - 1].item() == span[j]) for j in range(1, len(span)))
        total += len(span) - 1
    return right / total


def copy_accuracy(model, held: torch.Tensor, rng: random.Random, n: int = 64) -> float:
    right = total = 0
    for k in range(n):
        text = held[k % len(held)].tolist()[:120]
        at = rng.randrange(0, 90)
        span = text[at:at + 24]
        pred = model(input_ids=torch.tensor([text + span])).logits[0].argmax(-1)
        for j in range(1, len(span)):
            right += int(pred[len(text) + j - 1].item() == span[j])
            total += 1
    return right / total


def run(share: float, tokenizer, train: torch.Tensor, held: torch.Tensor, cfg, blocks: str = "text",
        ramp: float = 0.6, symbols: int | None = None, eval_every: int = 0) -> dict:
    rng = random.Random(0)
    model = build_model(cfg, tokenizer)
    vocab = FIRST_RANDOM_ID + symbols if symbols else len(tokenizer)  # random tokens: ids FIRST_RANDOM_ID .. vocab - 1
    curve: list[list[float]] = []  # [step, varied copy accuracy] every ``eval_every`` steps
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.1)
    started = time.perf_counter()

    def copied(step: int) -> torch.Tensor:
        if blocks == "text":
            return copy_block(train, cfg.seq_len, rng)
        return random_block(blocks, cfg.seq_len, vocab, rng, progress=step / max(1, ramp * cfg.max_steps))

    for step in range(cfg.max_steps):
        warm = (step + 1) / cfg.warmup_steps
        done = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
        lr = cfg.learning_rate * (warm if step < cfg.warmup_steps else 0.5 * (1 + math.cos(math.pi * done)))
        for group in opt.param_groups:
            group["lr"] = lr
        rows = [copied(step) if rng.random() < share else train[rng.randrange(len(train))]
                for _ in range(cfg.batch_size)]
        x = torch.stack(rows)
        model(input_ids=x, labels=x).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        if eval_every and (step + 1) % eval_every == 0 and step + 1 < cfg.max_steps:
            with torch.no_grad():
                curve.append([step + 1, round(varied_copy_accuracy(model.eval(), vocab), 4)])
            model.train()
            print(f"step {step + 1}: varied copy accuracy {curve[-1][1]}", flush=True)
    model.eval()
    with torch.no_grad():
        losses = [model(input_ids=held[i:i + 16], labels=held[i:i + 16]).loss.item() for i in range(0, len(held), 16)]
        acc = copy_accuracy(model, held, random.Random(1))
        random_acc = random_copy_accuracy(model, vocab)
        half_acc = random_copy_accuracy(model, vocab, distance=cfg.seq_len // 2)
        varied_acc = varied_copy_accuracy(model, vocab)
    result = {"blocks": blocks, **({"ramp": ramp} if blocks == "curriculum" else {}),
              "symbols": vocab - FIRST_RANDOM_ID, "copy_share": share,
              "random_copy_accuracy": round(random_acc, 4), "varied_copy_accuracy": round(varied_acc, 4),
              "random_copy_accuracy_half_block_back": round(half_acc, 4),
              "heldout_loss": round(sum(losses) / len(losses), 4), "copy_accuracy": round(acc, 4),
              **({"varied_copy_accuracy_by_step": curve + [[cfg.max_steps, round(varied_acc, 4)]]} if curve else {}),
              "seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares", type=float, nargs="+", default=[0.0, 0.25, 1.0])
    parser.add_argument("--blocks", nargs="+", choices=["text", "fixed", "variable", "curriculum"], default=["text"])
    parser.add_argument("--ramp", type=float, default=0.6,
                        help="curriculum: the share of the steps over which the copy distance's spread grows")
    parser.add_argument("--hidden", type=int, help="default: the tiny profile's base")
    parser.add_argument("--layers", type=int)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--seq-len", type=int)
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--symbols", type=int,
                        help="random blocks: draw their tokens from this many ids (default: the whole vocabulary)")
    parser.add_argument("--eval-every", type=int, default=0, help="measure the varied copy accuracy every N steps")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "copy_pretraining.json")
    args = parser.parse_args()
    tiny = load_profile("tiny")
    sizes = {"hidden_size": args.hidden, "num_layers": args.layers, "max_steps": args.steps,
             "batch_size": args.batch, "seq_len": args.seq_len, "learning_rate": args.learning_rate}
    if args.hidden:
        sizes["intermediate_size"] = args.hidden * 688 // 256
    cfg = tiny.base.model_copy(update={k: v for k, v in sizes.items() if v is not None})
    corpora = REPO / "corpora"
    tokenizer = train_tokenizer(iter_pretraining_texts(corpora, cfg.tokenizer.max_training_chars, tiny.seed),
                                cfg.tokenizer)
    train, held = pretraining_blocks(tokenizer, list(iter_pretraining_texts(corpora, cfg.max_corpus_chars, cfg.seed)),
                                     cfg)
    load_before = os.getloadavg()
    runs = [run(share, tokenizer, train, held, cfg, blocks, args.ramp, args.symbols, args.eval_every)
            for blocks in args.blocks for share in args.shares]
    report = {"benchmark": "copy_pretraining", "command": "python bench/copy_pretraining.py " + " ".join(sys.argv[1:]),
              "model": {"hidden_size": cfg.hidden_size, "layers": cfg.num_layers, "vocab": len(tokenizer),
                        "steps": cfg.max_steps, "batch": cfg.batch_size, "seq_len": cfg.seq_len,
                        "learning_rate": cfg.learning_rate},
              "runs": runs, "load_avg": [[round(x, 2) for x in load_before], [round(x, 2) for x in os.getloadavg()]]}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
