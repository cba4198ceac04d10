"""Outside endpoints fail politely: a teacher that answers 429/503 a few times is retried with backoff until it
answers; one that stays down fails the call with its URL, the attempts and the last status; a model name the
server does not serve is refused at once; answered requests are kept, so a re-run asks only what was not answered;
a profile naming an endpoint without its model is refused at load.

The endpoint is Forge's own OpenAI-compatible server over a tiny real model, behind a proxy that injects the faults."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from pydantic import ValidationError

from forge.config import BaseModelConfig, CodeJudgeConfig, DeepSearchConfig, GenerationConfig
from forge.generation import get_backend
from forge.generation.openai_backend import EndpointError
from forge.generation.openai_server import make_server, start_in_thread
from forge.generation.transformers_backend import TransformersBackend
from forge.training.base_model import build_model

CHATS = [[{"role": "user", "content": f"Who was Teutberga, {who}?"}] for who in ("Lothair", "Hucbert", "Waldrada")]


@pytest.fixture(scope="module")
def upstream(tokenizer):
    """Forge's server over a tiny random model, serving it as "teacher"."""
    model = build_model(BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2,
                                        intermediate_size=128, seed=5), tokenizer)
    server = make_server(TransformersBackend(model, tokenizer, batch_size=4, device="cpu"), model_name="teacher")
    start_in_thread(server)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class FaultyProxy:
    """Forwards to ``upstream`` except where ``fault(request_json)`` returns a status to answer with instead."""

    def __init__(self, upstream: str, fault) -> None:
        self.seen: list[dict] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = json.loads(body)
                proxy.seen.append(request)
                status = fault(request)
                if status:
                    data = json.dumps({"error": {"message": f"injected {status}"}}).encode()
                else:
                    reply = httpx.post(upstream + self.path, content=body, timeout=60,
                                       headers={"Content-Type": "application/json"})
                    status, data = reply.status_code, reply.content
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def client(url: str, **kwargs):
    return get_backend("openai", base_url=url, model=kwargs.pop("model", "teacher"), max_retries=2, timeout_s=30,
                       max_concurrency=1, **kwargs)


def test_busy_endpoint_is_retried_until_it_answers(upstream):
    faults = iter([429, 503])
    proxy = FaultyProxy(upstream, lambda _: next(faults, None))
    try:
        answers = client(proxy.url).generate(CHATS[:1], max_new_tokens=8)
        direct = client(upstream + "/v1").generate(CHATS[:1], max_new_tokens=8)
    finally:
        proxy.close()
    assert len(proxy.seen) == 3  # two refusals, then the answer
    assert answers == direct


def test_endpoint_that_stays_down_fails_with_url_attempts_and_status(upstream):
    proxy = FaultyProxy(upstream, lambda _: 503)
    try:
        with pytest.raises(EndpointError, match=rf"{proxy.url}/chat/completions: HTTP 503 after 3 attempts"):
            client(proxy.url).generate(CHATS[:1], max_new_tokens=8)
    finally:
        proxy.close()
    assert len(proxy.seen) == 3


def test_unknown_model_name_is_refused_without_retries(upstream):
    proxy = FaultyProxy(upstream, lambda _: None)
    try:
        with pytest.raises(EndpointError, match=r"HTTP 404 \(not retried\).*model `default` does not exist"):
            client(proxy.url, model="default").generate(CHATS[:1], max_new_tokens=8)
    finally:
        proxy.close()
    assert len(proxy.seen) == 1  # a 404 is an answer, not a hiccup


def test_rerun_after_endpoint_failure_asks_only_what_was_not_answered(upstream, tmp_path):
    down = {"Waldrada"}
    proxy = FaultyProxy(upstream, lambda req: 503 if any(w in req["messages"][0]["content"] for w in down) else None)
    try:
        with pytest.raises(EndpointError):
            client(proxy.url, cache_dir=tmp_path).generate(CHATS, max_new_tokens=8)
        first = len(proxy.seen)
        down.clear()  # the endpoint is back
        answers = client(proxy.url, cache_dir=tmp_path).generate(CHATS, max_new_tokens=8)
    finally:
        proxy.close()
    asked_again = [r["messages"][0]["content"] for r in proxy.seen[first:]]
    assert asked_again == [CHATS[2][0]["content"]]  # the two answered before came from the cache
    assert answers == client(upstream + "/v1").generate(CHATS, max_new_tokens=8)


@pytest.mark.parametrize(("cls", "fields", "missing"), [
    (GenerationConfig, {"openai_base_url": "http://gpu:8000/v1"}, "openai_model"),
    (DeepSearchConfig, {"teacher_base_url": "http://gpu:8000/v1"}, "teacher_model"),
    (CodeJudgeConfig, {"complexity_model_url": "http://gpu:8000/v1"}, "complexity_model"),
])
def test_endpoint_without_its_model_name_is_refused_at_load(cls, fields, missing):
    with pytest.raises(ValidationError, match=rf"{missing} is required with an endpoint URL \(http://gpu:8000/v1\)"):
        cls(**fields)
    assert cls(**fields, **{missing: "teacher"})
