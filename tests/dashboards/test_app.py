"""The dashboard driven in-process with Streamlit's AppTest: the login gate, turn-by-turn review into the store,
optimistic locking, model text never rendered as markdown, admin-only actions re-checked server-side, and the
training pages over a real MLflow registry.

    PYTHONPATH=$PWD .venv/bin/pytest -q tests/dashboards/test_app.py
"""

from __future__ import annotations

import json
import re
import uuid

import pytest
from streamlit.testing.v1 import AppTest

from forge.config import load_profile
from forge.review import record_verdict, session_scope, trajectory_view
from forge.workspace import REPO_ROOT

APP = REPO_ROOT / "dashboards" / "app.py"
TINY_GATE = load_profile("tiny").promotion.metrics  # what the registry page's promote button judges by


def _app() -> AppTest:
    return AppTest.from_file(str(APP), default_timeout=60)


def _button(at: AppTest, label: str):
    found = [b for b in at.button if b.label == label]
    assert found, f"no button {label!r}; buttons: {[b.label for b in at.button]}"
    return found[0]


def _labels(at: AppTest) -> list[str]:
    return [b.label for b in at.button]


def _all_text(at: AppTest) -> str:
    parts = [e.value for kind in ("text", "markdown", "caption", "title", "header", "subheader", "code", "success",
                                  "warning", "error", "info") for e in getattr(at, kind)]
    return "\n".join(str(p) for p in parts)


def _login(at: AppTest, name: str, password: str) -> AppTest:
    at.run()
    at.text_input(key="login_name").input(name)
    at.text_input(key="login_password").input(password)
    _button(at, "Log in").click().run()
    assert not at.exception, at.exception
    return at


def _open(at: AppTest, question: str) -> AppTest:
    """Click Next until the trajectory asking ``question`` is on screen (the way a reviewer gets there)."""
    for _ in range(10):
        if at.get_by_key("question") and question in _all_text(at):
            return at
        _button(at, "Next").click().run()
    raise AssertionError(f"{question!r} never came up in the queue")


def test_nothing_but_the_login_form_before_login(store):
    at = _app().run()
    assert not at.exception
    assert [t.label for t in at.text_input] == ["Username", "Password"]
    assert _labels(at) == ["Log in"]  # no SSO button without an [auth] secrets section
    text = _all_text(at)
    assert store.questions["holiday"] not in text and "Accept" not in text and "Review" not in text
    assert not at.dataframe and not at.metric and not at.sidebar.children.get(0)


def test_sso_button_only_when_secrets_configure_auth(store):
    at = _app()
    at.secrets["auth"] = {"redirect_uri": "http://127.0.0.1:8501/oauth2callback", "cookie_secret": "x" * 32,
                          "client_id": "forge", "client_secret": "s",
                          "server_metadata_url": "https://idp.example/.well-known/openid-configuration"}
    at.run()
    assert not at.exception
    assert _labels(at) == ["Log in", "Log in with SSO"]
    assert store.questions["holiday"] not in _all_text(at)


def test_wrong_password_shows_an_error_and_nothing_else(store):
    at = _login(_app(), store.reviewer, "not-the-password")
    assert [e.value for e in at.error] == ["Unknown user or wrong password."]
    assert _labels(at) == ["Log in"] and store.questions["holiday"] not in _all_text(at)
    at = _login(_app(), "nobody-at-all", store.reviewer_pw)
    assert [e.value for e in at.error] == ["Unknown user or wrong password."]


def test_repeated_wrong_passwords_are_slowed_down(store):
    from forge.review.auth import FREE_FAILURES

    name = f"guess-{uuid.uuid4().hex[:6]}"  # a name of its own: other tests' attempts do not count here
    for _ in range(FREE_FAILURES):
        assert [e.value for e in _login(_app(), name, "wrong password").error] == ["Unknown user or wrong password."]
    # The next attempt has to wait 1 s, the one after 2 s, then 4, 8: an app run slower than the wait (a loaded
    # machine) gets one more plain refusal, but the doubling waits catch up within a few tries.
    for _ in range(5):
        errors = [e.value for e in _login(_app(), name, "wrong password").error]
        assert len(errors) == 1, errors
        if errors[0].startswith("Too many failed logins: try again in"):
            break
        assert errors == ["Unknown user or wrong password."]
    else:
        raise AssertionError(f"{FREE_FAILURES + 5} wrong passwords in a row and none was slowed down")


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request):
    return request.getfixturevalue("store" if request.param == "sqlite" else "pg_store")


def test_review_turn_by_turn_lands_in_the_store(any_store):
    store = any_store
    at = _login(_app(), store.reviewer, store.reviewer_pw)
    assert [m.label for m in at.metric] == ["Turns judged by you", "Trajectories done", "Your verdicts"]
    assert at.metric[0].value == "0 / 7"
    at = _open(at, store.questions["holiday"])
    tid = store.ids["holiday"]
    _button(at, "Accept turn 1").click().run()
    assert "Turn 1 accepted (version 1)." in [s.value for s in at.success]
    at.text_area(key=_note_key(store, tid, 2)).input("visiting the page told us nothing new")
    at.checkbox(key=f"dim_info_gain_{_turn_id(store, tid, 2)}").check()
    _button(at, "Reject turn 2").click().run()
    assert "Turn 2 rejected (version 1)." in [s.value for s in at.success]
    _button(at, "Accept turn 3 (next open)").click().run()  # the keyboard-shortcut button (A)
    at.text_area(key=f"tnote_{tid}").input("fine apart from the second visit")
    _button(at, "Reject trajectory").click().run()
    assert not at.exception
    assert at.metric[0].value == "3 / 7"

    with session_scope(store.engine()) as s:
        view = trajectory_view(s, tid, store.reviewer)
    verdicts = [t.my_verdict for t in view.turns]
    assert [v.passed for v in verdicts] == [True, False, True]
    assert verdicts[1].note == "visiting the page told us nothing new"
    assert verdicts[1].dimensions == {"logical": True, "tool_call": True, "info_gain": False}
    assert view.my_verdict.accepted is False and view.my_verdict.note == "fine apart from the second visit"


def _turn_id(store, tid: str, number: int) -> int:
    with session_scope(store.engine()) as s:
        return trajectory_view(s, tid, store.reviewer).turns[number - 1].turn_id


def _note_key(store, tid: str, number: int) -> str:
    return f"note_{_turn_id(store, tid, number)}"


def test_a_stale_page_cannot_overwrite_a_newer_verdict(store):
    at = _open(_login(_app(), store.reviewer, store.reviewer_pw), store.questions["holiday"])
    turn = _turn_id(store, store.ids["holiday"], 1)
    with session_scope(store.engine()) as s:  # the same reviewer, in another tab, rejects turn 1 first
        record_verdict(s, turn, store.reviewer, passed=False, note="from the other tab", expected_version=0)
    _button(at, "Accept turn 1").click().run()  # this page still shows "none yet" (version 0)
    assert any("changed elsewhere" in w.value for w in at.warning)
    with session_scope(store.engine()) as s:
        mine = trajectory_view(s, store.ids["holiday"], store.reviewer).turns[0].my_verdict
    assert (mine.passed, mine.note, mine.version) == (False, "from the other tab", 1)
    assert ("Your verdict: ✗ rejected (version 1) · wrong: logical, tool_call, info_gain · from the other tab"
            in _all_text(at))  # the page reloaded what is stored
    _button(at, "Accept turn 1").click().run()  # now based on what is stored: saved
    assert "Turn 1 accepted (version 2)." in [s.value for s in at.success]


def test_model_text_is_shown_as_text_never_as_markdown(store):
    at = _open(_login(_app(), store.reviewer, store.reviewer_pw), store.questions["xss"])
    texts = [t.value for t in at.text]
    assert store.questions["xss"] in texts and store.xss_reasoning in texts and store.xss_content in texts and "<i>Hans</i>" in texts
    assert "<script>window.__xss=4</script> result" in texts
    assert json.loads(at.code[0].value) == {"query": "<img src=x onerror=alert(1)>"}
    rendered_as_markdown = "\n".join(str(e.value) for kind in ("markdown", "caption", "title", "header",
                                                               "subheader") for e in getattr(at, kind))
    assert "__xss" not in rendered_as_markdown and "<img" not in rendered_as_markdown
    for path in (APP.parent).rglob("*.py"):  # and no page can opt out of escaping
        assert "unsafe_allow_html=" not in path.read_text(), path
        assert not re.search(r"st\.html\(", path.read_text()), path


def test_long_tool_response_starts_collapsed(store):
    at = _open(_login(_app(), store.reviewer, store.reviewer_pw), store.questions["long"])
    [expander] = [e for e in at.expander if e.label.startswith("Tool response")]
    assert expander.label == "Tool response (1,000 characters)"
    assert expander.proto.expanded is False
    assert [t.value for t in expander.text] == [("The Long Film is a film. " * 40).strip()]


def test_filters_narrow_the_queue(store):
    at = _login(_app(), store.reviewer, store.reviewer_pw)
    at.selectbox(key="f_critic").select("passed").run()
    assert "1 of 1 in this queue" in _all_text(at) and store.questions["long"] in _all_text(at)
    at.radio(key="f_status").set_value("reviewed").run()
    assert "Nothing in this queue" in _all_text(at)


def test_agreement_page_and_admin_only_overlap(store):
    tid = store.ids["holiday"]
    with session_scope(store.engine()) as s:
        turns = trajectory_view(s, tid, store.reviewer).turns
        for who, votes in ((store.reviewer, [True, False, True]), (store.admin, [True, True, True])):
            for turn, ok in zip(turns, votes, strict=True):
                record_verdict(s, turn.turn_id, who, passed=ok)
    at = _login(_app(), store.reviewer, store.reviewer_pw)
    at.switch_page("views/agreement.py").run()
    assert not at.exception
    table = at.dataframe[0].value
    assert table.loc["passed", "n"] == 6 and table.loc["passed", "agreement"] == pytest.approx(5 / 6)
    assert [m.value for m in at.metric][:2] == ["3", "66.7%"]  # 3 turns judged twice, 2 of 3 agreed
    assert "Assign overlap" not in _labels(at)

    admin = _login(_app(), store.admin, store.admin_pw)
    admin.switch_page("views/agreement.py").run()
    admin.multiselect(key="overlap_reviewers").set_value([store.admin, store.reviewer])
    admin.slider(key="overlap_share").set_value(1.0)
    _button(admin, "Assign overlap").click().run()
    assert "6 assignments made over 2 reviewers." in [s.value for s in admin.success]


def test_serve_refuses_a_non_loopback_host_without_allow_remote():
    from typer.testing import CliRunner

    from forge.cli import app
    from forge.review.cli import _is_loopback

    result = CliRunner().invoke(app, ["review", "serve", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "--allow-remote" in result.output
    assert [_is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "10.0.0.5", "example.org")] == [
        True, True, True, False, False, False]


# --- training pages over a real MLflow registry (one per module: creating its store takes seconds) ----------------

@pytest.fixture(scope="module")
def registry_home(tmp_path_factory, seed):
    import os

    home = tmp_path_factory.mktemp("registry") / "home"
    import mlflow

    saved = {k: os.environ.get(k) for k in ("FORGE_HOME", "FORGE_ROOT", "FORGE_REVIEW_DB_URL")}
    saved_uris = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    os.environ["FORGE_HOME"] = str(home)
    os.environ.pop("FORGE_REVIEW_DB_URL", None)
    store = seed(home)
    from forge.workspace import configure_environment
    from registry.models import set_version_metrics
    from registry.tracking import init_mlflow

    client = init_mlflow(configure_environment())
    client.create_registered_model("forge-policy")
    checkpoint = home / "ckpt"
    checkpoint.mkdir()
    with mlflow.start_run() as run:
        pass
    scores = [0.30, 0.35, 0.33]  # v1 champion, v2 better (promotable), v3 worse
    for i, score in enumerate(scores, 1):
        parent = "forge-base/1" if i == 1 else f"forge-policy/{i - 1}"
        v = client.create_model_version("forge-policy", str(checkpoint), run.info.run_id,
                                        tags={"forge.stage": "sft", "forge.parent_version": parent})
        # every metric the tiny profile's gate declares (configs/tiny.yaml, promotion.metrics): a candidate without
        # one is refused
        metrics = {m: score if g.direction == "higher" else 3.0 - i for m, g in TINY_GATE.items()}
        set_version_metrics("forge-policy", v.version, metrics, client=client)
    client.set_registered_model_alias("forge-policy", "champion", "1")
    client.set_registered_model_alias("forge-policy", "candidate", "2")
    yield store, client
    mlflow.set_tracking_uri(saved_uris[0])  # init_mlflow pointed the process-wide URIs at this home
    mlflow.set_registry_uri(saved_uris[1])
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _alias(client, alias: str) -> str:
    return str(client.get_model_version_by_alias("forge-policy", alias).version)


def test_a_reviewer_sees_no_promotion_and_cannot_promote(registry_home):
    store, client = registry_home
    at = _login(_app(), store.reviewer, store.reviewer_pw)
    at.switch_page("views/registry.py").run()
    assert not at.exception
    assert "Promote candidate" not in _labels(at) and "Roll back champion" not in _labels(at)
    assert at.dataframe[0].value["version"].tolist() == [1, 2, 3]

    # A crafted request reaches the handler: it re-reads the role from the store and refuses; nothing moves.
    from dashboards.actions import NotAllowed, promote_candidate, rollback_champion
    from forge.config import load_profile
    from forge.review.models import AuditEvent

    engine = store.engine()
    with pytest.raises(NotAllowed):
        promote_candidate(engine, store.reviewer, client, "forge-policy", load_profile("tiny").promotion)
    with pytest.raises(NotAllowed):
        rollback_champion(engine, store.reviewer, client, "forge-policy")
    assert _alias(client, "champion") == "1"
    with session_scope(engine) as s:
        refused = [e.actor for e in s.query(AuditEvent).filter(AuditEvent.action == "refused")]
    assert refused == [store.reviewer, store.reviewer]


def test_an_admin_promotes_through_the_gate_and_rolls_back(registry_home):
    store, client = registry_home
    at = _login(_app(), store.admin, store.admin_pw)
    at.switch_page("views/registry.py").run()
    _button(at, "Promote candidate").click().run()
    assert not at.exception
    assert [s.value for s in at.success] == ["forge-policy: promoted"]
    assert _alias(client, "champion") == "2" and _alias(client, "previous-champion") == "1"
    assert client.get_model_version("forge-policy", "2").tags["promotion.decision"] == "promoted"  # as the CLI
    _button(at, "Roll back champion").click().run()
    assert "forge-policy: champion is version 1 again." in [s.value for s in at.success]
    assert _alias(client, "champion") == "1"


def test_evaluations_page_plots_the_domains_then_the_chosen_metrics(registry_home):
    store, _ = registry_home
    from forge.evals.domains import HEADLINE

    at = _login(_app(), store.reviewer, store.reviewer_pw)
    at.switch_page("views/evaluations.py").run()
    assert not at.exception
    headline = sorted(m for m in HEADLINE.values() if m in TINY_GATE)
    # more than eight metrics: the domain bars, then only each domain's headline metric until more are chosen
    assert at.subheader[0].value == "Headline metric per domain"
    assert sorted(s.value for s in at.subheader[1:]) == headline  # laid out in three columns
    assert len(at.get("vega_lite_chart")) == 1 + len(headline)
    assert at.dataframe[0].value["metric:humaneval_pass_at_1"].tolist() == [0.30, 0.35, 0.33]
    at.multiselect[0].set_value(sorted(TINY_GATE)).run()
    assert sorted(s.value for s in at.subheader[1:]) == sorted(TINY_GATE)
    assert len(at.get("vega_lite_chart")) == 1 + len(TINY_GATE)


def test_mixes_and_latest_run_pages(store, tmp_path, monkeypatch):
    root = tmp_path / "root"
    mix = root / "data" / "mixes" / "sft-x"
    mix.mkdir(parents=True)
    domains = {"code": (0.6, 0.59, 590), "math": (0.4, 0.41, 410)}
    (mix / "manifest.json").write_text(json.dumps({
        "name": "sft-x", "total_tokens": 1000, "target_total_tokens": 1000, "shards": [], "heldout_file": "h",
        "sources": {}, "config": {},
        "domains": {d: {"rows": 3, "tokens": t, "target_tokens": int(ts * 1000), "target_share": ts,
                        "actual_share": a, "heldout_rows": 1, "pool_rows": 9} for d, (ts, a, t) in domains.items()}}))
    (store.home / "runs").mkdir(parents=True)
    (store.home / "runs" / "latest.json").write_text(json.dumps({
        "flow_run_id": "f-1", "profile": "tiny", "state": "completed",
        "stages": {"pretrain": {"state": "cached", "seconds": 1.5, "run_id": "r1", "version": "3"}}}))
    monkeypatch.setenv("FORGE_ROOT", str(root))
    at = _login(_app(), store.reviewer, store.reviewer_pw)
    at.switch_page("views/mixes.py").run()
    assert not at.exception
    assert at.header[0].value == "sft-x"
    frame = at.dataframe[0].value
    assert frame["actual share"].to_dict() == {"code": 0.59, "math": 0.41}
    assert "largest share error 0.0100" in at.caption[0].value
    at.switch_page("views/overview.py").run()
    assert "f-1" in at.caption[0].value and at.dataframe[0].value["stage"].tolist() == ["pretrain"]
