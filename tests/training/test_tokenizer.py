"""Tokenizer: byte-level round trips, single-token specials, the exact chat format, per-turn loss masks."""

import pytest
from transformers import AutoTokenizer

from forge.data.schemas import ChatSample, Message, ToolCall, ToolFunction, ToolSpec
from forge.training.tokenizer import (
    SPECIAL_TOKENS,
    count_chat_tokens,
    encode_chat,
    parse_tool_calls,
    render_chat,
    to_hf_messages,
)

SEARCH = ToolSpec(
    function=ToolFunction(
        name="search",
        description="Search the wiki.",
        parameters={"type": "object", "properties": {"query": {"type": "string"}}},
    )
)
VISIT = ToolSpec(function=ToolFunction(name="visit", description="Open a page."))


def tool_sample(first_turn_loss: bool = False) -> ChatSample:
    return ChatSample.build(
        domain="deep_search",
        source="test",
        tools=[SEARCH, VISIT],
        messages=[
            Message(role="system", content="Be brief."),
            Message(role="user", content="Who married Lothair II?"),
            Message(
                role="assistant",
                reasoning="I should search.",
                content="Let me look.",
                tool_calls=[
                    ToolCall(name="search", arguments={"query": "Lothair II wife"}),
                    ToolCall(name="visit", arguments={"page": "Teutberga"}),
                ],
                loss=first_turn_loss,
            ),
            Message(role="tool", name="search", content="Teutberga was queen of Lotharingia."),
            Message(role="tool", name="visit", content="Teutberga (died 875)."),
            Message(role="assistant", content="Teutberga."),
        ],
    )


EXPECTED = (
    "<|im_start|>system\nBe brief.\n\n# Tools\n<tools>\n"
    '{"type": "function", "function": {"name": "search", "description": "Search the wiki.", '
    '"parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}\n'
    '{"type": "function", "function": {"name": "visit", "description": "Open a page.", '
    '"parameters": {"type": "object", "properties": {}}}}\n'
    "</tools><|im_end|>\n"
    "<|im_start|>user\nWho married Lothair II?<|im_end|>\n"
    "<|im_start|>assistant\n<think>\nI should search.\n</think>\n\nLet me look.\n"
    '<tool_call>\n{"name": "search", "arguments": {"query": "Lothair II wife"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "visit", "arguments": {"page": "Teutberga"}}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\n<tool_response>\nTeutberga was queen of Lotharingia.\n</tool_response>\n"
    "<tool_response>\nTeutberga (died 875).\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\nTeutberga.<|im_end|>\n"
)


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


def test_chat_template_renders_documented_format(tokenizer):
    messages, tools = to_hf_messages(tool_sample())
    text, spans = render_chat(tokenizer, messages, tools)
    assert text == EXPECTED
    # Each assistant span covers what the assistant wrote, its <|im_end|> included, nothing of the header.
    assert [text[a:b] for a, b in spans][1] == "Teutberga.<|im_end|>"
    assert text[spans[0][0] :].startswith("<think>\nI should search.")
    # apply_chat_template (what TRL and the generation backends call) renders the same string.
    assert tokenizer.apply_chat_template(messages, tools=tools, tokenize=False) == EXPECTED


def test_generation_prompt_and_plain_turns(tokenizer):
    messages = [{"role": "user", "content": "Hi"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    # Tools without a system message still get a system turn listing them.
    rendered = tokenizer.apply_chat_template(messages, tools=[VISIT.model_dump()], tokenize=False)
    assert rendered.startswith("<|im_start|>system\n# Tools\n<tools>\n{")
    assert rendered.endswith("</tools><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n")


def masked_text(tokenizer, enc) -> str:
    return tokenizer.decode([i for i, m in zip(enc["input_ids"], enc["completion_mask"], strict=True) if m])


def test_completion_mask_covers_only_trained_assistant_turns(tokenizer):
    enc = encode_chat(tokenizer, tool_sample(first_turn_loss=False), max_length=10_000)
    assert len(enc["input_ids"]) == len(enc["completion_mask"])
    assert masked_text(tokenizer, enc) == "Teutberga.<|im_end|>"

    enc = encode_chat(tokenizer, tool_sample(first_turn_loss=True), max_length=10_000)
    first = EXPECTED.split("<|im_start|>assistant\n")[1].split("\n<|im_start|>user")[0]
    assert masked_text(tokenizer, enc) == first + "Teutberga.<|im_end|>"
    # The trained tokens form exactly two runs (one per assistant turn); headers and tool output are context.
    runs = sum(1 for a, b in zip([0] + enc["completion_mask"], enc["completion_mask"], strict=False) if b and not a)
    assert runs == 2


def test_truncation_and_token_count(tokenizer):
    sample = tool_sample(first_turn_loss=True)
    full = encode_chat(tokenizer, sample, max_length=10_000)
    assert count_chat_tokens(tokenizer, sample) == len(full["input_ids"])
    cut = encode_chat(tokenizer, sample, max_length=40)
    assert cut["input_ids"] == full["input_ids"][:40] and cut["completion_mask"] == full["completion_mask"][:40]


def test_parse_tool_calls_inverts_rendering(tokenizer):
    sample = tool_sample()
    messages, tools = to_hf_messages(sample)
    text, spans = render_chat(tokenizer, messages, tools)
    first_turn = text[spans[0][0] : spans[0][1]]
    assert parse_tool_calls(first_turn) == sample.messages[2].tool_calls
    assert parse_tool_calls(text[spans[1][0] : spans[1][1]]) == []
    # Malformed blocks are skipped, valid ones kept; string-encoded arguments are accepted.
    generated = (
        '<tool_call>\n{"name": "search", "arguments": {"query": \n</tool_call>'
        '<tool_call>\n{"arguments": {}}\n</tool_call>'
        '<tool_call>\n{"name": "visit", "arguments": "{\\"page\\": \\"X\\"}"}\n</tool_call>'
    )
    assert parse_tool_calls(generated) == [ToolCall(name="visit", arguments={"page": "X"})]


def test_save_and_reload_offline(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    sample = tool_sample(first_turn_loss=True)
    assert loaded.chat_template == tokenizer.chat_template
    assert encode_chat(loaded, sample, 10_000) == encode_chat(tokenizer, sample, 10_000)
    assert loaded.eos_token == "<|im_end|>" and loaded.pad_token_id == tokenizer.pad_token_id
