"""The CPU decode attention (forge/attention.py): a sampled token's attention in bf16 (bf16 tensors,
or fp32 ones under bf16 autocast) equals exact attention within bf16 rounding, as SDPA's does, with padding masks
and grouped K/V heads; a model decoding through its KV cache under autocast gives the logits SDPA's decoding gives;
every other call (fp32, a prefill) is SDPA's own, bit for bit. The KV cache that grows in place samples what
transformers' DynamicCache samples, bit for bit, and generate builds it once fast decoding is on. A prompt repeated
in a batch is prefilled once, and the batch samples what transformers' prefill of every row samples. A token's draw
is torch.multinomial's, bit for bit, and leaves the generator where torch's leaves it."""

import pytest
import torch
from transformers import AttentionInterface
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.generation import GenerationMixin
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import forge.attention
from forge.attention import (
    HEADROOM,
    GrowingCache,
    GrowingLayer,
    _distinct_rows,
    _torch_multinomial,
    _transformers_prefill,
    decode_attention,
    multinomial,
    prefill_each_prompt_once,
    use_fast_decoding,
)
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
    use_fast_decoding()
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
        use_fast_decoding()
    assert logits["decode"].shape == (3, 9, model.config.vocab_size)
    difference = (logits["decode"] - logits["sdpa"]).abs().max()
    assert 0 < difference < 0.05 * logits["sdpa"].abs().max(), difference  # computed apart, alike within rounding


def _generate(model, ids, attention, cache, **sampling):
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=attention, past_key_values=cache, max_new_tokens=90,
                             min_new_tokens=90, output_logits=True, return_dict_in_generate=True, pad_token_id=0,
                             eos_token_id=None, **sampling)
    return out.sequences, torch.stack(out.logits, dim=1)


@pytest.mark.parametrize("autocast", [False, True])
def test_a_growing_cache_samples_what_a_dynamic_one_does_bit_for_bit(tokenizer, autocast):
    """Left-padded rows, 90 new tokens past a 12-token prompt: the room (12 + 64) grows once on the way."""
    use_fast_decoding()
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128, seed=5)
    model = build_model(cfg, tokenizer).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(10, model.config.vocab_size, (3, 12), generator=g)
    attention = torch.ones_like(ids)
    attention[1, :5] = 0
    caches = {}
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        for sampling in ({"do_sample": False}, {"do_sample": True, "temperature": 1.3}):
            results = []
            for cache in (DynamicCache(config=model.config), GrowingCache(config=model.config)):
                results.append(_generate(model, ids, attention, cache, **sampling))
                caches[type(cache)] = cache
            (dynamic_ids, dynamic_logits), (growing_ids, growing_logits) = results
            assert torch.equal(growing_ids, dynamic_ids) and torch.equal(growing_logits, dynamic_logits)
    layer = caches[GrowingCache].layers[0]
    assert isinstance(layer, GrowingLayer) and layer.keys.shape[-2] == 12 + 90 - 1  # the last token is never fed
    assert layer._key_room.shape[-2] > 12 + HEADROOM  # it grew
    assert torch.equal(layer.keys, caches[DynamicCache].layers[0].keys)


def test_generate_builds_a_growing_cache_once_fast_decoding_is_on(tokenizer):
    use_fast_decoding()
    model = build_model(BaseModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=2,
                                        intermediate_size=64), tokenizer).eval()
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor([[11, 12, 13]]), max_new_tokens=3, do_sample=False,
                             return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    assert type(out.past_key_values) is GrowingCache
    assert all(type(layer) is GrowingLayer for layer in out.past_key_values.layers)


def test_a_step_writes_in_place_and_a_crop_or_reorder_is_taken_over():
    """Each one-position update lands in the same room (no copy of the cache); a crop, then a batch reorder (which
    replace the views), leave the layer caching exactly what DynamicLayer caches after the same calls."""
    g = torch.Generator().manual_seed(0)
    steps = [torch.randn(3, 2, n, 8, generator=g) for n in (10, 1, 1, 1, 4, 1)]
    growing, dynamic = GrowingLayer(), DynamicLayer()
    rooms = set()
    for i, states in enumerate(steps):
        if i == 4:
            for layer in (growing, dynamic):
                layer.crop(-2)
        if i == 5:
            for layer in (growing, dynamic):
                layer.batch_select_indices(torch.tensor([2, 0]))
            states = states[:2]
        keys, values = growing.update(states, -states)
        expected_keys, expected_values = dynamic.update(states, -states)
        assert torch.equal(keys, expected_keys) and torch.equal(values, expected_values)
        assert growing.get_seq_length() == dynamic.get_seq_length()
        if 1 <= i <= 3:
            rooms.add(keys.data_ptr())
    assert len(rooms) == 1  # steps 1-3 wrote into the room the prefill made
    assert growing.get_seq_length() == 10 + 3 - 2 + 4 + 1


def test_distinct_rows_are_found_in_the_order_they_first_appear():
    ids = torch.tensor([[0, 5, 6], [7, 8, 9], [0, 5, 6], [0, 0, 6], [7, 8, 9]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [0, 1, 1], [1, 1, 1]])
    firsts, rows = _distinct_rows(ids, mask)
    assert firsts.tolist() == [0, 1, 3] and rows.tolist() == [0, 1, 0, 2, 1]
    assert _distinct_rows(ids[:2], mask[:2]) is None
    # The same tokens seen differently (a pad id that is also a real token) are different prompts.
    assert _distinct_rows(torch.tensor([[0, 5], [0, 5]]), torch.tensor([[0, 1], [1, 1]])) is None


@pytest.mark.parametrize("autocast", [False, True])
def test_a_prompt_repeated_in_the_batch_is_prefilled_once_and_samples_as_before(tokenizer, autocast):
    """A GRPO-shaped batch (two prompts, four rows each, left-padded, one row alone): the prefill forward sees three
    rows, and the tokens sampled (greedy and at temperature) and every step's logits are transformers' own."""
    use_fast_decoding()
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128, seed=5)
    model = build_model(cfg, tokenizer).eval()
    g = torch.Generator().manual_seed(3)
    prompts = torch.randint(10, model.config.vocab_size, (3, 20), generator=g)
    ids = prompts[[0, 0, 0, 0, 1, 1, 1, 1, 2]]
    attention = torch.ones_like(ids)
    attention[4:8, :6] = 0  # the second prompt is shorter: left padding
    prefill_rows = []
    hook = model.register_forward_pre_hook(lambda _, args, kwargs: prefill_rows.append(kwargs["input_ids"].shape),
                                           with_kwargs=True)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            for sampling in ({"do_sample": False}, {"do_sample": True, "temperature": 1.3}):
                results = []
                for prefill in (_transformers_prefill, prefill_each_prompt_once):
                    GenerationMixin._prefill = prefill
                    prefill_rows.clear()
                    results.append(_generate(model, ids, attention, None, **sampling))
                    assert prefill_rows[0] == ((9, 20) if prefill is _transformers_prefill else (3, 20))
                    assert all(shape == (9, 1) for shape in prefill_rows[1:])  # then every row decodes
                (theirs_ids, theirs_logits), (ours_ids, ours_logits) = results
                assert torch.equal(ours_ids, theirs_ids)
                # The distinct rows are a smaller matrix product: the same numbers to rounding, not to the bit.
                assert torch.allclose(ours_logits, theirs_logits, atol=1e-5 if not autocast else 2e-2)
                if sampling["do_sample"]:  # a group's rows share a prompt, not their samples
                    assert len({tuple(row) for row in ours_ids[:4, 20:].tolist()}) > 1
    finally:
        hook.remove()
        use_fast_decoding()
    assert GenerationMixin._prefill is prefill_each_prompt_once


def probability_rows(seed: int) -> torch.Tensor:
    """Rows as sampling makes them: a softmax at a random temperature over a random vocabulary size, every third
    tensor with half of each row filtered to 0 (top-p, top-k)."""
    g = torch.Generator().manual_seed(seed)
    rows, vocab = int(torch.randint(1, 70, (1,), generator=g)), int(torch.randint(2, 5000, (1,), generator=g))
    probs = torch.softmax(torch.randn(rows, vocab, generator=g) * float(torch.rand(1, generator=g)) * 10, -1)
    if seed % 3 == 0:
        probs[:, : vocab // 2] = 0
    return probs


def draws_alike(probs: torch.Tensor, seed: int, generator: bool = False) -> None:
    """Forge's draw equals torch's from the same generator state, and leaves the generator in the same state."""
    results = []
    for draw in (_torch_multinomial, multinomial):
        g = torch.Generator().manual_seed(seed) if generator else torch.manual_seed(seed)
        results.append((draw(probs, 1, generator=g if generator else None), torch.rand(3, generator=g)))
    (theirs, after_theirs), (ours, after_ours) = results
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    assert torch.equal(ours, theirs) and torch.equal(after_ours, after_theirs)


def test_a_token_is_drawn_as_torch_draws_it():
    """~35 rows a seed of 2 to 5,000 entries, 120 seeds, 1-D and 2-D, the default generator and one of the caller's."""
    for seed in range(120):
        probs = probability_rows(seed)
        draws_alike(probs, seed, generator=seed % 2 == 1)
        draws_alike(probs[0], seed)


def test_rows_too_close_to_call_are_drawn_with_the_c_librarys_logarithm(monkeypatch):
    """With every row counted as close (CLOSE 1), each is drawn again from libm's variates: still torch's draw."""
    monkeypatch.setattr(forge.attention, "CLOSE", 1.0)
    for seed in range(6):
        draws_alike(probability_rows(seed)[:4], seed)


def test_every_other_call_is_torchs_own():
    probs = probability_rows(1)[:5]
    for args in ((3,), (3, True), (1, True)):
        torch.manual_seed(0)
        theirs = _torch_multinomial(probs, *args)
        torch.manual_seed(0)
        assert torch.equal(multinomial(probs, *args), theirs)
    for dtype in (torch.float64, torch.bfloat16):
        torch.manual_seed(0)
        theirs = _torch_multinomial(probs.to(dtype), 1)
        torch.manual_seed(0)
        assert torch.equal(multinomial(probs.to(dtype), 1), theirs)
    columns = probability_rows(4)[:6].t().contiguous().t()  # the rows' entries apart in memory: torch fills q in
    torch.manual_seed(0)                                        # memory order
    theirs_columns = _torch_multinomial(columns, 1)
    torch.manual_seed(0)
    assert torch.equal(multinomial(columns, 1), theirs_columns)
    out = torch.empty(5, 1, dtype=torch.long)
    torch.manual_seed(0)
    assert multinomial(probs, 1, out=out) is out and torch.equal(out, theirs)
    for bad in (torch.tensor([[0.5, -0.1]]), torch.tensor([[0.5, float("nan")]]), torch.tensor([[0.5, float("inf")]]),
                torch.tensor([[0.5, 0.5], [0.0, 0.0]])):
        with pytest.raises(RuntimeError) as ours:
            multinomial(bad, 1)
        with pytest.raises(RuntimeError) as theirs:
            _torch_multinomial(bad, 1)
        assert str(ours.value) == str(theirs.value)


def test_generate_samples_what_torchs_draw_samples(tokenizer):
    """Sampling through generate with fast decoding on (torch.multinomial is Forge's) gives the tokens that torch's
    own draw gives, at temperature and with top-p."""
    use_fast_decoding()
    assert torch.multinomial is multinomial
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128, seed=5)
    model = build_model(cfg, tokenizer).eval()
    ids = torch.randint(10, model.config.vocab_size, (6, 12), generator=torch.Generator().manual_seed(2))
    attention = torch.ones_like(ids)
    attention[2, :5] = 0
    try:
        for sampling in ({"temperature": 1.3}, {"temperature": 0.7, "top_p": 0.9}):
            results = []
            for draw in (_torch_multinomial, multinomial):
                torch.multinomial = draw
                results.append(_generate(model, ids, attention, None, do_sample=True, **sampling)[0])
            assert torch.equal(results[0], results[1])
            assert len({tuple(row) for row in results[1][:, 12:].tolist()}) > 1
    finally:
        use_fast_decoding()
