"""Serve any :class:`GenerationBackend` as a minimal OpenAI-compatible HTTP endpoint.

Lets one Forge model act as the teacher or judge endpoint of another component (what the full profile
points at a vLLM server), and lets tests exercise :class:`OpenAIBackend` against a real server. Routes:
``GET /v1/models``, ``POST /v1/chat/completions`` (tool calls in the generated text come back as structured
``tool_calls``, reasoning as ``reasoning_content``), ``POST /v1/completions``. Loopback by default.

    server = make_server(TransformersBackend(model_dir), port=8000)
    server.serve_forever()          # or start_in_thread(server) in a test
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from forge.chat import parse_assistant_text
from forge.generation.base import GenerationBackend


def assistant_message(text: str) -> dict[str, Any]:
    """The OpenAI ``message`` of generated assistant text: ``content``, ``reasoning_content`` when it reasoned,
    ``tool_calls`` (arguments JSON-encoded, as OpenAI sends them) when it called tools."""
    content, reasoning, calls = parse_assistant_text(text)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for i, c in enumerate(calls)
        ]
    return message


def make_server(
    backend: GenerationBackend, host: str = "127.0.0.1", port: int = 0, model_name: str = "forge"
) -> ThreadingHTTPServer:
    """An HTTP server bound to ``host:port`` (port 0 picks a free one: see ``server.server_address``)."""
    lock = threading.Lock()  # one generate at a time: local models are not safe to call concurrently

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):  # silence per-request stderr lines
            pass

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # http.server names the handlers
            if self.path.rstrip("/") == "/v1/models":
                self._reply(200, {"object": "list", "data": [{"id": model_name, "object": "model"}]})
            else:
                self._reply(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            try:
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                sampling = {
                    "max_new_tokens": int(req.get("max_tokens") or 256),
                    "temperature": float(req.get("temperature", 1.0)),
                    "top_p": float(req.get("top_p", 1.0)),
                    "seed": int(req.get("seed") or 0),
                }
                route = self.path.rstrip("/")
                if req.get("model") != model_name:  # as vLLM answers a name it does not serve
                    self._reply(404, {"error": {"message": f"The model `{req.get('model')}` does not exist.",
                                                "type": "NotFoundError", "code": 404}})
                    return
                if route == "/v1/chat/completions":
                    with lock:
                        text = backend.generate([req["messages"]], tools=req.get("tools"), **sampling)[0]
                    message = assistant_message(text)
                    finish = "tool_calls" if "tool_calls" in message else "stop"
                    choice = {"index": 0, "message": message, "finish_reason": finish}
                    kind = "chat.completion"
                elif route == "/v1/completions":
                    with lock:
                        text = backend.generate_text([req["prompt"]], **sampling)[0]
                    choice = {"index": 0, "text": text, "finish_reason": "stop"}
                    kind = "text_completion"
                else:
                    self._reply(404, {"error": {"message": f"no route {self.path}"}})
                    return
            except (KeyError, TypeError, ValueError) as err:
                self._reply(400, {"error": {"message": f"bad request: {err!r}"}})
                return
            self._reply(
                200,
                {
                    "id": f"cmpl-{uuid.uuid4().hex[:12]}",
                    "object": kind,
                    "created": int(time.time()),
                    "model": model_name,
                    "choices": [choice],
                },
            )

    return ThreadingHTTPServer((host, port), Handler)


def start_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    """Run ``server.serve_forever`` in a daemon thread; stop it with ``server.shutdown()``."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread
