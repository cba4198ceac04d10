"""Benchmark: the tiny model's training steps and sampling in fp32 and in bf16 autocast on this CPU.

    .venv/bin/python bench/bf16_cpu.py [--steps 16] [--rounds 5]

``runtime.bf16: auto`` (configs/tiny.yaml) turns bf16 autocast on where it trains faster than fp32 (AMX tiles, or
AVX-512-BF16 on an AMD CPU) and leaves fp32 elsewhere (forge/hardware.py ``bf16_pays_off``, whose rule comes from this
bench's readings on each host kind). This measures what bf16 buys or costs on this CPU: the tiny profile's model (its
base sizes, a 4,096-token vocabulary, random weights and tokens) trained through a transformers ``Trainer`` built from
Forge's ``common_trainer_args`` (so the autocast is the one every Trainer stage gets) at the pre-training shape (16 x
256) and the last SFT stage's (4 x 1,024), and sampling 48 tokens for 32 prompts of 100 (a GRPO step's generation) in
fp32, under autocast, and with bf16 weights. Sides alternate block by block; reported: milliseconds per step (median of
blocks) and fp32 / bf16 ratios. Writes bench/results/bf16_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHAPES = {"pretrain 16 x 256": (16, 256), "sft-3 4 x 1024": (4, 1024)}
VOCAB = 4096


def tiny_model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from forge.config import load_profile

    base = load_profile("tiny").base
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=base.hidden_size, num_hidden_layers=base.num_layers,
        num_attention_heads=base.num_heads, num_key_value_heads=base.num_kv_heads,
        intermediate_size=base.intermediate_size, max_position_embeddings=base.max_position_embeddings,
        tie_word_embeddings=True, pad_token_id=0, eos_token_id=1))


def random_rows(length: int):
    """A dataset of random token rows of ``length`` (labels = inputs), as long as any block needs."""
    import torch

    class Random(torch.utils.data.Dataset):
        def __len__(self):
            return 1_000_000

        def __getitem__(self, i):
            ids = torch.randint(2, VOCAB, (length,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    return Random()


def run_trainer(shape: tuple[int, int], steps: int, work: Path, callback, *, bf16: bool = False):
    """A fresh ``Trainer`` from Forge's ``common_trainer_args`` over random rows of ``shape`` (batch, length), trained
    ``steps`` + 1 optimiser steps (the first a warm-up) with ``callback``; returns the trainer."""
    from transformers import Trainer, TrainingArguments

    from forge.config import TrainingRuntimeConfig
    from forge.training.checkpoints import common_trainer_args

    batch, length = shape
    common = common_trainer_args(work, TrainingRuntimeConfig(bf16=bf16), seed=0, save_steps=10**6)
    args = TrainingArguments(**(common | {"save_strategy": "no"}), max_steps=steps + 1,
                             per_device_train_batch_size=batch, learning_rate=1e-3, logging_steps=steps)
    trainer = Trainer(model=tiny_model(), args=args, train_dataset=random_rows(length), callbacks=[callback])
    trainer.train()
    return trainer


def train_block(bf16: bool, shape: tuple[int, int], steps: int, work: Path) -> tuple[float, float]:
    """ms per optimiser step of a fresh Trainer (after one warm-up step), and its last logged loss."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter())

    clock = Clock()
    trainer = run_trainer(shape, steps, work, clock, bf16=bf16)
    loss = [r["loss"] for r in trainer.state.log_history if "loss" in r][-1]
    return (clock.times[-1] - clock.times[0]) / steps * 1000, loss


def sample_block(mode: str, model, model_bf16) -> float:
    """Seconds to sample 48 new tokens for 32 prompts of 100 tokens."""
    import torch

    prompts = torch.randint(2, VOCAB, (32, 100), generator=torch.Generator().manual_seed(1))
    chosen = model_bf16 if mode == "bf16 weights" else model
    start = time.perf_counter()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "autocast"):
        chosen.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                        max_new_tokens=48, min_new_tokens=48)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16, help="timed optimiser steps per block")
    parser.add_argument("--rounds", type=int, default=5, help="blocks per side, alternating")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "bf16_cpu.json")
    args = parser.parse_args()

    import copy

    import torch
    import transformers

    from forge.data.versioning import cpu_kind
    from forge.hardware import bf16_pays_off

    transformers.logging.set_verbosity_error()
    load = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="forge-bf16-"))
    training: dict[str, dict[str, list[float]]] = {}
    losses: dict[str, dict[str, float]] = {}
    for name, shape in SHAPES.items():
        training[name] = {"fp32": [], "bf16": []}
        for r in range(args.rounds):
            for side in (("fp32", "bf16") if r % 2 == 0 else ("bf16", "fp32")):
                ms, loss = train_block(side == "bf16", shape, args.steps, work / f"{side}-{r}")
                training[name][side].append(round(ms, 1))
                losses.setdefault(name, {})[side] = round(loss, 4)
                print(f"{name} {side}: {ms:.0f} ms/step (loss {loss:.3f})", flush=True)
    model = tiny_model().eval()
    model_bf16 = copy.deepcopy(model).to(torch.bfloat16)
    modes = ("fp32", "autocast", "bf16 weights")
    sampling: dict[str, list[float]] = {m: [] for m in modes}
    for mode in modes:
        sample_block(mode, model, model_bf16)  # warm
    for r in range(args.rounds):
        for mode in (modes if r % 2 == 0 else tuple(reversed(modes))):
            sampling[mode].append(round(sample_block(mode, model, model_bf16), 3))
    ms = {name: {side: statistics.median(v) for side, v in sides.items()} for name, sides in training.items()}
    s = {mode: statistics.median(v) for mode, v in sampling.items()}
    result = {
        "benchmark": "the tiny model's Trainer steps and sampling, fp32 vs bf16 on this CPU",
        "command": "python bench/bf16_cpu.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "cpu_kind": cpu_kind(),
                    "amx": bool(torch.cpu._is_amx_tile_supported()),
                    "avx512_bf16": bool(torch.cpu._is_avx512_bf16_supported()),
                    "bf16_auto_resolves_to": bf16_pays_off(), "torch": torch.__version__,
                    "load_avg_before": [round(x, 2) for x in load],
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "steps_per_block": args.steps,
        "train_ms_per_step_blocks": training,
        "train_ms_per_step": ms,
        "train_ratio_fp32_over_bf16": {name: round(v["fp32"] / v["bf16"], 2) for name, v in ms.items()},
        "last_loss_random_tokens": losses,
        "sampling_s_blocks": sampling,
        "sampling_s": s,
        "sampling_ratio_fp32_over": {mode: round(s["fp32"] / s[mode], 2) for mode in modes[1:]},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("train_ratio_fp32_over_bf16", "sampling_ratio_fp32_over")}, indent=2))


if __name__ == "__main__":
    main()
