"""Fixtures for the data-layer tests: pools built once per session from the real corpora into a scratch
checkout, and a real byte-level BPE tokenizer trained on that pool text (no fake token counters)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from forge.config import PoolsConfig
from forge.data.jsonl import read_jsonl
from forge.data.pools import build_pools, chat_text
from forge.data.schemas import ChatSample
from forge.workspace import REPO_ROOT, Workspace

POOL_CAP = 300


@pytest.fixture(scope="session")
def pool_workspace(tmp_path_factory) -> Workspace:
    root = tmp_path_factory.mktemp("checkout")
    (root / "corpora").symlink_to(REPO_ROOT / "corpora")
    return Workspace(root=root, home=tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="session")
def pool_paths(pool_workspace) -> dict[str, Path]:
    return build_pools(pool_workspace, PoolsConfig(max_rows_per_source=POOL_CAP, seed=0))


@pytest.fixture(scope="session")
def chat_pools(pool_paths) -> dict[str, list[ChatSample]]:
    domains = ("code", "deep_search", "stem", "tool_use", "general")
    return {d: read_jsonl(pool_paths[d], ChatSample, max_bad_ratio=0.0).rows for d in domains}


@pytest.fixture(scope="session")
def bpe_count_tokens(chat_pools):
    """Token counter backed by a byte-level BPE trained here on the pools' own text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = [chat_text(r) for rows in chat_pools.values() for r in rows[:150]]
    tok.train_from_iterator(texts, trainer=trainer)

    def count(sample: ChatSample) -> int:
        return len(tok.encode(chat_text(sample)).ids) + 4 * len(sample.messages)  # + role/turn markers

    return count
