"""Fixtures for generation tests: real corpus text (wiki2 paragraphs) and a tokenizer trained on it."""

import gzip
import json
from pathlib import Path

import pytest

from forge.config import TokenizerConfig
from forge.training.tokenizer import train_tokenizer

WIKI2 = Path("/work/shared/data/wiki2_corpus/2wikimultihopqa_corpus.json.gz")


@pytest.fixture(scope="session")
def wiki_docs() -> list[dict]:
    """2WikiMultihopQA paragraphs: ``{"title", "text"}`` (6k real Wikipedia paragraphs)."""
    if not WIKI2.exists():
        pytest.skip(f"{WIKI2} not present")
    with gzip.open(WIKI2, "rt") as f:
        return json.load(f)


@pytest.fixture(scope="session")
def wiki_texts(wiki_docs) -> list[str]:
    return [d["text"] for d in wiki_docs]


@pytest.fixture(scope="session")
def tokenizer(wiki_texts):
    return train_tokenizer(wiki_texts, TokenizerConfig(vocab_size=1024, max_training_chars=400_000))
