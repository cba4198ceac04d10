"""Attention for one new token on a CPU: what every sampled token costs, written as two small matrix products.

Sampling a token attends one query to the whole KV cache. PyTorch's ``scaled_dot_product_attention`` takes its
flash kernel on a CPU for that too, and for a single query in bf16 that kernel is slow: on the tiny model's shapes
(4 heads of 64, a cache of ~200 positions, 16–128 rows) it took 2.4–2.8x the time of the two ``matmul`` calls
below (AMD EPYC 25/17, docs/scale.md "Attention for one new token"), and sampling is half of an RL stage's time.
In fp32 the kernel is about as fast as they are (whole samplings 0.95–1.02x), so there nothing changes. So on a
CPU a decode step in bf16 (bf16 weights, or under bf16 autocast; one query per row, no dropout) takes this path,
and everything else (fp32, the prompt's prefill, every training forward, any GPU) takes transformers' own SDPA
function unchanged:

    scores = q · Kᵀ · scale   in fp32 (q and K upcast: the same precision as the flash kernel keeps its scores)
    probs  = softmax(scores + mask) in fp32, cast to V's dtype
    out    = probs · V

Grouped-query attention needs no repeated K/V: the query heads that share a K/V head are one matrix's rows.

    from forge.attention import use_decode_attention
    use_decode_attention()   # once per process; TransformersBackend and every training stage call it
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward


def decode_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query (batch, heads, q, dim), key and value (batch, kv heads,
    kv, dim), the mask as transformers builds it for SDPA (bool, True where a position is seen, or additive, or
    None); returns (batch, q, heads, dim)."""
    if not _cpu_decode_step_in_bf16(query, value, dropout, kwargs):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    scale = scaling if scaling is not None else dim**-0.5
    with torch.autocast("cpu", enabled=False):  # the dtypes below are chosen, not autocast's
        q = query.float().view(batch, kv_heads, heads // kv_heads, dim)  # rows sharing a K/V head together
        scores = torch.matmul(q, key.transpose(-1, -2).float()) * scale  # (batch, kv heads, group, kv)
        if attention_mask is not None:
            if attention_mask.dtype == torch.bool:
                scores = scores.masked_fill(~attention_mask, float("-inf"))  # (batch, 1, 1, kv) broadcasts
            else:
                scores = scores + attention_mask
        probs = torch.softmax(scores, dim=-1).to(value.dtype)
        out = torch.matmul(probs, value)  # (batch, kv heads, group, dim)
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


def _cpu_decode_step_in_bf16(query: torch.Tensor, value: torch.Tensor, dropout: float, kwargs: dict) -> bool:
    """One query per row on a CPU, in bf16 (bf16 weights, or autocast: RoPE leaves q and k fp32 there, v bf16; fp32
    keeps SDPA's kernel, as fast there), with nothing SDPA's function handles that this path does not (dropout,
    returned weights, a position bias, a paged cache)."""
    if query.shape[2] != 1 or query.device.type != "cpu":
        return False
    if dropout or kwargs.get("output_attentions") or any(kwargs.get(k) is not None for k in ("position_bias", "cache")):
        return False
    return query.dtype != torch.float32 or value.dtype != torch.float32 or torch.is_autocast_enabled("cpu")


def use_decode_attention() -> None:
    """Make models whose attention is ``sdpa`` (transformers' default) take :func:`decode_attention`, which hands
    every call but a CPU decode step back to the SDPA function. Idempotent; process-wide."""
    AttentionInterface.register("sdpa", decode_attention)
