"""Generation through any OpenAI-compatible HTTP endpoint (teacher models, a vLLM server, another Forge).

``POST {base_url}/chat/completions`` for chats, ``POST {base_url}/completions`` for raw text, one request per
prompt, a few in flight at once. Structured replies (``reasoning_content``, ``tool_calls``) are rendered
back into Forge's text format, so callers parse every backend's output the same way.

    backend = OpenAIBackend("http://127.0.0.1:8000/v1", model="teacher", api_key=os.environ.get("OPENAI_API_KEY"))
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from forge.chat import format_assistant_text
from forge.generation.base import Messages


class OpenAIBackend:
    """Client of an OpenAI-compatible server.

    Args:
        base_url: endpoint root including ``/v1`` (``GenerationConfig.openai_base_url``).
        model: model name sent with each request.
        api_key: bearer token; default ``$OPENAI_API_KEY`` when set, none otherwise.
        timeout_s: per-request timeout.
        max_concurrency: requests in flight at once.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str = "default",
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_concurrency: int = 4,
    ) -> None:
        if not base_url:
            raise ValueError("OpenAIBackend needs a base_url (generation.openai_base_url in the profile)")
        self.base_url = base_url.rstrip("/")
        self.model = model
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s)
        self.max_concurrency = max_concurrency

    def close(self) -> None:
        self.client.close()

    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        response = self.client.post(path, json=payload)
        if response.status_code != 200:
            raise RuntimeError(f"{self.base_url}{path}: HTTP {response.status_code}: {response.text[:500]}")
        return response.json()

    def _sampling(self, max_new_tokens: int, temperature: float, top_p: float, seed: int) -> dict[str, Any]:
        return {
            "model": self.model,
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "seed": seed,
            "n": 1,
        }

    def _map(self, fn, items: list) -> list:
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_concurrency, len(items)))) as pool:
            return list(pool.map(fn, items))

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
        """See :meth:`forge.generation.base.GenerationBackend.generate`."""
        base = self._sampling(max_new_tokens, temperature, top_p, seed)
        if tools:
            base["tools"] = tools

        def one(messages: Messages) -> str:
            message = self._post("/chat/completions", {**base, "messages": messages})["choices"][0]["message"]
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            return format_assistant_text(message.get("content"), reasoning, message.get("tool_calls"))

        return self._map(one, prompts)

    def generate_text(
        self,
        raw_prompts: list[str],
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> list[str]:
        """See :meth:`forge.generation.base.GenerationBackend.generate_text`."""
        base = self._sampling(max_new_tokens, temperature, top_p, seed)
        return self._map(
            lambda p: self._post("/completions", {**base, "prompt": p})["choices"][0]["text"], raw_prompts
        )
