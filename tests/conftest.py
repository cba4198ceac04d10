"""Test-wide setup: offline, and every embedded service pointed at a scratch home (never the user's .forge/).

Set before anything imports prefect, mlflow or transformers: they read their settings at import time.
"""

import os
import tempfile
from pathlib import Path

if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs two workers on the two cores: one torch thread each,
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # or four threads would contend for two cores (set before torch loads)

from forge.workspace import HOME_DERIVED_ENV, configure_environment, embedded_flow_settings  # imports no service

_SCRATCH = Path(tempfile.mkdtemp(prefix="forge-tests-"))
os.environ["FORGE_HOME"] = str(_SCRATCH / "home")
# Every location configure_environment derives from a home, and any server address (a test that runs pytest in a
# subprocess, as another user, must not inherit its parent's: tests/code/test_rootless.py).
for _key in (*HOME_DERIVED_ENV, "PREFECT_API_URL"):
    os.environ.pop(_key, None)

WORKSPACE = configure_environment()
# Flows run here against the embedded server, as `forge run` runs them (forge/workspace.py): without the heartbeat
# whose thread every flow run's end would wait out (~1 s each).
embedded_flow_settings().__enter__()

import pytest


def pytest_collection_modifyitems(items):
    """The files marked ``cost(seconds)`` first, costliest first. `make test` hands whole files to its two workers
    in this order (``--dist loadfile --no-loadscope-reorder``; xdist's own order puts the files with the most tests
    first, so the recipe and stack scenarios, a few tests of minutes each, started last and ran alone at the end):
    a worker busy with one of the long scenarios leaves the other to run the short files beside it."""
    cost: dict = {}
    for item in items:
        marker = item.get_closest_marker("cost")
        if marker:
            cost[item.path] = max(cost.get(item.path, 0), marker.args[0])
    items.sort(key=lambda item: -cost.get(item.path, 0))  # stable: each file's tests stay in their order


@pytest.fixture(scope="session")
def workspace():
    """The session's workspace: the real checkout (corpora/) with a scratch home."""
    return WORKSPACE


@pytest.fixture(scope="session")
def scratch_dir() -> Path:
    return _SCRATCH


@pytest.fixture(scope="session")
def wiki_docs() -> list[dict]:
    """Real text: the 2WikiMultihopQA Wikipedia paragraphs shipped in corpora/, ``{"title", "text"}`` (6k)."""
    import gzip
    import json

    with gzip.open(WORKSPACE.corpora / "wiki2_corpus" / "2wikimultihopqa_corpus.json.gz", "rt") as f:
        return json.load(f)


@pytest.fixture(scope="session")
def wiki_texts(wiki_docs) -> list[str]:
    return [d["text"] for d in wiki_docs]


@pytest.fixture(scope="session")
def tokenizer(wiki_texts):
    """A byte-level BPE with Forge's chat template, trained on ``wiki_texts``."""
    from forge.config import TokenizerConfig
    from forge.training.tokenizer import train_tokenizer

    return train_tokenizer(wiki_texts, TokenizerConfig(vocab_size=1024, max_training_chars=400_000))


@pytest.fixture(scope="session")
def tiny_policy(tokenizer, tmp_path_factory) -> Path:
    """A randomly initialised 2-layer causal LM saved with ``tokenizer``: a real model whose samples depend on
    seeds and temperature, for tests of what generates (rollouts, filters), not of what it has learnt."""
    from forge.config import BaseModelConfig
    from forge.training.base_model import build_model
    from forge.training.checkpoints import save_atomically

    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128)
    return save_atomically(build_model(cfg, tokenizer), tokenizer, tmp_path_factory.mktemp("policy") / "random")


@pytest.fixture(scope="session")
def tool_sample():
    """Factory of one tool-use conversation: system, user, an assistant turn with reasoning, text and two tool
    calls (trained only when ``first_turn_loss``), the two tool results, a final answer."""
    from forge.data.schemas import ChatSample, Message, ToolCall, ToolFunction, ToolSpec

    search = ToolSpec(function=ToolFunction(
        name="search", description="Search the wiki.",
        parameters={"type": "object", "properties": {"query": {"type": "string"}}}))
    visit = ToolSpec(function=ToolFunction(name="visit", description="Open a page."))

    def make(first_turn_loss: bool = False) -> ChatSample:
        return ChatSample.build(domain="deep_search", source="test", tools=[search, visit], messages=[
            Message(role="system", content="Be brief."),
            Message(role="user", content="Who married Lothair II?"),
            Message(role="assistant", reasoning="I should search.", content="Let me look.", loss=first_turn_loss,
                    tool_calls=[ToolCall(name="search", arguments={"query": "Lothair II wife"}),
                                ToolCall(name="visit", arguments={"page": "Teutberga"})]),
            Message(role="tool", name="search", content="Teutberga was queen of Lotharingia."),
            Message(role="tool", name="visit", content="Teutberga (died 875)."),
            Message(role="assistant", content="Teutberga."),
        ])

    return make


PG_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"  # the server this machine and CI start


@pytest.fixture
def pg_schema():
    """A fresh, empty schema on the PostgreSQL at 127.0.0.1:5432 (dropped afterwards), so parallel runs never share
    tables; the test is skipped, with the reason, where no server answers (a laptop without PostgreSQL)."""
    import uuid

    from sqlalchemy import create_engine, text

    try:
        import psycopg2

        psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="test", connect_timeout=2).close()
    except Exception as err:  # noqa: BLE001 - any failure to connect means: no server to test against
        pytest.skip(f"no PostgreSQL answering on 127.0.0.1:5432 db 'test' ({type(err).__name__}: {err})")
    schema = f"forge_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    yield schema
    with admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()
