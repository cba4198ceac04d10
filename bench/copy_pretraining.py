"""Measurement: does the tiny base learn to copy (induction) within its pre-training budget if part of it is copying?

    PYTHONPATH=. .venv/bin/python bench/copy_pretraining.py [--shares 0 0.25 1.0]

Why (issue 13): agentic RL's lookups need the policy to write a name it read (the question's head into the visit
call, the tool response's tail into the answer), and the tiny policy respells names (bench/agentic_copy.py). A
model copies through induction heads; this asks whether the tiny profile's pre-training (its model, tokenizer,
steps, batch and learning rate; a plain loop of the same shape as forge/training/base_model.py's) forms them when a
share of its blocks are copy blocks: stretches of 40–100 tokens of the pre-training text, each followed by a
8–48-token span of itself. Measured on held-out text after each run: the held-out loss, and the copy accuracy, the
share of a repeated span's tokens (its first excepted, which nothing predicts) that greedy decoding gets right.
Writes bench/results/copy_pretraining.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
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


def run(share: float, tokenizer, train: torch.Tensor, held: torch.Tensor, cfg) -> dict:
    rng = random.Random(0)
    model = build_model(cfg, tokenizer)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.1)
    started = time.perf_counter()
    for step in range(cfg.max_steps):
        warm = (step + 1) / cfg.warmup_steps
        done = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
        lr = cfg.learning_rate * (warm if step < cfg.warmup_steps else 0.5 * (1 + math.cos(math.pi * done)))
        for group in opt.param_groups:
            group["lr"] = lr
        rows = [copy_block(train, cfg.seq_len, rng) if rng.random() < share else train[rng.randrange(len(train))]
                for _ in range(cfg.batch_size)]
        x = torch.stack(rows)
        model(input_ids=x, labels=x).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
    model.eval()
    with torch.no_grad():
        losses = [model(input_ids=held[i:i + 16], labels=held[i:i + 16]).loss.item() for i in range(0, len(held), 16)]
        acc = copy_accuracy(model, held, random.Random(1))
    result = {"copy_share": share, "heldout_loss": round(sum(losses) / len(losses), 4), "copy_accuracy": round(acc, 4),
              "seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares", type=float, nargs="+", default=[0.0, 0.25, 1.0])
    args = parser.parse_args()
    tiny = load_profile("tiny")
    cfg = tiny.base
    corpora = REPO / "corpora"
    tokenizer = train_tokenizer(iter_pretraining_texts(corpora, cfg.tokenizer.max_training_chars, tiny.seed),
                                cfg.tokenizer)
    train, held = pretraining_blocks(tokenizer, list(iter_pretraining_texts(corpora, cfg.max_corpus_chars, cfg.seed)),
                                     cfg)
    load_before = os.getloadavg()
    runs = [run(share, tokenizer, train, held, cfg) for share in args.shares]
    report = {"benchmark": "copy_pretraining", "command": "python bench/copy_pretraining.py --shares "
              + " ".join(f"{s:g}" for s in args.shares),
              "model": {"hidden_size": cfg.hidden_size, "layers": cfg.num_layers, "vocab": len(tokenizer),
                        "steps": cfg.max_steps, "batch": cfg.batch_size, "seq_len": cfg.seq_len,
                        "learning_rate": cfg.learning_rate},
              "runs": runs, "load_avg": [[round(x, 2) for x in load_before], [round(x, 2) for x in os.getloadavg()]]}
    out = REPO / "bench" / "results" / "copy_pretraining.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
