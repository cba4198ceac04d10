"""Byte-level BPE tokenizer and the Nanbeige/Qwen chat format the whole recipe trains and generates in.

The tiny profile trains its own tokenizer on the shipped corpora (stage 0); the full profile loads the hub
model's. Both speak the same chat format, rendered by one Jinja template stored in the tokenizer:

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
assistant masks work; :func:`encode_chat` uses the same markers to build per-turn loss masks.

    from forge.training.tokenizer import train_tokenizer, encode_chat
    tok = train_tokenizer(texts, TokenizerConfig())
    tok.save_pretrained(path)                    # AutoTokenizer.from_pretrained(path) loads it offline
    enc = encode_chat(tok, sample, max_length=256)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast
from transformers.utils.chat_template_utils import render_jinja_template

from forge.config import TokenizerConfig
from forge.data.schemas import ChatSample, ToolCall

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


def _limited(texts: Iterable[str], max_chars: int) -> Iterator[str]:
    seen = 0
    for text in texts:
        if seen >= max_chars:
            return
        text = text[: max_chars - seen]
        seen += len(text)
        yield text


def train_tokenizer(texts: Iterable[str], cfg: TokenizerConfig) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer with Forge's special tokens and chat template.

    Args:
        texts: corpus documents; read until ``cfg.max_training_chars`` characters.
        cfg: vocabulary size (special tokens included) and minimum merge frequency.

    Returns:
        A fast tokenizer: ``eos_token`` is ``<|im_end|>`` (the end of a chat turn, where generation stops),
        ``pad_token`` and ``bos_token`` are ``<|endoftext|>`` (the pre-training document separator).
    """
    core = Tokenizer(models.BPE())
    # Byte-level: every string is encodable (no unknown token), and decode(encode(x)) == x.
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    # trim_offsets=False keeps character offsets exact; encode_chat maps template spans to tokens through them.
    core.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_limited(texts, cfg.max_training_chars), trainer=trainer)
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in CONTROL_TOKENS])
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in FORMAT_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=ENDOFTEXT,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        extra_special_tokens=[IM_START],
        model_max_length=1 << 30,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _hf_tool_call(call: ToolCall) -> dict[str, Any]:
    return {"type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def to_hf_messages(sample: ChatSample) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Convert a :class:`ChatSample` into HF chat dicts (OpenAI shape) and its tool list.

    Assistant reasoning goes in ``reasoning_content`` (the key HF templates use); tool calls in OpenAI's
    ``{"type": "function", "function": {"name", "arguments"}}`` shape with arguments as a dict.
    """
    messages: list[dict[str, Any]] = []
    for m in sample.messages:
        out: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.reasoning:
            out["reasoning_content"] = m.reasoning
        if m.tool_calls:
            out["tool_calls"] = [_hf_tool_call(c) for c in m.tool_calls]
        if m.name:
            out["name"] = m.name
        messages.append(out)
    tools = [t.model_dump(mode="json") for t in sample.tools] or None
    return messages, tools


def render_chat(
    tokenizer: PreTrainedTokenizerFast,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> tuple[str, list[tuple[int, int]]]:
    """Render HF chat dicts with the tokenizer's template.

    Returns:
        The text and one ``(start, end)`` character span per assistant message, in order: what that
        message generated, from after ``<|im_start|>assistant\\n`` to its ``<|im_end|>`` inclusive.
    """
    rendered, spans = render_jinja_template(
        conversations=[messages],
        tools=tools,
        chat_template=tokenizer.chat_template,
        return_assistant_tokens_mask=True,
        add_generation_prompt=add_generation_prompt,
    )
    return rendered[0], list(spans[0])


def encode_chat(tokenizer: PreTrainedTokenizerFast, sample: ChatSample, max_length: int) -> dict[str, list[int]]:
    """Tokenize a conversation with a per-turn loss mask.

    Args:
        tokenizer: a tokenizer carrying Forge's chat template.
        sample: the conversation; each assistant turn's ``loss`` flag decides whether it is trained on.
        max_length: keep the first ``max_length`` tokens.

    Returns:
        ``input_ids`` (length L <= max_length) and ``completion_mask`` (length L): 1 exactly on the tokens of
        assistant turns with ``loss=True`` (closing ``<|im_end|>`` included), 0 on system, user, tool and
        ``loss=False`` assistant tokens.
    """
    messages, tools = to_hf_messages(sample)
    text, spans = render_chat(tokenizer, messages, tools)
    assistant_turns = [m for m in sample.messages if m.role == "assistant"]
    if len(spans) != len(assistant_turns):  # the template and the schema disagree: a bug, not bad data
        raise RuntimeError(f"chat template produced {len(spans)} assistant spans for {len(assistant_turns)} turns")
    trained = [span for span, turn in zip(spans, assistant_turns, strict=True) if turn.loss]
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids: list[int] = enc["input_ids"]
    mask = [0] * len(ids)
    span_index = 0
    for i, (start, _end) in enumerate(enc["offset_mapping"]):
        # A token belongs to the turn its first character belongs to (spans are sorted and disjoint).
        while span_index < len(trained) and start >= trained[span_index][1]:
            span_index += 1
        if span_index < len(trained) and trained[span_index][0] <= start:
            mask[i] = 1
    return {"input_ids": ids[:max_length], "completion_mask": mask[:max_length]}


def count_chat_tokens(tokenizer: PreTrainedTokenizerFast, sample: ChatSample) -> int:
    """Number of tokens of the rendered conversation (no truncation)."""
    messages, tools = to_hf_messages(sample)
    text, _ = render_chat(tokenizer, messages, tools)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Extract the tool calls from generated assistant text.

    Each ``<tool_call>`` block must hold a JSON object with a string ``name`` and an object ``arguments``
    (a JSON-encoded string of an object is accepted too); malformed blocks are skipped, since generated
    text is untrusted and a reward or an agent loop should see "no valid call" rather than crash.
    """
    calls: list[ToolCall] = []
    for body in _TOOL_CALL.findall(text):
        try:
            obj = json.loads(body)
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            continue
        args = obj.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                continue
        if not isinstance(args, dict):
            continue
        calls.append(ToolCall(name=obj["name"], arguments=args))
    return calls
