"""Review-store fixtures: a real trajectory with critic labels, and the store on SQLite and on PostgreSQL
(``pg_schema`` from tests/conftest.py: a fresh schema per test, skipped with the reason where no server answers)."""

from __future__ import annotations

import pytest

from forge.data.schemas import Message, SearchTrajectory, ToolCall, ToolFunction, ToolSpec, TurnVerdict
from forge.review import open_store

PG_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"  # as tests/conftest.py's pg_schema
TOOLS = [ToolSpec(function=ToolFunction(name=name)) for name in ("search", "visit", "python")]


def make_trajectory(tag: str = "a", python: bool = False) -> SearchTrajectory:
    """A three-turn search trajectory (search → visit → answer); the critic failed the visit on information gain.
    With ``python=True`` the second call runs code, which makes it tool-use data."""
    second = (ToolCall(name="python", arguments={"code": "print(2006 - 1990)"}) if python
              else ToolCall(name="visit", arguments={"page": "The Holiday"}))
    msgs = [
        Message(role="user", content=f"What is the music of The Holiday? ({tag})"),
        Message(role="assistant", reasoning="Search first.", tool_calls=[ToolCall(name="search",
                                                                                 arguments={"query": "The Holiday"})]),
        Message(role="tool", name="search", content="[1] The Holiday\n    The Holiday is a 2006 film."),
        Message(role="assistant", reasoning="Open it.", tool_calls=[second]),
        Message(role="tool", name=second.name, content="The Holiday\nThe music of The Holiday is Hans Zimmer."),
        Message(role="assistant", reasoning="So the answer is Hans Zimmer.", content="Hans Zimmer"),
    ]
    traj = SearchTrajectory.build(source="test", qa_id=f"qa-{tag}", agent="planner", question=msgs[0].content,
                                  gold_answer="Hans Zimmer", messages=msgs, tools=TOOLS, final_answer="Hans Zimmer",
                                  correct=True)
    verdicts = [TurnVerdict(message_index=1, logical=True, tool_call=True, info_gain=True),
                TurnVerdict(message_index=3, logical=True, tool_call=True, info_gain=False, reasons=["no gain"]),
                TurnVerdict(message_index=5, logical=True, tool_call=True, info_gain=True)]
    return traj.model_copy(update={"verdicts": verdicts})


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    """(url, schema) of an empty store on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'review.db'}", None
    return PG_URL, request.getfixturevalue("pg_schema")


@pytest.fixture
def engine(store):
    url, schema = store
    eng = open_store(url, schema=schema)
    yield eng
    eng.dispose()


@pytest.fixture
def make_traj():
    """:func:`make_trajectory`, for tests (conftest modules are not importable under --import-mode=importlib)."""
    return make_trajectory
