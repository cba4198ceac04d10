"""The dashboard in real headless Chromium (Debian's ``/usr/bin/chromium`` driven by Playwright): nothing before
login, a reviewer judges a trajectory turn by turn and the verdicts are in the store, an XSS payload in a model
turn stays inert text. One ``forge review serve`` for the module; each test is a fresh browser session. And a stage's
MLflow link (flows/links.py) opens its run's page in MLflow's own UI.

    PYTHONPATH=$PWD .venv/bin/pytest -q tests/dashboards/test_browser.py
    FORGE_UPDATE_SCREENSHOT=1 ... also rewrites docs/review-dashboard.png (the README's screenshot)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from forge.review import queue, session_scope, trajectory_view
from forge.workspace import REPO_ROOT

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SCREENSHOT = REPO_ROOT / "docs" / "review-dashboard.png"
TIMEOUT_MS = 30_000  # per wait; a loaded 2-core machine answers a rerun in well under this

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} not installed (`make browser` installs "
                                "Debian's chromium; Playwright's own browser download is never used)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory, seed):
    home = tmp_path_factory.mktemp("browser") / "home"
    store = seed(home, extra=("thirty",))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "FORGE_REVIEW_"))}
    env.update(FORGE_HOME=str(home), HF_HUB_OFFLINE="1", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false",
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    log = open(home / "serve.log", "w")  # noqa: SIM115 - closed after the server stops
    proc = subprocess.Popen([sys.executable, "-m", "forge.cli", "review", "serve", "--port", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    if not _answers(f"{url}/_stcore/health", proc, 60):
        _stop(proc)
        pytest.fail(f"forge review serve did not answer: {(home / 'serve.log').read_text()[-2000:]}")
    yield url, store
    _stop(proc)
    log.close()


def _answers(health_url: str, proc: subprocess.Popen, seconds: float) -> bool:
    """Whether ``health_url`` answers 200 within ``seconds`` while ``proc`` (the server) lives."""
    deadline = time.time() + seconds
    while proc.poll() is None and time.time() < deadline:
        try:
            with urllib.request.urlopen(health_url, timeout=2) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL after 15 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    yield page
    context.close()


def _login(page, url: str, name: str, password: str) -> None:
    page.goto(url)
    page.get_by_role("textbox", name="Username").fill(name)
    page.get_by_role("textbox", name="Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("button", name="Log out").wait_for()


def _settled(page) -> None:
    """Wait for Streamlit's rerun to finish. Mid-rerun the page holds both runs' copies of a widget (the old one marked
    ``data-stale``), so a label can match two textareas: act on the page only once it has settled."""
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
                           " && !document.querySelector('[data-stale=\"true\"]')")


def _press_next(page, current: str) -> None:
    """Press N (the Next button's shortcut) until the question ``current`` is no longer shown.

    A press that moves nothing within 10 s, on a page that has since settled on the same question, is pressed again
    (at most twice more): twice on 2026-11-29, right after Debian's chromium went from 155 to 156, a first press
    was lost and the question stayed, then ten runs of this file in a row never lost one. A press that is only slow
    has moved the page by the time it settles, so pressing again never skips a question."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # installed wherever a page exists

    for attempt in range(3):
        _settled(page)
        page.locator("body").press("n")
        try:
            page.wait_for_function("q => !document.querySelector('.st-key-question')?.innerText.includes(q)",
                                   arg=current, timeout=10_000)
            return
        except PlaywrightTimeout:
            _settled(page)
            if page.locator(".st-key-question").inner_text().strip() != current:
                return  # slow, not lost
            if attempt == 2:
                raise


def _open(page, question: str) -> None:
    """Move through the queue with N until the trajectory asking ``question`` is shown."""
    for _ in range(10):
        shown = page.locator(".st-key-question")
        shown.wait_for()
        current = shown.inner_text().strip()
        if current == question:
            _settled(page)
            return
        _press_next(page, current)
    raise AssertionError(f"{question!r} never came up in the queue")


def test_nothing_is_shown_before_login(server, page):
    url, store = server
    for path in ("", "/review", "/agreement", "/registry"):
        page.goto(url + path)
        page.get_by_role("button", name="Log in").wait_for()
        page.get_by_role("textbox", name="Password").wait_for()
        _settled(page)
        body = page.locator("body").inner_text()
        assert store.questions["holiday"] not in body and "Accept" not in body and "Promote" not in body, path
        assert "Turns judged" not in body and "Log out" not in body
        assert page.locator("[data-testid='stSidebarNav']").count() == 0


def test_review_a_trajectory_turn_by_turn(server, page, tmp_path):
    url, store = server
    _login(page, url, store.reviewer, store.reviewer_pw)
    _open(page, store.questions["holiday"])

    page.get_by_role("button", name="Accept turn 1", exact=True).click()
    page.get_by_text("Turn 1 accepted (version 1).").wait_for()
    _settled(page)
    page.get_by_label("Comment on turn 2").fill("the visit added nothing the search had not shown")
    page.get_by_text("Turn 2: no information gain").click()
    page.get_by_role("button", name="Reject turn 2", exact=True).click()
    page.get_by_text("Turn 2 rejected (version 1).").wait_for()
    _settled(page)
    page.locator("body").press("a")  # keyboard: accept the first turn not judged yet (turn 3)
    page.get_by_text("Turn 3 accepted (version 1).").wait_for()
    _settled(page)
    page.get_by_label("Comment on the trajectory").fill("good except the second visit")
    page.get_by_role("button", name="Accept trajectory").click()  # its name ends with the shortcut (T)
    page.get_by_text("Trajectory accepted (version 1).").wait_for()
    assert "Turns judged by you" in page.locator("body").inner_text()

    with session_scope(store.engine()) as s:
        view = trajectory_view(s, store.ids["holiday"], store.reviewer)
    verdicts = [t.my_verdict for t in view.turns]
    assert [v.passed for v in verdicts] == [True, False, True]
    assert verdicts[1].note == "the visit added nothing the search had not shown"
    assert verdicts[1].dimensions == {"logical": True, "tool_call": True, "info_gain": False}
    assert (view.my_verdict.accepted, view.my_verdict.note) == (True, "good except the second visit")

    # Streamlit scrolls inside its own container, so a "full page" shot is the viewport: make it tall enough.
    page.set_viewport_size({"width": 1400, "height": 2300})
    page.get_by_role("heading", name="Review").scroll_into_view_if_needed()
    page.locator(".st-key-trajectory_verdict").wait_for()
    shot = tmp_path / "review-dashboard.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("FORGE_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, SCREENSHOT)


def test_xss_payload_in_a_model_turn_is_inert_text(server, page):
    url, store = server
    _login(page, url, store.reviewer, store.reviewer_pw)
    _open(page, store.questions["xss"])
    turn = page.locator(".st-key-turn_1")
    turn.get_by_text(store.xss_content, exact=True).wait_for()
    assert turn.get_by_text(store.xss_reasoning, exact=True).is_visible()
    assert page.get_by_text("<script>window.__xss=4</script> result", exact=True).is_visible()
    assert page.locator(".st-key-final_answer").inner_text().strip() == "<i>Hans</i>"
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator('img[src="x"]').count() == 0
    assert page.locator("a[href^='javascript']").count() == 0
    assert page.locator(".st-key-final_answer i").count() == 0  # <i> not parsed either


def test_keyboard_alone_clears_a_30_turn_trajectory_after_the_critic_failures(server, page):
    url, store = server
    with session_scope(store.engine()) as s:
        planned = [i.question for i in queue(s, store.reviewer, plan=True, limit=100)]
        failed = {i.question for i in queue(s, store.reviewer, plan=True, limit=100) if i.critic_failed_turns}
    assert planned.index(store.questions["thirty"]) >= len(failed)
    assert set(planned[:len(failed)]) == failed  # the plan puts critic failures first
    _login(page, url, store.reviewer, store.reviewer_pw)
    # The page walks the queue in the plan's order, N after N, up to the 30-turn trajectory.
    for question in planned[: planned.index(store.questions["thirty"])]:
        page.locator(".st-key-question").get_by_text(question, exact=True).wait_for()
        _settled(page)
        page.locator("body").press("n")
    page.locator(".st-key-question").get_by_text(store.questions["thirty"], exact=True).wait_for()
    # The turn index: a link per turn, each marked pending (its icon's name is part of the link's name).
    page.get_by_role("link", name="radio_button_unchecked icon 30", exact=True).wait_for()
    assert page.get_by_role("link", name="radio_button_unchecked icon 31", exact=True).count() == 0

    _settled(page)
    page.locator("body").press("a")  # accept turn 1
    page.get_by_text("Turn 1 accepted (version 1).").wait_for()
    _settled(page)
    page.locator("body").press("x")  # reject turn 2
    page.get_by_text("Turn 2 rejected (version 1).").wait_for()
    _settled(page)
    page.locator("body").press("Shift+A")  # accept the 28 left
    page.get_by_text("Accepted the 28 remaining turn(s).").wait_for()
    page.get_by_role("link", name="check_circle icon 30", exact=True).wait_for()  # now marked judged
    _settled(page)
    page.locator("body").press("t")
    page.get_by_text("Trajectory accepted (version 1).").wait_for()

    with session_scope(store.engine()) as s:
        view = trajectory_view(s, store.ids["thirty"], store.reviewer)
    assert len(view.turns) == 30 and all(t.my_verdict is not None for t in view.turns)
    assert [t.my_verdict.passed for t in view.turns] == [True, False] + [True] * 28
    assert view.my_verdict.accepted


def test_no_request_leaves_the_machine(server, page):
    # Fonts, icons and scripts all come from the dashboard's own server: it works offline, and tells no one.
    url, store = server
    outside = []
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith((url, "data:", "blob:")) else None)
    _login(page, url, store.reviewer, store.reviewer_pw)
    for title in ("Agreement", "Latest run", "Data mixes", "Evaluations", "Registry", "Review"):
        page.get_by_test_id("stSidebarNav").get_by_role("link", name=title).click()
        page.get_by_role("heading", level=1).first.wait_for()
        _settled(page)
    page.wait_for_timeout(1000)
    assert outside == []


def test_a_stage_link_opens_its_run_page_in_the_mlflow_ui(tmp_path, page, monkeypatch):
    """The link every stage's Prefect artifact and `forge status` give (flows/links.py, built without a store call)
    opens that run's page in MLflow's own UI, in its experiment."""
    from mlflow.tracking import MlflowClient

    from flows.links import mlflow_run_url

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=store)
    experiment = client.create_experiment("forge-links", artifact_location=str(tmp_path / "artifacts"))
    run = client.create_run(experiment, run_name="sft-1-ctx-256")
    client.log_metric(run.info.run_id, "eval_loss_after", 4.67)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store, "--host",
                             "127.0.0.1", "--port", str(port), "--workers", "1"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ui = f"http://127.0.0.1:{port}"
        assert _answers(f"{ui}/health", proc, 90), "mlflow server did not answer"
        monkeypatch.setenv("MLFLOW_TRACKING_URI", ui)  # where the links point (flows/links.py: mlflow_ui)
        page.goto(mlflow_run_url(run.info.run_id))
        page.wait_for_url(f"**/#/experiments/{experiment}/runs/{run.info.run_id}**")
        page.get_by_text("eval_loss_after").first.wait_for()
        assert page.get_by_text("sft-1-ctx-256").first.is_visible()
    finally:
        _stop(proc)
