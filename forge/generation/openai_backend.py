"""Generation through any OpenAI-compatible HTTP endpoint (teacher models, a vLLM server, another Forge).

Requests go through the ``openai`` SDK: ``chat.completions`` for chats, ``completions`` for raw text, one request
per prompt, a few in flight at once. The SDK retries what is worth retrying (connection errors, timeouts, 408, 409,
429 and 5xx) with exponential backoff and jitter, honouring ``Retry-After``; when the retries run out the call fails
with the endpoint's URL and its last status. Structured replies (``reasoning_content``, ``tool_calls``) are
rendered back into Forge's text format, so callers parse every backend's output the same way.

With ``cache_dir`` every answered request is kept on disk, keyed by its endpoint, route and payload: a stage that
fails half-way (the endpoint died after its retries) asks again, when re-run, only what it had not been answered.

    backend = OpenAIBackend("http://127.0.0.1:8000/v1", model="teacher", api_key=os.environ.get("OPENAI_API_KEY"))
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai

from forge.atomic import atomic_write_text
from forge.chat import format_assistant_text
from forge.generation.base import Messages, Released
from forge.hashing import value_digest

RETRIED = {408, 409, 429}  # with 5xx: what the SDK retries (its _should_retry); the rest are answers


class EndpointError(RuntimeError):
    """An endpoint refused a request, or stayed unreachable, after the retries."""


class OpenAIBackend(Released):
    """Client of an OpenAI-compatible server.

    Args:
        base_url: endpoint root including ``/v1`` (``GenerationConfig.openai_base_url``).
        model: the model name the endpoint serves (a vLLM server refuses any other).
        api_key: bearer token; default ``$OPENAI_API_KEY`` when set (servers without auth ignore it).
        timeout_s: per-attempt timeout.
        max_retries: attempts after the first, with exponential backoff, on connection errors, timeouts, 408, 409,
            429 and 5xx; other statuses (400, 401, 404 …) fail at once.
        max_concurrency: requests in flight at once.
        cache_dir: where answered requests are kept (None: not kept).
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        max_concurrency: int = 4,
        cache_dir: str | Path | None = None,
    ) -> None:
        if not base_url:
            raise ValueError("OpenAIBackend needs a base_url (generation.openai_base_url in the profile)")
        if not model:
            raise ValueError(f"OpenAIBackend needs the model name {base_url} serves")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_retries = max_retries
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.client = openai.OpenAI(base_url=self.base_url, api_key=api_key or "none", timeout=timeout_s,
                                    max_retries=max_retries)
        self.max_concurrency = max_concurrency
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None

    def close(self) -> None:
        self.client.close()

    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST ``payload`` to ``path`` (under ``base_url``) and return the JSON reply, from the cache when it was
        answered before; :class:`EndpointError` names the URL, the attempts and the last status."""
        cached = self.cache_dir / f"{value_digest(self.base_url, path, payload)}.json" if self.cache_dir else None
        if cached is not None and cached.exists():
            return json.loads(cached.read_text())
        attempts = f"{self.max_retries + 1} attempt{'s' if self.max_retries else ''}"
        try:
            reply = self.client.post(path, body=payload, cast_to=object)
        except openai.APIStatusError as err:
            retried = err.status_code in RETRIED or err.status_code >= 500
            raise EndpointError(f"{self.base_url}{path}: HTTP {err.status_code} "
                                f"{'after ' + attempts if retried else '(not retried)'}: {err.response.text[:500]}"
                                ) from err
        except openai.APIConnectionError as err:  # timeouts too
            raise EndpointError(f"{self.base_url}{path}: no answer after {attempts}: {err.__cause__ or err}") from err
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(cached, json.dumps(reply))
        return reply

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
