"""Deployment and service wiring: prefect.yaml points at real flows with valid crons; `forge ui` serves both UIs;
the dashboard page renders the latest run."""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from forge.workspace import REPO_ROOT

pytestmark = pytest.mark.cost(150)


def test_prefect_yaml_deployments_point_at_flows_with_valid_schedules():
    from prefect import Flow
    from prefect.client.schemas.schedules import CronSchedule

    spec = yaml.safe_load((REPO_ROOT / "infra" / "prefect.yaml").read_text())
    names = {d["name"] for d in spec["deployments"]}
    assert {"recipe-nightly", "evaluate-candidate"} <= names
    for dep in spec["deployments"]:
        module_path, attr = dep["entrypoint"].split(":")
        module = importlib.import_module(module_path.removesuffix(".py").replace("/", "."))
        flow = getattr(module, attr)
        assert isinstance(flow, Flow), dep["entrypoint"]
        assert set(dep.get("parameters", {})) <= set(flow.parameters.properties), dep["name"]
        for schedule in dep["schedules"]:
            CronSchedule(cron=schedule["cron"], timezone=schedule["timezone"])  # raises on an invalid cron


def test_recipe_parameters_are_a_profile_and_its_overrides():
    # The run form has two fields: which profile, and overrides validated against it (no class defaults of a
    # whole RecipeConfig that could silently replace the profile).
    from prefect.utilities.schema_tools import ValidationError, validate

    from flows.recipe import recipe
    from forge.config import ConfigError, load_profile, profile_names

    schema = recipe.parameters.model_dump()
    assert set(schema["properties"]) == {"profile", "overrides"} and not schema["definitions"]
    profile = schema["properties"]["profile"]
    assert profile["default"] == "tiny" and profile["enum"] == profile_names() == ["ci", "nanbeige-4.1-3b", "tiny"]
    # What a deployment checks before it creates a run: a profile that is not shipped is refused.
    validate({"profile": "tiny", "overrides": {"sft.packing": False}}, schema, raise_on_error=True)
    with pytest.raises(ValidationError, match="profile"):
        validate({"profile": "tiny.yaml"}, schema, raise_on_error=True)
    # Choosing nothing but a profile runs that profile, and no GPU-profile value reaches a tiny run.
    tiny = load_profile(profile["default"])
    assert tiny.profile == "tiny" and tiny.base.source == "build"
    assert max(stage.max_length for stage in tiny.sft.curriculum) <= 1024
    # An override is validated against the profile, and the error says it came from the overrides.
    with pytest.raises(ConfigError, match=r"sft\.packing \(from overrides\)"):
        load_profile("tiny", {"sft.packing": "sometimes"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, deadline: float) -> int:
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status
        except OSError:
            time.sleep(0.5)
    return 0


def _refused(port: int, deadline: float) -> bool:
    """True once nothing listens on ``port`` any more (before ``deadline``)."""
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return True
        time.sleep(0.5)
    return False


@pytest.mark.slow
def test_forge_ui_serves_prefect_and_mlflow_on_loopback_and_stops_them_on_sigterm(tmp_path):
    prefect_port, mlflow_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    env["FORGE_HOME"] = str(tmp_path / "home")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "forge"), "ui", "--prefect-port", str(prefect_port),
         "--mlflow-port", str(mlflow_port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        assert _wait_http(f"http://127.0.0.1:{mlflow_port}/health", deadline) == 200
        assert _wait_http(f"http://127.0.0.1:{prefect_port}/api/health", deadline) == 200
        proc.send_signal(signal.SIGTERM)  # to `forge ui` alone, as a service manager stops it
        out = proc.communicate(timeout=60)[0]
        # Both servers went with it, workers included: nothing answers on either port.
        assert _refused(mlflow_port, time.time() + 30) and _refused(prefect_port, time.time() + 30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert f"http://127.0.0.1:{prefect_port}" in out and f"http://127.0.0.1:{mlflow_port}" in out
    assert "stopping" in out
