"""What every sampled token costs on a CPU, made smaller: attention for one new token, a KV cache that grows in
place, one prefill per distinct prompt, and the token's draw.

Attention. Sampling a token attends one query to the whole KV cache. PyTorch's ``scaled_dot_product_attention``
takes its flash kernel on a CPU for that too, and for a single query in bf16 that kernel is slow: on the tiny
model's shapes (4 heads of 64, a cache of ~200 positions, 16–128 rows) it took 2.4–2.8x the time of the two
``matmul`` calls below (AMD EPYC 25/17, docs/scale.md "Attention for one new token"), and sampling is half of an RL
stage's time. In fp32 the kernel is about as fast as they are (whole samplings 0.95–1.02x), so there nothing
changes. So on a CPU a decode step in bf16 (bf16 weights, or under bf16 autocast; one query per row, no dropout)
takes this path, and everything else (fp32, the prompt's prefill, every training forward, any GPU) takes
transformers' own SDPA function unchanged:

    scores = q · Kᵀ · scale   in fp32 (q and K upcast: the same precision as the flash kernel keeps its scores)
    probs  = softmax(scores + mask) in fp32, cast to V's dtype
    out    = probs · V

Grouped-query attention needs no repeated K/V: the query heads that share a K/V head are one matrix's rows.

The cache. transformers' ``DynamicCache`` appends a step's keys and values with ``torch.cat``, which copies the
whole cache of every layer for every token: at the agentic stage's ~900-token histories that copy is as much memory
traffic as the attention reading it. :class:`GrowingCache` writes into room kept ahead (docs/scale.md, "A KV cache
that grows in place"); attention sees the same numbers.

The prefill. A GRPO batch repeats each prompt ``num_generations`` times; :func:`prefill_each_prompt_once` runs the
prompt's forward once per distinct prompt and copies the cache out (docs/scale.md, "One prefill per distinct
prompt").

The draw. ``generate`` samples each row's token with ``torch.multinomial(probs, 1)``, which on a CPU draws one
exponential variate per vocabulary entry (the token is the argmax of ``probs / q``) one element at a time, a
logarithm each: a quarter of a sampled token's time on the tiny model. :func:`multinomial` draws the same 64-bit
numbers from the same generator and takes their logarithms as one vectorized operation (docs/scale.md, "The
token's draw"): the same tokens to the bit, and the generator left where torch's leaves it.

    from forge.attention import use_fast_decoding
    use_fast_decoding()   # once per process; TransformersBackend and every training stage call it
"""

from __future__ import annotations

import math

import torch
from transformers import AttentionInterface
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.generation import GenerationConfig, GenerationMixin
from transformers.generation import utils as generation_utils
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


HEADROOM = 64  # positions a layer of the KV cache keeps free at least when it makes room


class GrowingLayer(DynamicLayer):
    """A layer of the KV cache that writes each new position into room it keeps ahead, where transformers'
    ``DynamicLayer`` concatenates: that copies the layer's whole cache (keys and values, every row) for every sampled
    token, so the copying grows with the context. Here the prompt's prefill makes room for half as many positions
    again (at least :data:`HEADROOM`), a step writes one position, and when the room runs out it grows by half again
    (one copy). ``keys`` and ``values`` stay what ``DynamicLayer`` holds, the cached positions and no more (views of
    the room), so attention reads the same numbers and the layer's other methods (crop, batch reorders) work on them
    unchanged; what they put in the views' place is taken over at the next update."""

    _key_room: torch.Tensor | None = None
    _value_room: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        end = length + key_states.shape[-2]
        if not self._holds(key_states, value_states, end):
            self._make_room(key_states, value_states, length, end)
        key_room, value_room = self._key_room, self._value_room
        assert key_room is not None and value_room is not None
        key_room[:, :, length:end].copy_(key_states)
        value_room[:, :, length:end].copy_(value_states)
        self.keys, self.values = key_room[:, :, :end], value_room[:, :, :end]
        return self.keys, self.values

    def _holds(self, key_states: torch.Tensor, value_states: torch.Tensor, end: int) -> bool:
        """The room has ``end`` positions for these rows, takes these dtypes as they are or wider (as a
        concatenation would promote them), and the cached keys and values are still its views (a batch reorder
        replaces them; a crop keeps them, shorter)."""
        key_room, value_room = self._key_room, self._value_room
        if key_room is None or value_room is None or end > key_room.shape[-2]:
            return False
        return all(cached.data_ptr() == room.data_ptr() and cached.shape[:2] == new.shape[:2]
                   and room.shape[-1] == new.shape[-1] and torch.promote_types(room.dtype, new.dtype) == room.dtype
                   for cached, room, new in ((self.keys, key_room, key_states), (self.values, value_room, value_states)))

    def _make_room(self, key_states: torch.Tensor, value_states: torch.Tensor, length: int, end: int) -> None:
        """New room for ``end`` positions and half as many again (at least HEADROOM), holding the ``length`` cached,
        in the dtype ``DynamicLayer``'s concatenation gives: the wider of the cached and the new, where an empty cache
        has the first keys' dtype (under bf16 autocast RoPE leaves the keys fp32, so the bf16 values are kept fp32)."""
        capacity = end + max(end // 2, HEADROOM)
        rooms = []
        for cached, new in ((self.keys, key_states), (self.values, value_states)):
            dtype = torch.promote_types(cached.dtype, new.dtype)
            room = new.new_empty((*new.shape[:2], capacity, new.shape[-1]), dtype=dtype)
            if length:
                room[:, :, :length].copy_(cached)
            rooms.append(room)
        self._key_room, self._value_room = rooms


class GrowingCache(DynamicCache):
    """transformers' ``DynamicCache`` with :class:`GrowingLayer` for its full-attention layers (sliding-window and
    other layers as ``DynamicCache`` makes them): what ``generate`` builds once :func:`use_fast_decoding` ran."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.layers = [GrowingLayer() if type(layer) is DynamicLayer and not layer.is_initialized else layer
                       for layer in self.layers]
        if self.layer_class_to_replicate is DynamicLayer:
            self.layer_class_to_replicate = GrowingLayer


_transformers_prefill = GenerationMixin._prefill
PER_ROW = ("attention_mask", "position_ids")  # the prefill's inputs with a row per prompt row, as generate makes them


def prefill_each_prompt_once(self: GenerationMixin, input_ids: torch.Tensor, generation_config: GenerationConfig,
                             model_kwargs: dict, is_first_iteration: bool = True):
    """``generate``'s prefill, run once per distinct prompt row: a GRPO group's rows (and an agentic group's first
    turns) are the same prompt ``num_generations`` times. The distinct rows fill the cache, which is then copied out
    to every row, as are the last position's logits; the decode steps and their sampling see the full batch as
    before. Anything this does not know to copy (an encoder, embeddings, images, a cache already holding positions,
    hidden states or attentions asked for, a chunked prefill) takes transformers' prefill unchanged. Duplicates are
    found on the tokens and the attention mask together (docs/scale.md, "One prefill per distinct prompt")."""
    cache = model_kwargs.get("past_key_values")
    copyable = (is_first_iteration and not self.config.is_encoder_decoder
                and isinstance(cache, DynamicCache) and cache.get_seq_length() == 0
                and generation_config.prefill_chunk_size is None
                and not (generation_config.output_hidden_states or generation_config.output_attentions)
                and not any(isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == input_ids.shape[0]
                            for k, v in model_kwargs.items() if k not in PER_ROW))
    distinct = _distinct_rows(input_ids, model_kwargs.get("attention_mask")) if copyable else None
    if distinct is None:
        return _transformers_prefill(self, input_ids, generation_config, model_kwargs, is_first_iteration)
    firsts, rows = distinct
    own = {k: v[firsts] if k in PER_ROW and isinstance(v, torch.Tensor) else v for k, v in model_kwargs.items()}
    outputs = _transformers_prefill(self, input_ids[firsts], generation_config, own, is_first_iteration)
    cache.batch_select_indices(rows)  # the same cache object generate holds, now one row per prompt row
    outputs.logits = outputs.logits[rows]
    return outputs


def _distinct_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor | None
                   ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(firsts, rows)``: the first row of each distinct (tokens, mask) pair and, for every row, which of them it
    is; None when every row is distinct."""
    keyed = input_ids if attention_mask is None else torch.cat([input_ids, attention_mask.to(input_ids.dtype)], -1)
    unique, rows = torch.unique(keyed, dim=0, return_inverse=True)
    if unique.shape[0] == input_ids.shape[0]:
        return None
    firsts = torch.full((unique.shape[0],), input_ids.shape[0], dtype=torch.long, device=rows.device)
    firsts.scatter_reduce_(0, rows, torch.arange(input_ids.shape[0], device=rows.device), "amin")
    order = torch.argsort(firsts)  # the distinct prompts in the order they first appear
    return firsts[order], torch.argsort(order)[rows]


_torch_multinomial = torch.multinomial
MANTISSA = (1 << 53) - 1  # the bits of a 64-bit draw that torch's uniform double in [0, 1) keeps
CLOSE = 1e-6  # rows whose best two ratios are nearer than this (relative) are drawn again with libm's logarithm


def multinomial(input: torch.Tensor, num_samples: int, replacement: bool = False, *,
                generator: torch.Generator | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.multinomial``, the same draws to the bit and the generator left in the same state, faster where
    sampling calls it: one draw a row from contiguous float32 probabilities on a CPU. Every other call is torch's own.

    For one draw torch fills ``q`` with exponential variates, ``-log(1 - u)`` in double precision for a uniform
    ``u`` made of the low 53 bits of one 64-bit draw a variate, cast to float32, and returns ``argmax(probs / q)``.
    The variates come from a loop that calls the C library's logarithm once an element; here the same 64-bit draws
    come from ``random_()`` on an int64 tensor and the logarithm is torch's vectorized one, which may differ from
    the C library's in a double's last place. That changes a float32 variate by one unit in its last place at most,
    and a ratio by less than :data:`CLOSE`, so a row whose best ratio leads every other by more than that draws the
    same token; the few rows where it does not are drawn again with ``math.log`` (the C library's) on every entry.
    Invalid probabilities (negative, infinite, NaN, a row summing to 0) go to torch's function, which raises."""
    if (num_samples != 1 or out is not None or input.device.type != "cpu" or input.dtype != torch.float32
            or input.dim() not in (1, 2) or input.numel() == 0 or not input.is_contiguous()
            or not _valid_probabilities(input)):
        return _torch_multinomial(input, num_samples, replacement, generator=generator, out=out)
    probs = input.unsqueeze(0) if input.dim() == 1 else input
    bits = torch.empty(probs.shape, dtype=torch.int64).random_(generator=generator)
    kept = (bits & MANTISSA).to(torch.float64).mul_(2.0**-53).neg_().add_(1.0)  # 1 - u, exactly
    ratios = probs / torch.log(kept).neg_().to(torch.float32)
    choice = ratios.argmax(-1, keepdim=True)
    best = ratios.gather(-1, choice).squeeze(-1)
    unsure = ((ratios >= best.unsqueeze(-1) * (1 - CLOSE)).sum(-1) > 1) | ~torch.isfinite(best) | (best <= 0)
    for row in unsure.nonzero().flatten().tolist():
        q = torch.tensor([-math.log(v) for v in kept[row].tolist()], dtype=torch.float64).to(torch.float32)
        choice[row] = (probs[row] / q).argmax(-1, keepdim=True)
    return choice.view(1) if input.dim() == 1 else choice


def _valid_probabilities(input: torch.Tensor) -> bool:
    """What torch checks before drawing: finite, none negative, no row summing to 0."""
    return bool(((input.max() < math.inf) & (input.min() >= 0)).item()) and not bool((input.sum(-1) == 0).any())


def use_fast_decoding() -> None:
    """Make sampling on this process take the four paths above: models whose attention is ``sdpa`` (transformers'
    default) take :func:`decode_attention`, which hands every call but a CPU decode step in bf16 back to the SDPA
    function; ``generate`` (ours, TRL's) builds a :class:`GrowingCache` where it would build a ``DynamicCache``
    (a subclass: every check for one holds), and prefills each distinct prompt once
    (:func:`prefill_each_prompt_once`), and ``torch.multinomial`` is :func:`multinomial`. Idempotent; process-wide."""
    AttentionInterface.register("sdpa", decode_attention)
    torch.multinomial = multinomial
    generation_utils.DynamicCache = GrowingCache
    GenerationMixin._prefill = prefill_each_prompt_once
