"""Generation backends: batched greedy equals one-by-one greedy, seeded sampling repeats, the OpenAI-compatible
client against a real local server serving the transformers backend, and the vLLM backend refused clearly."""

import gc
import importlib.util
import weakref

import pytest

from forge.chat import format_assistant_text, parse_assistant_text
from forge.config import BaseModelConfig, GenerationConfig
from forge.generation import get_backend, local_backend
from forge.generation.base import GenerationBackend
from forge.generation.openai_server import assistant_message, make_server, start_in_thread
from forge.generation.transformers_backend import TransformersBackend
from forge.training.base_model import build_model

PROMPTS = [
    [{"role": "user", "content": "Who was Teutberga?"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "A much longer question about the margraves of Tuscany and Lucca?"},
    ],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "?"}],
]
TOOLS = [{"type": "function", "function": {"name": "search", "description": "Search.", "parameters": {}}}]


@pytest.fixture(scope="module")
def model(tokenizer):
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128, seed=3)
    return build_model(cfg, tokenizer)


@pytest.fixture(scope="module")
def backend(model, tokenizer):
    return TransformersBackend(model, tokenizer, batch_size=8, device="cpu")


def test_batched_greedy_equals_unbatched(backend, model, tokenizer):
    one_by_one = TransformersBackend(model, tokenizer, batch_size=1, device="cpu")
    assert isinstance(backend, GenerationBackend)
    batched = backend.generate(PROMPTS, tools=TOOLS, max_new_tokens=24, temperature=0.0)
    single = one_by_one.generate(PROMPTS, tools=TOOLS, max_new_tokens=24, temperature=0.0)
    assert batched == single
    assert len(batched) == 3 and all(isinstance(t, str) and t for t in batched)
    assert "<|im_start|>" not in "".join(batched)  # control tokens are stripped


def test_sampling_is_seeded(backend):
    a = backend.generate(PROMPTS, max_new_tokens=16, temperature=1.0, top_p=0.95, seed=7)
    b = backend.generate(PROMPTS, max_new_tokens=16, temperature=1.0, top_p=0.95, seed=7)
    c = backend.generate(PROMPTS, max_new_tokens=16, temperature=1.0, top_p=0.95, seed=8)
    assert a == b and a != c


def test_server_message_is_openai_shaped_and_renders_back():
    text = (
        "<think>\nlook it up\n</think>\n\nSearching.\n"
        '<tool_call>\n{"name": "search", "arguments": {"query": "Lucca"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "visit", "arguments": {"page": "Lucca"}}\n</tool_call>'
    )
    message = assistant_message(text)
    assert (message["reasoning_content"], message["content"]) == ("look it up", "Searching.")
    assert message["tool_calls"][0] == {
        "id": "call_0", "type": "function", "function": {"name": "search", "arguments": '{"query": "Lucca"}'}
    }
    # What OpenAIBackend does with a reply: the parts rendered back into Forge's text.
    assert format_assistant_text(message["content"], message["reasoning_content"], message["tool_calls"]) == text
    assert assistant_message("Hello.") == {"role": "assistant", "content": "Hello."}


def test_openai_backend_against_local_server(backend):
    server = make_server(backend, host="127.0.0.1", port=0)
    start_in_thread(server)
    try:
        host, port = server.server_address
        client = get_backend("openai", base_url=f"http://{host}:{port}/v1", model="forge")
        remote = client.generate(PROMPTS, tools=TOOLS, max_new_tokens=20, temperature=0.0)
        local = backend.generate(PROMPTS, tools=TOOLS, max_new_tokens=20, temperature=0.0)
        # The server splits reasoning / content / tool calls into OpenAI fields; the client renders them back.
        assert remote == [format_assistant_text(*parse_assistant_text(text)) for text in local]
        raw = ["Teutberga was a queen of", "The margrave"]
        assert client.generate_text(raw, max_new_tokens=12, temperature=0.0) == backend.generate_text(
            raw, max_new_tokens=12, temperature=0.0
        )
        with pytest.raises(RuntimeError, match="HTTP 404"):
            client._post("/nowhere", {})
        client.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_backend_refused_with_install_hint():
    with pytest.raises(ImportError, match=r"vllm.*pip install -e '\.\[gpu\]'"):
        get_backend("vllm", model="Nanbeige/Nanbeige4.1-3B")
    with pytest.raises(ValueError, match="unknown generation backend"):
        get_backend("tgi")


def test_a_backend_left_releases_its_model(tmp_path, model, tokenizer):
    """``with local_backend(...) as backend:`` (every stage that generates): on leaving, the backend drops the model it
    loaded, so its memory is free before the next engine loads or training starts; it refuses to generate after."""
    model.save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    with local_backend(GenerationConfig(), str(tmp_path / "ckpt"), batch_size=4) as backend:
        assert backend.generate(PROMPTS[:1], max_new_tokens=4)
        loaded = weakref.ref(backend.model)
    gc.collect()
    assert loaded() is None, "the loaded model outlived its backend"
    with pytest.raises(RuntimeError, match="closed"):
        backend.generate(PROMPTS[:1], max_new_tokens=4)
