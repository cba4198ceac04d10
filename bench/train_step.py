"""Where a training step's time goes, and what three rewrites of its non-matrix parts would buy: the tiny model's
step (forward, backward, AdamW) under bf16 autocast where ``runtime.bf16`` resolves true (fp32 elsewhere), at the
shapes the recipe trains at.

    .venv/bin/python bench/train_step.py [--steps 4] [--rounds 4] [--out FILE]

Shapes: pre-training's (16 rows of 256 tokens, one text a row); the agentic warm-up's (8 packed rows of up to 512,
one ~366-token sample a row: the link solutions run 317-458 tokens, so best-fit packing puts one in each row); the
last SFT stage's (4 rows of 1,024, ~300-token samples packed, attention kept inside each sample by the position ids
restarting, as forge/training/sft.py's ``PackedRowsCollator`` does).

Per shape, four ways of running the same step, alternating in one process, each from the same weights on the same
batches (``same_bits``: every loss and every weight after the steps equal to the eager step's, to the bit):

- ``eager``: what every training stage runs (transformers' loss: ``log_softmax`` of the float logits, then
  ``nll_loss``; attention by ``scaled_dot_product_attention``, on a CPU its flash kernel);
- ``chunked_loss``: the same loss computed a block of rows at a time, the log-probabilities recomputed in the
  backward rather than kept, through the same ATen kernels (so the same bits): the logits-sized float tensors then
  stay in cache instead of crossing memory ~6 times a step;
- ``matmul_attention``: attention as two matrix products with the softmax between them in fp32 (other bits);
- ``segment_attention``: packed rows' attention one sample at a time (``scaled_dot_product_attention`` with
  ``is_causal`` on each stretch of restarting positions) instead of the whole row under the block-causal mask
  transformers builds from the position ids (other bits: the kernel's blocks fall elsewhere).

Then a torch profile of the eager step: the operators' shares of its CPU time, grouped (matrix products,
attention, loss, casts and copies, the rest). Fresh weights at the tiny profile's shape (the time does not depend on
what was learned). Writes bench/results/train_step.json and a plot of the shares (train_step.png).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F
from bf16_cpu import REPO, tiny_model  # bench/ is on sys.path when a bench script runs
from code_rl_stage2 import machine
from torch.profiler import ProfilerActivity, profile
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from forge.attention import use_fast_decoding
from forge.hardware import bf16_pays_off, keep_freed_memory

SHAPES = {  # name: (rows, row length, sample length)
    "pretraining_16x256": (16, 256, 256),
    "agentic_warmup_8x512": (8, 512, 366),
    "sft_4x1024": (4, 1024, 300),
}
SIDES = ("eager", "chunked_loss", "matmul_attention", "segment_attention")
NLL_REDUCTION = {"mean": 1, "sum": 2}  # ATen's enum for nll_loss_forward / nll_loss_backward
GROUPS = (("matrix products", ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")),
          ("attention", ("scaled_dot_product",)),
          ("loss", ("log_softmax", "nll_loss")),
          ("casts and copies", ("aten::copy_", "aten::_to_copy")))


class ChunkedNLL(torch.autograd.Function):
    """``nll_loss(log_softmax(logits.float()), target)`` a block of rows at a time. The forward keeps only each row's
    picked log-probability (then one ``nll_loss`` over all rows adds them in the order the whole-tensor call does);
    the backward recomputes a block's log-probabilities and runs ATen's own two backward kernels on it, so every
    value is the unchunked one's: ``log_softmax`` works row by row."""

    @staticmethod
    def forward(ctx, logits, target, reduction: int, ignore_index: int, rows: int):
        picked = torch.empty((logits.shape[0], 1), dtype=torch.float32)
        safe = target.clamp(min=0)
        for s in range(0, logits.shape[0], rows):
            logp = torch.log_softmax(logits[s:s + rows].float(), -1)
            torch.gather(logp, 1, safe[s:s + rows, None], out=picked[s:s + rows])
        column = torch.where(target == ignore_index, target, torch.zeros_like(target))
        loss, total_weight = torch.ops.aten.nll_loss_forward(picked, column, None, reduction, ignore_index)
        ctx.save_for_backward(logits, target, total_weight)
        ctx.reduction, ctx.ignore_index, ctx.rows = reduction, ignore_index, rows
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        logits, target, total_weight = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for s in range(0, logits.shape[0], ctx.rows):
            logp = torch.log_softmax(logits[s:s + ctx.rows].float(), -1)
            grad_logp = torch.ops.aten.nll_loss_backward(grad_loss, logp, target[s:s + ctx.rows], None,
                                                         ctx.reduction, ctx.ignore_index, total_weight)
            grad[s:s + ctx.rows] = torch._log_softmax_backward_data(grad_logp, logp, -1, torch.float32)
        return grad, None, None, None, None


def chunked_causal_lm_loss(logits, labels, vocab_size, num_items_in_batch=None, ignore_index=-100,
                           shift_labels=None, **_):
    """transformers' ``ForCausalLMLoss`` with :class:`ChunkedNLL` for ``cross_entropy``."""
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:].contiguous()
    flat, target = logits.reshape(-1, vocab_size), shift_labels.reshape(-1)
    if num_items_in_batch is None:
        return ChunkedNLL.apply(flat, target, NLL_REDUCTION["mean"], ignore_index, 256)
    return ChunkedNLL.apply(flat, target, NLL_REDUCTION["sum"], ignore_index, 256) / num_items_in_batch


_CAUSAL: dict[tuple[int, int], torch.Tensor] = {}


def matmul_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **_):
    """Attention as ``softmax(q·kᵀ·scale + mask) · v``, the softmax in fp32 (a training forward only: the tiny model
    has as many K/V heads as query heads and no dropout)."""
    scores = torch.matmul(query, key.transpose(-1, -2)).float() * scaling
    if attention_mask is None:
        length, span = query.shape[-2], key.shape[-2]
        causal = _CAUSAL.setdefault((length, span), torch.ones(length, span, dtype=torch.bool).tril(span - length))
        scores = scores.masked_fill(~causal, float("-inf"))
    elif attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask, float("-inf"))
    else:
        scores = scores + attention_mask
    out = torch.matmul(torch.softmax(scores, -1).to(value.dtype), value)
    return out.transpose(1, 2).contiguous(), None


def segment_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                      position_ids=None, **kwargs):
    """Each row's samples attended to one at a time, causally; a row without restarts is one sample."""
    if position_ids is None or query.shape[-2] != key.shape[-2]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    rows = []
    for b, positions in enumerate(position_ids.expand(query.shape[0], -1)):
        starts = [*(positions == 0).nonzero().flatten().tolist(), positions.numel()]
        rows.append(torch.cat([F.scaled_dot_product_attention(
            query[b:b + 1, :, s:e], key[b:b + 1, :, s:e], value[b:b + 1, :, s:e], is_causal=True, scale=scaling)
            for s, e in itertools.pairwise(starts)], dim=2))
    return torch.cat(rows).transpose(1, 2).contiguous(), None


def batches(shape: tuple[int, int, int], vocab: int, n: int) -> list[dict[str, torch.Tensor]]:
    rows, length, sample = shape
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        ids = torch.randint(5, vocab, (rows, length), generator=gen)
        batch = {"input_ids": ids, "labels": ids.clone()}
        if sample < length:  # packed: positions restart at each sample, the first token of each predicts nothing
            restarts = [torch.arange(min(sample, length - s)) for s in range(0, length, sample)]
            batch["position_ids"] = torch.cat(restarts)[None].expand(rows, length).contiguous()
            batch["labels"][batch["position_ids"] == 0] = -100
        out.append(batch)
    return out


def side(name: str, base: torch.nn.Module):
    model = copy.deepcopy(base).train()
    if name == "chunked_loss":
        model.loss_function = chunked_causal_lm_loss
    if name in ("matmul_attention", "segment_attention"):
        model.set_attn_implementation(f"forge_bench_{name}")
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def step(model, opt, batch, bf16: bool) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(**batch, use_cache=False).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


def grouped(prof) -> dict[str, float]:
    ops = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ops)
    shares = dict.fromkeys([g for g, _ in GROUPS] + ["other"], 0.0)
    for e in ops:
        group = next((g for g, keys in GROUPS if any(k in e.key for k in keys)), "other")
        shares[group] += e.self_cpu_time_total / total
    return {g: round(s, 3) for g, s in shares.items()}


def plot(report: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["shapes"])
    labels = [f"{n}\n{report['shapes'][n]['median_ms_per_step']['eager']:.0f} ms a step" for n in names]
    groups = list(next(iter(report["shapes"].values()))["eager_cpu_shares"])
    fig, ax = plt.subplots(figsize=(8, 3))
    left = [0.0] * len(names)
    for g in groups:
        widths = [report["shapes"][n]["eager_cpu_shares"][g] for n in names]
        ax.barh(labels, widths, left=left, label=g)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlabel("share of the eager step's CPU time")
    ax.set_xlim(0, 1)
    ax.set_title(f"tiny model, one training step ({report['machine']['precision']}, "
                 f"{report['machine']['cpus']} CPUs)", fontsize=9)
    ax.legend(fontsize=7, ncol=len(groups), loc="upper center", bbox_to_anchor=(0.5, -0.3))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="steps a side in each round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "train_step.json"))
    args = parser.parse_args()
    use_fast_decoding()
    keep_freed_memory()  # as every training stage runs (forge/training/checkpoints.py apply_runtime)
    AttentionInterface.register("forge_bench_matmul_attention", matmul_attention)
    AttentionInterface.register("forge_bench_segment_attention", segment_attention)
    bf16 = bf16_pays_off()
    base = tiny_model()
    report = {"benchmark": "train_step",
              "command": f"python bench/train_step.py --steps {args.steps} --rounds {args.rounds}",
              "machine": {**machine(os.getloadavg()), "torch_threads": torch.get_num_threads(),
                          "torch": torch.__version__, "precision": "bf16 autocast" if bf16 else "fp32"},
              "shapes": {}}
    for shape_name, shape in SHAPES.items():
        data = batches(shape, base.config.vocab_size, args.steps)
        sides = {name: side(name, base) for name in SIDES}
        losses = {name: [step(*sides[name], b, bf16) for b in data] for name in sides}  # also the warm-up
        eager_model = sides["eager"][0]
        same = {name: all(torch.equal(a, b) for a, b in zip(losses["eager"], losses[name]))
                and all(torch.equal(p, q) for p, q in zip(eager_model.parameters(), sides[name][0].parameters()))
                for name in sides if name != "eager"}
        ms: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, (model, opt) in sides.items():
                start = time.perf_counter()
                for b in data:
                    step(model, opt, b, bf16)
                ms[name].append(round((time.perf_counter() - start) / len(data) * 1e3, 1))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for b in data:
                step(*sides["eager"], b, bf16)
        median = {name: round(statistics.median(v), 1) for name, v in ms.items()}
        report["shapes"][shape_name] = {
            "rows": shape[0], "row_length": shape[1], "sample_length": shape[2],
            "ms_per_step": ms, "median_ms_per_step": median,
            "speedup_over_eager": {n: round(median["eager"] / median[n], 3) for n in sides if n != "eager"},
            "same_bits_as_eager": same, "eager_cpu_shares": grouped(prof)}
        print(shape_name, json.dumps(report["shapes"][shape_name]["median_ms_per_step"]),
              json.dumps(report["shapes"][shape_name]["speedup_over_eager"]), "same bits:", json.dumps(same),
              flush=True)
        print("  eager step, CPU shares:", json.dumps(report["shapes"][shape_name]["eager_cpu_shares"]), flush=True)
    report["machine"]["load_after"] = os.getloadavg()
    with open(args.out, "w") as f:
        f.write(json.dumps(report, indent=2) + "\n")
    png = args.out.removesuffix(".json") + ".png"
    plot(report, png)
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
