"""The background lane for Prefect calls no stage waits on (flows/links.py: the stages' artifacts): calls run in
the order given and in their caller's context, a failing one is logged and the next still runs, and ``flush``
waits for them, but not forever. That the artifacts reach a real run is tests/flows/test_recipe.py's."""

from __future__ import annotations

import contextvars
import logging
import threading

from flows.links import _Background

WHO = contextvars.ContextVar("who", default="nobody")


def test_calls_run_in_order_in_their_callers_context_and_a_failure_does_not_stop_the_rest(caplog):
    lane, seen = _Background(), []

    def record(tag: str) -> None:
        seen.append((tag, WHO.get(), threading.current_thread().name))

    def broken() -> None:
        raise ConnectionError("the Prefect server went away")

    WHO.set("the recipe flow")
    with caplog.at_level(logging.WARNING, logger="forge"):
        lane.submit(record, "first")
        lane.submit(broken)
        lane.submit(record, "second")
        lane.flush(timeout=30)
    assert [(tag, who) for tag, who, _ in seen] == [("first", "the recipe flow"), ("second", "the recipe flow")]
    assert all(thread == "forge-prefect-calls" for *_, thread in seen)  # not the caller's thread
    assert "could not record broken on the Prefect run: the Prefect server went away" in caplog.text


def test_flush_gives_up_on_a_call_that_hangs_and_says_so(caplog):
    lane, release = _Background(), threading.Event()
    lane.submit(release.wait)
    with caplog.at_level(logging.WARNING, logger="forge"):
        lane.flush(timeout=0.2)
    assert "1 stage artifact(s) not yet on the Prefect run after 0 s" in caplog.text
    release.set()
    lane.flush(timeout=30)  # and once it answers, nothing is left
    assert lane._queue.unfinished_tasks == 0
