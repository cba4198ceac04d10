"""Real conversations for the RL tests: HH-RLHF harmless from corpora/, as the pools build them (a pair whose turn
is empty fails validation and is skipped, as forge/data/pools.py quarantines it)."""

from __future__ import annotations

import pytest

from forge.data import corpora as C
from forge.data.pools import hh_chat, hh_preference


def _valid(make, items):
    out = []
    for i, item in enumerate(items):
        try:
            row = make(item, i)
        except ValueError:
            continue
        if row is not None:
            out.append(row)
    return out


@pytest.fixture(scope="session")
def hh(workspace):
    return C.load_hh(workspace.corpora)


@pytest.fixture(scope="session")
def hh_chats(hh):
    """HH-RLHF chosen transcripts as ``ChatSample`` rows (the **general** pool's rows)."""
    return _valid(hh_chat, hh)


@pytest.fixture(scope="session")
def hh_preferences(hh):
    """HH-RLHF pairs as ``PreferencePair`` rows (the reward model's pool)."""
    return _valid(hh_preference, hh)
