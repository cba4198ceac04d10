"""The chat format (forge/chat.py) on a real trained tokenizer: the exact rendering, prefix preservation on a
multi-turn tool-use conversation (text and token ids, as TRL's GRPO tool loop assembles them), the assistant-text
formatter and parser, tool-call parsing, and what a reward reads out of a TRL completion."""

from __future__ import annotations

import json

import pytest
from trl.chat_template_utils import is_chat_template_prefix_preserving

from forge.chat import (
    IM_END,
    AssistantParts,
    completion_text,
    format_assistant_text,
    messages_to_hf,
    parse_assistant_text,
    parse_tool_calls,
    render_chat,
    sample_to_hf,
)
from forge.data.schemas import Message, ToolCall, ToolFunction, ToolSpec

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

TOOLS = [
    ToolSpec(function=ToolFunction(name=name, description=f"The {name} tool."))
    for name in ("search", "visit", "python")
]


def tool_use_conversation() -> list[Message]:
    """A deep-search episode: several calls, one turn with two calls answered by two consecutive tool messages,
    reasoning throughout, a final answer, then a follow-up question and a second answer."""
    return [
        Message(role="system", content="Answer with the tools."),
        Message(role="user", content="Which queen of Lotharingia died in 875, and where was she buried?"),
        Message(role="assistant", reasoning="I will search for queens of Lotharingia first.",
                tool_calls=[ToolCall(name="search", arguments={"query": "queen of Lotharingia 875", "k": 5})]),
        Message(role="tool", name="search", content="1. Teutberga: queen of Lotharingia\n2. Waldrada: consort"),
        Message(role="assistant", reasoning="Teutberga looks right; I will read her page and check the year.",
                content="Two checks at once.",
                tool_calls=[ToolCall(name="visit", arguments={"page": "Teutberga", "goal": "death"}),
                            ToolCall(name="python", arguments={"code": "print(875 - 855)"})]),
        Message(role="tool", name="visit", content="Teutberga died in 875 and was buried at Metz."),
        Message(role="tool", name="python", content="20"),
        Message(role="assistant", reasoning="Metz: let me confirm on its page.",
                tool_calls=[ToolCall(name="visit", arguments={"page": "Metz", "goal": "Teutberga"})]),
        Message(role="tool", name="visit", content="Metz: burial place of Queen Teutberga (Saint-Glossinde)."),
        Message(role="assistant", reasoning="Both facts are confirmed.", content="Teutberga, buried at Metz."),
        Message(role="user", content="Who was her husband?"),
        Message(role="assistant", content="Lothair II."),
    ]


def test_chat_template_renders_documented_format(tokenizer, tool_sample):
    messages, tools = sample_to_hf(tool_sample())
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
    rendered = tokenizer.apply_chat_template(messages, tools=[TOOLS[1].model_dump()], tokenize=False)
    assert rendered.startswith("<|im_start|>system\n# Tools\n<tools>\n{")
    assert rendered.endswith("</tools><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n")


def test_messages_to_hf_keeps_every_field_the_template_reads():
    hf = messages_to_hf(tool_use_conversation()[3:5])
    assert hf[0] == {"role": "tool", "content": "1. Teutberga: queen of Lotharingia\n2. Waldrada: consort",
                     "name": "search"}
    assert hf[1]["reasoning_content"].startswith("Teutberga looks right")
    assert hf[1]["tool_calls"][1] == {"type": "function",
                                      "function": {"name": "python", "arguments": {"code": "print(875 - 855)"}}}
    assert "loss" not in hf[1]


def test_trl_finds_the_template_prefix_preserving(tokenizer):
    assert is_chat_template_prefix_preserving(tokenizer)


def test_template_is_prefix_preserving_on_a_tool_use_conversation(tokenizer):
    """At every point where the model is asked to speak (after a user turn, or after a whole group of tool
    results), the prompt plus what it writes is a prefix of the longer conversation, as text and as token ids; and
    the ids TRL's tool loop assembles (prompt + completion + the tool-result suffix it renders from a dummy
    conversation) are the ids of the next prompt."""
    messages = tool_use_conversation()
    hf, tools = messages_to_hf(messages), [t.model_dump(mode="json") for t in TOOLS]

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt(k: int) -> str:
        return render_chat(tokenizer, hf[:k], tools, add_generation_prompt=True)[0]

    full, _ = render_chat(tokenizer, hf, tools)
    full_ids = ids(full)
    eos = tokenizer.eos_token_id
    turns = [k for k, m in enumerate(messages) if m.role == "assistant"]
    assert len(turns) == 5
    for k in turns:
        m = messages[k]
        generated = format_assistant_text(m.content, m.reasoning, m.tool_calls) + IM_END
        assert full.startswith(prompt(k) + generated), k
        with_turn = ids(prompt(k)) + ids(generated)
        assert full_ids[: len(with_turn)] == with_turn, k
        # The tool results that answer this turn, then the next generation prompt, as TRL's loop appends them.
        end = k + 1
        while end < len(messages) and messages[end].role == "tool":
            end += 1
        if end == k + 1:
            continue
        dummy = [{"role": "user", "content": "dummy"},
                 {"role": "assistant", "content": "", "tool_calls": [
                     {"type": "function", "function": {"name": messages[k + 1].name, "arguments": {}}}]}]
        dummy_ids = ids(render_chat(tokenizer, dummy)[0])
        dummy_ids = dummy_ids[: len(dummy_ids) - dummy_ids[::-1].index(eos)]  # through the last <|im_end|>
        suffix = ids(render_chat(tokenizer, dummy + hf[k + 1 : end], add_generation_prompt=True)[0])
        assert suffix[: len(dummy_ids)] == dummy_ids
        assert with_turn + suffix[len(dummy_ids) :] == ids(prompt(end)), k


def test_format_and_parse_round_trip():
    calls = [ToolCall(name="search", arguments={"query": "Lucca"}), ToolCall(name="visit", arguments={"page": "Lucca"})]
    text = format_assistant_text("Searching.", "look it up", calls)
    assert text == (
        "<think>\nlook it up\n</think>\n\nSearching.\n"
        '<tool_call>\n{"name": "search", "arguments": {"query": "Lucca"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "visit", "arguments": {"page": "Lucca"}}\n</tool_call>'
    )
    parts = parse_assistant_text(text)
    assert parts == AssistantParts("Searching.", "look it up", calls)
    assert format_assistant_text(*parts) == text
    # OpenAI's shape (arguments as a JSON string) writes the same text.
    openai = [{"id": "c0", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
              for c in calls]
    assert format_assistant_text("Searching.", "look it up", openai) == text
    # No content: the first call follows the reasoning directly.
    assert parse_assistant_text(format_assistant_text("", "r", calls[:1])) == AssistantParts("", "r", calls[:1])
    assert parse_assistant_text("Paris") == AssistantParts("Paris", None, [])


def test_parser_skips_malformed_calls_and_keeps_their_text():
    text = (
        "<think>check</think>\nLet me try.\n"
        '<tool_call>\n{"name": "search", "arguments": {"query": \n</tool_call>\n'
        '<tool_call>\n{"name": "visit", "arguments": {"page": "X"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "browse", "arguments": {}}\n</tool_call>'
    )
    content, reasoning, calls = parse_assistant_text(text)
    assert reasoning == "check"
    assert calls == [ToolCall(name="visit", arguments={"page": "X"}), ToolCall(name="browse", arguments={})]
    assert content == 'Let me try.\n<tool_call>\n{"name": "search", "arguments": {"query": \n</tool_call>'
    # Restricted to known tools, a call to another stays text too.
    content, _, calls = parse_assistant_text(text, tool_names={"search", "visit"})
    assert calls == [ToolCall(name="visit", arguments={"page": "X"})] and content.endswith(
        '<tool_call>\n{"name": "browse", "arguments": {}}\n</tool_call>'
    )
    # No tools offered: every block is text.
    assert parse_assistant_text(text, tool_names=()).tool_calls == []


def test_parser_keeps_tags_inside_call_arguments():
    # Found by tests/data/test_fuzz.py: an argument holding a closing tag ended the block (or the reasoning) there.
    calls = [ToolCall(name="write", arguments={"text": "</think>"}),
             ToolCall(name="write", arguments={"text": "a</tool_call>b<tool_call>"})]
    for reasoning in (None, "plan"):
        text = format_assistant_text("0", reasoning, calls)
        assert parse_assistant_text(text) == AssistantParts("0", reasoning, calls)
        assert parse_tool_calls(text) == calls
    # A </think> after a call's closing tag is still where the reasoning ends.
    drafted = '<tool_call>{"name": "f", "arguments": {}}</tool_call> no, later</think>Now.'
    assert parse_assistant_text(drafted) == AssistantParts(
        "Now.", '<tool_call>{"name": "f", "arguments": {}}</tool_call> no, later', [])


def test_parser_reads_reasoning_whose_opening_tag_was_in_the_prompt():
    assert parse_assistant_text("step one\n</think>\n\nAnswer.") == AssistantParts("Answer.", "step one", [])
    assert parse_assistant_text("<think>\n\n</think>\n\nAnswer.") == AssistantParts("Answer.", None, [])
    # An unclosed block (generation cut mid-thought) is not reasoning yet: it stays visible.
    assert parse_assistant_text("<think>still going").content == "<think>still going"


def test_parse_tool_calls_inverts_rendering(tokenizer, tool_sample):
    sample = tool_sample()
    messages, tools = sample_to_hf(sample)
    text, spans = render_chat(tokenizer, messages, tools)
    assert parse_tool_calls(text[spans[0][0] : spans[0][1]]) == sample.messages[2].tool_calls
    assert parse_tool_calls(text[spans[1][0] : spans[1][1]]) == []
    # Malformed blocks are skipped, valid ones kept.
    generated = (
        '<tool_call>\n{"name": "search", "arguments": {"query": \n</tool_call>'
        '<tool_call>\n{"arguments": {}}\n</tool_call>'
        '<tool_call>\n{"name": "", "arguments": {}}\n</tool_call>'
        '<tool_call>\n{"name": "visit", "arguments": ["X"]}\n</tool_call>'
        '<tool_call>\n{"name": "visit", "arguments": {"page": "X"}}\n</tool_call>'
    )
    assert parse_tool_calls(generated) == [ToolCall(name="visit", arguments={"page": "X"})]


def test_parse_tool_calls_accepts_arguments_as_a_json_string():
    generated = '<tool_call>\n{"name": "visit", "arguments": "{\\"page\\": \\"X\\", \\"goal\\": \\"year\\"}"}\n</tool_call>'
    assert parse_tool_calls(generated) == [ToolCall(name="visit", arguments={"page": "X", "goal": "year"})]
    # A string that is not a JSON object is not a call.
    assert parse_tool_calls('<tool_call>\n{"name": "visit", "arguments": "page X"}\n</tool_call>') == []


def test_completion_text_is_the_last_assistant_message():
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "chat"}]) == "chat"
    tool_loop = [
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "Metz"}}}]},
        {"role": "tool", "name": "search", "content": "Metz is a city."},
        {"role": "assistant", "content": "Metz."},
    ]
    assert completion_text(tool_loop) == "Metz."
    # Cut off after a tool result: what is judged is the last assistant message (a call, no text).
    assert completion_text(tool_loop[:2]) == ""
    assert completion_text([]) == ""


@pytest.mark.parametrize("bad", [None, 42, {"role": "assistant", "content": "x"}, ["a", "b"]])
def test_completion_text_refuses_other_shapes(bad):
    with pytest.raises(TypeError):
        completion_text(bad)
