"""Tokenizer: byte-level round trips, single-token specials, per-turn loss masks, offline reload (the chat format
itself is tested in tests/test_chat.py)."""

import pytest
from transformers import AutoTokenizer

from forge.chat import SPECIAL_TOKENS, count_chat_tokens, render_chat, sample_to_hf
from forge.training.tokenizer import encode_chat


@pytest.mark.parametrize(
    "text",
    ["Teutberga( died 11 November 875) was a queen.", "  two  spaces\n\nnew\tlines ", "Ünïcödé — 東京 🙂", ""],
)
def test_byte_level_round_trip(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text


def test_special_tokens_are_single_tokens(tokenizer):
    for token in SPECIAL_TOKENS:
        ids = tokenizer(f"a{token}b", add_special_tokens=False)["input_ids"]
        token_id = tokenizer.convert_tokens_to_ids(token)
        assert tokenizer(token, add_special_tokens=False)["input_ids"] == [token_id]
        assert token_id in ids, token
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    # Control tokens vanish on decode, format tokens stay (they are what the model says).
    ids = tokenizer("<think>x</think><|im_end|>", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<think>x</think>"


def masked_text(tokenizer, enc) -> str:
    return tokenizer.decode([i for i, m in zip(enc["input_ids"], enc["completion_mask"], strict=True) if m])


def test_completion_mask_covers_only_trained_assistant_turns(tokenizer, tool_sample):
    enc = encode_chat(tokenizer, tool_sample(first_turn_loss=False), max_length=10_000)
    assert len(enc["input_ids"]) == len(enc["completion_mask"])
    assert masked_text(tokenizer, enc) == "Teutberga.<|im_end|>"

    enc = encode_chat(tokenizer, tool_sample(first_turn_loss=True), max_length=10_000)
    text, spans = render_chat(tokenizer, *sample_to_hf(tool_sample()))
    first = text[spans[0][0] : spans[0][1]]
    assert masked_text(tokenizer, enc) == first + "Teutberga.<|im_end|>"
    # The trained tokens form exactly two runs (one per assistant turn); headers and tool output are context.
    runs = sum(1 for a, b in zip([0] + enc["completion_mask"], enc["completion_mask"], strict=False) if b and not a)
    assert runs == 2


def test_truncation_and_token_count(tokenizer, tool_sample):
    sample = tool_sample(first_turn_loss=True)
    full = encode_chat(tokenizer, sample, max_length=10_000)
    assert count_chat_tokens(tokenizer, sample) == len(full["input_ids"])
    cut = encode_chat(tokenizer, sample, max_length=40)
    assert cut["input_ids"] == full["input_ids"][:40] and cut["completion_mask"] == full["completion_mask"][:40]


def test_save_and_reload_offline(tokenizer, tool_sample, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    sample = tool_sample(first_turn_loss=True)
    assert loaded.chat_template == tokenizer.chat_template
    assert encode_chat(loaded, sample, 10_000) == encode_chat(tokenizer, sample, 10_000)
    assert loaded.eos_token == "<|im_end|>" and loaded.pad_token_id == tokenizer.pad_token_id


def test_split_digits_spells_every_number_one_token_a_digit():
    """BPE on numbers merges frequent digit pairs ("1999" as "19 99"), so one value is spelled differently from the
    next; ``split_digits`` makes every digit its own token, and text still round-trips."""
    from forge.config import TokenizerConfig
    from forge.training.tokenizer import train_tokenizer

    texts = [f"In {y} there were {n} ships, {y % 100} of them in port {n * 7}." for y in range(1900, 2000)
             for n in range(10, 40)]
    merged = train_tokenizer(texts, TokenizerConfig(vocab_size=600, max_training_chars=200_000))
    split = train_tokenizer(texts, TokenizerConfig(vocab_size=600, max_training_chars=200_000, split_digits=True))
    text = "In 1999 there were 3901 ships."
    assert any(len(t.lstrip("Ġ")) > 1 and t.lstrip("Ġ").isdigit() for t in merged.tokenize(text))
    digits = [t.lstrip("Ġ") for t in split.tokenize(text) if any(c.isdigit() for c in t)]
    assert digits == list("19993901")
    assert split.decode(split(text, add_special_tokens=False)["input_ids"]) == text
