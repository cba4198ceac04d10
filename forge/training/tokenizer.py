"""Train Forge's byte-level BPE tokenizer, and tokenize conversations with a per-turn loss mask for SFT.

The tiny profile trains its own tokenizer on the shipped corpora (stage 0); the full profile loads the hub
model's. Both speak the chat format of :mod:`forge.chat` (tokens, template, rendering): the trained tokenizer
gets its control and format tokens as single tokens and :data:`forge.chat.CHAT_TEMPLATE` as its template.
:func:`encode_chat` uses the template's ``{% generation %}`` markers to build per-turn loss masks.

    from forge.training.tokenizer import train_tokenizer, encode_chat
    tok = train_tokenizer(texts, TokenizerConfig())
    tok.save_pretrained(path)                    # AutoTokenizer.from_pretrained(path) loads it offline
    enc = encode_chat(tok, sample, max_length=256)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from forge.chat import (
    CHAT_TEMPLATE,
    CONTROL_TOKENS,
    ENDOFTEXT,
    FORMAT_TOKENS,
    IM_END,
    IM_START,
    SPECIAL_TOKENS,
    render_chat,
    sample_to_hf,
)
from forge.config import TokenizerConfig
from forge.data.schemas import ChatSample


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
    if cfg.split_digits:
        core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), core.pre_tokenizer])
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
    messages, tools = sample_to_hf(sample)
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
