"""A review store with real trajectories and logins, shared by the dashboard tests (AppTest and browser).

Tests reach the constants through the fixtures (``store.questions["xss"]``, ``store.reviewer``...): with
``--import-mode=importlib`` a test module cannot import this file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from forge.data.schemas import Message, SearchQA, SearchTrajectory, ToolCall, TurnVerdict
from forge.review import add_trajectory, create_user, open_store, session_scope
from forge.search.tools import TOOL_SPECS
from forge.workspace import REPO_ROOT

APP = REPO_ROOT / "dashboards" / "app.py"
REVIEWER, REVIEWER_PW = "alice", "alice-password-1"
ADMIN, ADMIN_PW = "root", "root-password-1"
XSS_REASONING = "<script>window.__xss=2</script>"
XSS_CONTENT = '<img src=x onerror="window.__xss=1"> **bold** [link](javascript:window.__xss=3)'
HOLIDAY_Q = "What is the music of The Holiday?"
XSS_Q = "Which tag is this? <b>bold question</b>"
LONG_Q = "Who directed the film with the long page?"
THIRTY_Q = "Which film did the thirty-visit search end on?"
THIRTY_TURNS = 30


def _trajectory(question: str, answer: str, turns: list[tuple[Message, Message | None]], critic: list[bool],
                final: Message, agent: str = "planner") -> tuple[SearchTrajectory, SearchQA]:
    qa = SearchQA.build(source="test", question=question, answer=answer,
                        gold_path=["The Holiday", "Hans Zimmer"], gold_relations=["music"])
    msgs = [Message(role="user", content=question)]
    for call, response in turns:
        msgs.append(call)
        if response is not None:
            msgs.append(response)
    msgs.append(final)
    traj = SearchTrajectory.build(source="test", qa_id=qa.id, agent=agent, question=question, gold_answer=answer,
                                  messages=msgs, tools=TOOL_SPECS, final_answer=final.content,
                                  correct=final.content == answer)
    assistant = [i for i, m in enumerate(msgs) if m.role == "assistant"]
    verdicts = [TurnVerdict(message_index=i, logical=True, tool_call=True, info_gain=ok,
                            reasons=[] if ok else ["the page added nothing"]) for i, ok in zip(assistant, critic)]
    return traj.model_copy(update={"verdicts": verdicts}), qa


def trajectories() -> dict[str, tuple[SearchTrajectory, SearchQA]]:
    holiday = _trajectory(
        HOLIDAY_Q, "Hans Zimmer",
        [(Message(role="assistant", reasoning="Search first.",
                  tool_calls=[ToolCall(name="search", arguments={"query": "The Holiday", "k": 3})]),
          Message(role="tool", name="search", content="[1] The Holiday\n    The Holiday is a 2006 film.")),
         (Message(role="assistant", reasoning="Open it.",
                  tool_calls=[ToolCall(name="visit", arguments={"page": "The Holiday"})]),
          Message(role="tool", name="visit", content="The Holiday\nThe music of The Holiday is Hans Zimmer."))],
        critic=[True, False, True],
        final=Message(role="assistant", reasoning="So the answer is Hans Zimmer.", content="Hans Zimmer"))
    xss = _trajectory(
        XSS_Q, "Hans Zimmer",
        [(Message(role="assistant", reasoning=XSS_REASONING, content=XSS_CONTENT,
                  tool_calls=[ToolCall(name="search", arguments={"query": "<img src=x onerror=alert(1)>"})]),
          Message(role="tool", name="search", content="<script>window.__xss=4</script> result"))],
        critic=[False, True],
        final=Message(role="assistant", reasoning="Guess.", content="<i>Hans</i>"))
    long_page = "The Long Film is a film. " * 40  # > 400 characters: the response starts collapsed
    long = _trajectory(
        LONG_Q, "Someone",
        [(Message(role="assistant", reasoning="Visit the page.",
                  tool_calls=[ToolCall(name="visit", arguments={"page": "The Long Film"})]),
          Message(role="tool", name="visit", content=long_page))],
        critic=[True, True],
        final=Message(role="assistant", reasoning="Not on the page.", content="Nobody"))
    # A long episode: 29 visits, then the answer; the critic passed every turn.
    thirty = _trajectory(
        THIRTY_Q, "Film 29",
        [(Message(role="assistant", reasoning=f"Follow the link to film {k}.",
                  tool_calls=[ToolCall(name="visit", arguments={"page": f"Film {k}"})]),
          Message(role="tool", name="visit", content=f"Film {k}\nFilm {k} links to Film {k + 1}."))
         for k in range(1, THIRTY_TURNS)],
        critic=[True] * THIRTY_TURNS,
        final=Message(role="assistant", reasoning="The chain ends here.", content="Film 29"))
    return {"holiday": holiday, "xss": xss, "long": long, "thirty": thirty}


SEEDED = ("holiday", "xss", "long")  # what every store holds; the browser's adds "thirty"


@dataclass(frozen=True)
class Store:
    home: Path
    ids: dict[str, str]  # name → trajectory id
    url: str | None = None
    schema: str | None = None
    app: Path = APP
    reviewer: str = REVIEWER
    reviewer_pw: str = REVIEWER_PW
    admin: str = ADMIN
    admin_pw: str = ADMIN_PW
    xss_reasoning: str = XSS_REASONING
    xss_content: str = XSS_CONTENT

    @property
    def questions(self) -> dict[str, str]:
        return {"holiday": HOLIDAY_Q, "xss": XSS_Q, "long": LONG_Q, "thirty": THIRTY_Q}

    def engine(self):
        return open_store(self.url, self.home, schema=self.schema)


def seed_store(home: Path, url: str | None = None, schema: str | None = None, extra: tuple[str, ...] = ()) -> Store:
    """Three trajectories (one with an XSS payload, one with a long tool response; ``extra`` names more from
    :func:`trajectories`), a reviewer and an admin;
    in SQLite under ``home``, or at ``url`` (PostgreSQL) in ``schema``."""
    engine = open_store(url, home, schema=schema)
    ids = {}
    with session_scope(engine) as s:
        for name, (traj, qa) in trajectories().items():
            if name not in (*SEEDED, *extra):
                continue
            add_trajectory(s, traj, qa=qa)
            ids[name] = traj.id
        create_user(s, REVIEWER, password=REVIEWER_PW, role="reviewer")
        create_user(s, ADMIN, password=ADMIN_PW, role="admin")
    engine.dispose()
    return Store(home=home, ids=ids, url=url, schema=schema)


@pytest.fixture
def store(tmp_path, monkeypatch) -> Store:
    home = tmp_path / "home"
    monkeypatch.setenv("FORGE_HOME", str(home))
    monkeypatch.delenv("FORGE_REVIEW_DB_URL", raising=False)
    monkeypatch.delenv("FORGE_REVIEW_DB_SCHEMA", raising=False)
    return seed_store(home)


PG_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"


@pytest.fixture
def pg_store(tmp_path, monkeypatch, pg_schema) -> Store:
    """The same store in PostgreSQL (a fresh schema), reached by the app through ``FORGE_REVIEW_DB_URL``."""
    home = tmp_path / "home"
    monkeypatch.setenv("FORGE_HOME", str(home))
    monkeypatch.setenv("FORGE_REVIEW_DB_URL", PG_URL)
    monkeypatch.setenv("FORGE_REVIEW_DB_SCHEMA", pg_schema)
    return seed_store(home, PG_URL, pg_schema)


@pytest.fixture(scope="session")
def seed():
    """``seed(home) -> Store`` for module-scoped homes (the browser server, the MLflow registry)."""
    return seed_store
