"""The one interface every generation backend implements (transformers, vLLM, OpenAI-compatible HTTP).

Synthesis, evaluation and the agent loop only ever see :class:`GenerationBackend`; which engine runs
behind it is a config choice (``GenerationConfig.backend``). Every backend returns the assistant's text in
Forge's chat format: reasoning inside ``<think>…</think>``, tool calls as ``<tool_call>`` JSON blocks
(:func:`forge.chat.parse_assistant_text` reads them back), control tokens stripped.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

Messages = list[dict[str, Any]]


@runtime_checkable
class GenerationBackend(Protocol):
    """Chat and raw-text completion over a batch of prompts."""

    def generate(
        self,
        prompts: list[Messages],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> list[str]:
        """Complete each conversation with one assistant turn.

        Args:
            prompts: conversations as HF/OpenAI chat dicts (``role``, ``content``, optional ``tool_calls``).
            tools: OpenAI-format function specs offered in every conversation.
            max_new_tokens: generation budget per prompt.
            temperature: 0 means greedy decoding.
            top_p: nucleus sampling mass (ignored when greedy).
            seed: makes sampling reproducible.

        Returns:
            One assistant text per prompt, in order.
        """
        ...

    def generate_text(
        self,
        raw_prompts: list[str],
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> list[str]:
        """Continue each raw string (no chat template); returns only the continuations."""
        ...

    def close(self) -> None:
        """Release the engine (weights, GPU memory, connections); also on leaving ``with backend:``."""
        ...


class Released:
    """A backend is a context manager that releases what it holds on exit (a model's weights, a vLLM engine's GPU
    memory, an HTTP client): a stage generates inside ``with local_backend(...) as backend:`` so the engine is gone
    before the next one loads or training starts."""

    def close(self) -> None:
        """Release the engine; the backend cannot generate afterwards."""

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ChatTemplateBackend(Released):
    """Shared ``generate`` for engines that hold the tokenizer themselves (transformers, vLLM): render each
    conversation with the model's chat template, then complete the texts with the engine's ``generate_text``."""

    tokenizer: Any

    def render(self, messages: Messages, tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt text for one conversation, ending with the assistant header."""
        return self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)

    def generate(
        self,
        prompts: list[Messages],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> list[str]:
        """See :meth:`GenerationBackend.generate`."""
        texts = [self.render(p, tools) for p in prompts]
        return self.generate_text(  # type: ignore[attr-defined]
            texts, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed
        )
