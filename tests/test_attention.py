"""The CPU decode attention (forge/attention.py): a sampled token's attention in bf16 (bf16 tensors,
or fp32 ones under bf16 autocast) equals exact attention within bf16 rounding, as SDPA's does, with padding masks
and grouped K/V heads; a model decoding through its KV cache under autocast gives the logits SDPA's decoding gives;
every other call (fp32, a prefill) is SDPA's own, bit for bit."""

import pytest
import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from forge.attention import decode_attention, use_decode_attention
from forge.config import BaseModelConfig
from forge.training.base_model import build_model


class Heads(torch.nn.Module):
    """What the attention functions read off a layer: its K/V grouping."""

    def __init__(self, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.num_key_value_groups = heads // kv_heads
        self.is_causal = True


def qkv(batch, heads, kv_heads, q_len, kv_len, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, 32, generator=g).to(dtype)
    k = torch.randn(batch, kv_heads, kv_len, 32, generator=g).to(dtype)
    v = torch.randn(batch, kv_heads, kv_len, 32, generator=g).to(dtype)
    return q, k, v


def padding_mask(batch: int, kv_len: int) -> torch.Tensor:
    """(batch, 1, 1, kv) True where seen: row r's first 3·r positions are left padding."""
    seen = torch.ones(batch, 1, 1, kv_len, dtype=torch.bool)
    for row in range(batch):
        seen[row, ..., : 3 * row] = False
    return seen


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (6, 1)])
@pytest.mark.parametrize("mask", ["bool", "additive", None])
def test_one_query_in_bf16_is_exact_attention_within_rounding(heads, kv_heads, mask):
    q, k, v = qkv(5, heads, kv_heads, 1, 40, torch.bfloat16)
    seen = padding_mask(5, 40)
    additive = torch.zeros(seen.shape).masked_fill(~seen, float("-inf"))
    attention_mask = {"bool": seen, "additive": additive.to(torch.bfloat16), None: None}[mask]
    module = Heads(heads, kv_heads)
    ours, _ = decode_attention(module, q, k, v, attention_mask, scaling=0.2)
    theirs, _ = sdpa_attention_forward(module, q, k, v, attention_mask, scaling=0.2)
    exact, _ = sdpa_attention_forward(module, q.double(), k.double(), v.double(),
                                      None if mask is None else additive.double(), scaling=0.2)
    assert ours.shape == theirs.shape == (5, 1, heads, 32) and ours.dtype == torch.bfloat16
    assert (ours.double() - exact).abs().max() < 1e-2
    assert (ours.double() - exact).abs().max() <= 2 * (theirs.double() - exact).abs().max() + 4e-3
    # The mask is applied: the padded rows attend to fewer positions than the unmasked call's.
    if mask:
        unmasked, _ = decode_attention(module, q, k, v, None, scaling=0.2)
        assert not torch.allclose(ours[1:].float(), unmasked[1:].float(), atol=1e-2)


def test_under_bf16_autocast_keeps_fp32_scores():
    q, k, v = qkv(4, 4, 2, 1, 64, torch.bfloat16, seed=1)
    module = Heads(4, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, _ = decode_attention(module, q, k, v, padding_mask(4, 64))
    exact, _ = sdpa_attention_forward(module, q.double(), k.double(), v.double(), padding_mask(4, 64))
    assert ours.dtype == torch.bfloat16
    assert (ours.double() - exact).abs().max() < 1e-2


@pytest.mark.parametrize("q_len,dtype", [(7, torch.float32), (7, torch.bfloat16), (1, torch.float32)])
def test_other_calls_are_sdpas_own(q_len, dtype):
    q, k, v = qkv(3, 4, 4, q_len, 7, dtype, seed=2)
    module = Heads(4, 4)
    ours, _ = decode_attention(module, q, k, v, None)
    theirs, _ = sdpa_attention_forward(module, q, k, v, None)
    assert torch.equal(ours, theirs)  # a prefill or training forward, or an fp32 decode step: SDPA's bits


def test_cached_decoding_under_autocast_gives_sdpas_logits(tokenizer):
    use_decode_attention()
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is decode_attention
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128, seed=5)
    model = build_model(cfg, tokenizer).eval()
    assert model.config._attn_implementation == "sdpa"
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, model.config.vocab_size, (3, 12), generator=g)
    attention = torch.ones_like(ids)
    attention[1, :4] = 0  # left padding, as the backends batch prompts
    attention[2, :7] = 0
    logits = {}
    try:
        for name, fn in (("sdpa", sdpa_attention_forward), ("decode", decode_attention)):
            AttentionInterface.register("sdpa", fn)
            torch.manual_seed(0)
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                out = model.generate(input_ids=ids, attention_mask=attention, max_new_tokens=10, min_new_tokens=10,
                                     do_sample=False, output_logits=True, return_dict_in_generate=True,
                                     pad_token_id=0, eos_token_id=None)
            logits[name] = torch.stack(out.logits[1:], dim=1)  # steps 2..10: one query each over the cache
    finally:
        use_decode_attention()
    assert logits["decode"].shape == (3, 9, model.config.vocab_size)
    difference = (logits["decode"] - logits["sdpa"]).abs().max()
    assert 0 < difference < 0.05 * logits["sdpa"].abs().max(), difference  # computed apart, alike within rounding
