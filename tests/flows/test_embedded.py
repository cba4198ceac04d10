"""Flows run against the embedded server send no heartbeats (forge/workspace.py: embedded_flow_settings); a server
that watches for them (PREFECT_API_URL) or a frequency the user set keeps them.

.venv/bin/pytest tests/flows/test_embedded.py -q
"""

from prefect import flow
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, get_current_settings, temporary_settings

from forge.workspace import embedded_flow_settings


@flow
def heartbeat_frequency() -> int | None:
    """What the flow engine reads to start its heartbeat thread (None: no thread)."""
    return get_current_settings().flows.heartbeat_frequency


def test_a_flow_run_against_the_embedded_server_sends_no_heartbeat(monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", raising=False)
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 180}):  # Prefect 3.7's default
        assert heartbeat_frequency() == 180
        with embedded_flow_settings():
            assert heartbeat_frequency() is None


def test_a_watching_server_or_the_users_own_frequency_keeps_heartbeats(monkeypatch):
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 45}):
        monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")  # read by the helper only: no request
        with embedded_flow_settings():
            assert get_current_settings().flows.heartbeat_frequency == 45
        monkeypatch.delenv("PREFECT_API_URL")
        monkeypatch.setenv("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "45")
        with embedded_flow_settings():
            assert heartbeat_frequency() == 45
