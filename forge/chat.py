"""Forge's chat format, in one place: its tokens, its Jinja template, and every conversion into and out of it.

The recipe trains and generates in the Nanbeige/Qwen format. The tiny profile's tokenizer
(:func:`forge.training.tokenizer.train_tokenizer`) stores :data:`CHAT_TEMPLATE`; the full profile loads the hub
model's tokenizer, which speaks the same format:

    <|im_start|>system
    {system text}

    # Tools
    <tools>
    {"type": "function", "function": {...}}
    </tools><|im_end|>
    <|im_start|>user
    {question}<|im_end|>
    <|im_start|>assistant
    <think>
    {reasoning}
    </think>

    {answer}
    <tool_call>
    {"name": "search", "arguments": {"query": "..."}}
    </tool_call><|im_end|>
    <|im_start|>user
    <tool_response>
    {tool output}
    </tool_response>
    <tool_response>
    {second tool output}
    </tool_response><|im_end|>

Tool results travel as a user turn (consecutive tool messages share one turn), as in Qwen. Everything the
assistant writes, its closing ``<|im_end|>`` included, sits inside ``{% generation %}`` so transformers/TRL
assistant masks work (:func:`forge.training.tokenizer.encode_chat` builds per-turn loss masks from the same
markers). The template is prefix-preserving: rendering a conversation with ``add_generation_prompt=True`` and
appending the assistant's text gives a prefix of the longer conversation's rendering, which TRL's multi-turn
GRPO tool loop relies on (tests/test_chat.py checks it on a real tool-use conversation).

What the assistant writes (the text between ``<|im_start|>assistant\\n`` and ``<|im_end|>``) is what every
generation backend returns and every reward reads; :func:`format_assistant_text` writes it from parts (as
OpenAI-compatible servers return them) and :func:`parse_assistant_text` reads it back.

    from forge.chat import sample_to_hf, render_chat, parse_assistant_text
    messages, tools = sample_to_hf(sample)                       # a ChatSample as HF/OpenAI chat dicts
    text, spans = render_chat(tokenizer, messages, tools)        # spans: what each assistant turn wrote
    content, reasoning, calls = parse_assistant_text(generated)  # generated text -> parts
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from forge.data.schemas import ChatSample, Message, ToolCall

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Chat = list[dict[str, Any]]

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# Control tokens: dropped by decode(skip_special_tokens=True).
CONTROL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
# Format tokens: single tokens too, but kept on decode because they are part of what the model says.
FORMAT_TOKENS = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<tools>",
    "</tools>",
)
SPECIAL_TOKENS = CONTROL_TOKENS + FORMAT_TOKENS

# trim_blocks/lstrip_blocks are on in transformers' Jinja environment, so block tags on their own lines
# leave no whitespace behind; every newline that is part of the format is written as an explicit "\n".
CHAT_TEMPLATE = (
    "{%- set ns = namespace(system='') -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set ns.system = messages[0]['content'] -%}"
    "{%- endif -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if ns.system -%}{{- ns.system + '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\n<tools>\\n' -}}"
    "{%- for tool in tools -%}{{- tool | tojson -}}{{- '\\n' -}}{%- endfor -%}"
    "{{- '</tools><|im_end|>\\n' -}}"
    "{%- elif ns.system -%}"
    "{{- '<|im_start|>system\\n' + ns.system + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}"
    "{%- if not loop.first -%}"
    "{{- '<|im_start|>system\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- elif message['role'] == 'user' -%}"
    "{{- '<|im_start|>user\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- generation -%}"
    "{%- if message.get('reasoning_content') -%}"
    "{{- '<think>\\n' + message['reasoning_content'] + '\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{%- if message.get('content') -%}{{- message['content'] -}}{%- endif -%}"
    "{%- for call in message.get('tool_calls') or [] -%}"
    "{%- set fn = call['function'] if call.get('function') else call -%}"
    "{%- if not loop.first or message.get('content') -%}{{- '\\n' -}}{%- endif -%}"
    "{%- set args = fn['arguments'] -%}"
    "{%- if args is string -%}{%- set args_json = args -%}{%- else -%}{%- set args_json = args | tojson -%}"
    "{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": ' + (fn['name'] | tojson) + ', \"arguments\": ' + args_json + '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>' -}}"
    "{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- elif message['role'] == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


# --- Forge rows -> HF/OpenAI chat dicts --------------------------------------------------------------------------


def messages_to_hf(messages: Sequence[Message]) -> Chat:
    """Convert :class:`~forge.data.schemas.Message` s into HF chat dicts (OpenAI shape), in order.

    Assistant reasoning goes in ``reasoning_content`` (the key HF templates read); tool calls in OpenAI's
    ``{"type": "function", "function": {"name", "arguments"}}`` shape with arguments as a dict; a tool message
    keeps its ``name`` (as TRL's tool loop writes it). The per-turn ``loss`` flag is training metadata and is
    not carried.
    """
    out: Chat = []
    for m in messages:
        d: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.reasoning:
            d["reasoning_content"] = m.reasoning
        if m.tool_calls:
            d["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls
            ]
        if m.name:
            d["name"] = m.name
        out.append(d)
    return out


def messages_from_hf(chat: Sequence[Mapping[str, Any]]) -> list[Message]:
    """The inverse of :func:`messages_to_hf`: HF/OpenAI chat dicts back into validated :class:`Message` s
    (``reasoning_content`` → ``reasoning``; tool calls in OpenAI's nested or a flat shape, arguments as a dict or a
    JSON string)."""
    out = []
    for d in chat:
        calls = []
        for call in d.get("tool_calls") or []:
            fn = call.get("function", call)
            args = fn.get("arguments") or {}
            calls.append(ToolCall(name=fn["name"], arguments=json.loads(args) if isinstance(args, str) else args))
        out.append(Message(role=d["role"], content=d.get("content") or "", reasoning=d.get("reasoning_content"),
                           tool_calls=calls, name=d.get("name")))
    return out


def sample_to_hf(sample: ChatSample) -> tuple[Chat, list[dict[str, Any]] | None]:
    """A :class:`~forge.data.schemas.ChatSample` as ``(messages, tools)``: :func:`messages_to_hf` of its
    messages, and its tool specs as OpenAI function dicts (None when it has none)."""
    tools = [t.model_dump(mode="json") for t in sample.tools] or None
    return messages_to_hf(sample.messages), tools


# --- rendering ------------------------------------------------------------------------------------------------------


def render_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: Chat,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> tuple[str, list[tuple[int, int]]]:
    """Render HF chat dicts with the tokenizer's template.

    Returns:
        The text and one ``(start, end)`` character span per assistant message, in order: what that
        message generated, from after ``<|im_start|>assistant\\n`` to its ``<|im_end|>`` inclusive.
    """
    # Imported here so the text-only helpers of this module (parsers, completion_text) cost no transformers import.
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, spans = render_jinja_template(
        conversations=[messages],
        tools=tools,
        chat_template=tokenizer.chat_template,
        return_assistant_tokens_mask=True,
        add_generation_prompt=add_generation_prompt,
    )
    return rendered[0], list(spans[0])


def count_chat_tokens(tokenizer: PreTrainedTokenizerBase, sample: ChatSample) -> int:
    """Number of tokens of the rendered conversation (no truncation)."""
    messages, tools = sample_to_hf(sample)
    text, _ = render_chat(tokenizer, messages, tools)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


# --- what the assistant writes --------------------------------------------------------------------------------------

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_JSON = json.JSONDecoder()


def _call_from(obj: Any) -> ToolCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCall(name=obj["name"], arguments=args)


def _call_blocks(text: str) -> list[tuple[int, int, ToolCall]]:
    """The well-formed ``<tool_call>`` blocks of ``text`` as ``(start, end, call)``, in order.

    A block's body is read as one JSON value (not up to the next ``</tool_call>``), so an argument that
    itself holds ``</tool_call>`` or ``</think>`` stays inside its call; the block ends at the first
    ``</tool_call>`` after that value. An opener whose body is not a call is skipped and the scan goes on
    from just after it.
    """
    blocks = []
    at = text.find(_OPEN)
    while at != -1:
        body = len(text) - len(text[at + len(_OPEN) :].lstrip())
        try:
            obj, after = _JSON.raw_decode(text, body)
        except json.JSONDecodeError:
            obj, after = None, body
        close = len(text) - len(text[after:].lstrip())
        call = _call_from(obj)
        if call is not None and text.startswith(_CLOSE, close):
            blocks.append((at, close + len(_CLOSE), call))
            at = text.find(_OPEN, close + len(_CLOSE))
        else:
            at = text.find(_OPEN, at + len(_OPEN))
    return blocks


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Extract the tool calls from generated assistant text, in order.

    Each ``<tool_call>`` block must hold a JSON object with a non-empty string ``name`` and an object
    ``arguments`` (a JSON-encoded string of an object is accepted too, as OpenAI sends them); malformed blocks
    are skipped, since generated text is untrusted and a reward or an agent loop should see "no valid call"
    rather than crash.
    """
    return [call for _, _, call in _call_blocks(text)]


class AssistantParts(NamedTuple):
    """An assistant turn as parts, in :func:`format_assistant_text`'s argument order."""

    content: str
    reasoning: str | None
    tool_calls: list[ToolCall]


def parse_assistant_text(text: str, tool_names: Collection[str] | None = None) -> AssistantParts:
    """Split generated assistant text into (content, reasoning, tool calls); the inverse of
    :func:`format_assistant_text`.

    - reasoning: the text before the first ``</think>`` that is not inside a well-formed call (an argument may
      hold the tag), without its opening ``<think>`` (a model whose prompt opened the block writes none),
      stripped; None when there is no such ``</think>`` or nothing before it;
    - tool calls: the ``<tool_call>`` blocks after it that hold a well-formed call (see :func:`parse_tool_calls`)
      and, when ``tool_names`` is given, name one of those tools;
    - content: the rest, stripped. A block that is not taken as a call (malformed, or an unknown tool) stays in
      the content as text, so whoever reads the turn still sees what the model tried.

    Never raises: generated text is untrusted.
    """
    blocks = _call_blocks(text)
    reasoning, think_end = None, 0
    at = text.find("</think>")
    while at != -1:
        inside = next((end for start, end, _ in blocks if start < at < end), None)
        if inside is None:
            reasoning = text[:at].strip().removeprefix("<think>").strip() or None
            think_end = at + len("</think>")
            break
        at = text.find("</think>", inside)
    calls: list[ToolCall] = []
    kept: list[str] = []
    last = think_end
    for start, end, call in blocks:
        if start < think_end or (tool_names is not None and call.name not in tool_names):
            continue
        calls.append(call)
        kept.append(text[last:start].rstrip())
        last = end
    kept.append(text[last:])
    return AssistantParts("".join(kept).strip(), reasoning, calls)


def format_assistant_text(
    content: str | None, reasoning: str | None = None, tool_calls: Sequence[Any] | None = None
) -> str:
    """Write an assistant turn given as parts in Forge's format (the text the template renders for it, without
    the closing ``<|im_end|>``).

    The layout is the chat template's: ``<think>\\n…\\n</think>\\n\\n`` + content + one
    ``\\n<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`` per call (no newline before the first
    call when there is no content). ``tool_calls`` may be :class:`~forge.data.schemas.ToolCall` s, OpenAI
    ``{"type": "function", "function": {...}}`` dicts or flat ``{"name", "arguments"}`` dicts; arguments given as
    a JSON string (as OpenAI sends them) are decoded, and a string that is not JSON is written as it is, so a
    malformed call stays visible to the reader's parser.
    """
    text = f"<think>\n{reasoning}\n</think>\n\n" if reasoning else ""
    text += content or ""
    for i, call in enumerate(tool_calls or []):
        fn = call.get("function", call) if isinstance(call, Mapping) else call
        name = fn["name"] if isinstance(fn, Mapping) else fn.name
        args = fn.get("arguments", {}) if isinstance(fn, Mapping) else fn.arguments
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                pass
        if i or content:
            text += "\n"
        args_json = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        text += (
            f'<tool_call>\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {args_json}}}\n</tool_call>'
        )
    return text


def completion_text(completion: str | Sequence[Mapping[str, Any]]) -> str:
    """The answer text of a TRL completion, the text every reward here judges.

    A standard-format completion (a string) is itself. A conversational one (a list of message dicts: one
    assistant message, or, in TRL's multi-turn tool loop, assistant turns with tool messages in between) gives
    the content of its last assistant message (a message without a ``role`` counts as the assistant's), or ""
    when it has none.

    Raises:
        TypeError: anything else (a completion of another shape is a bug upstream, not an answer to score).
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list | tuple) and all(isinstance(m, Mapping) for m in completion):
        for message in reversed(completion):
            if message.get("role", "assistant") == "assistant":
                return message.get("content") or ""
        return ""
    raise TypeError(f"a completion is a string or a list of message dicts, not {type(completion).__name__}")
