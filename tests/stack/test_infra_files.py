"""The servers' stack as files: infra/compose.yaml (with infra/Dockerfile and infra/postgres-init.sql) and the
Kubernetes GPU pool (infra/k8s/) agree with what the tests run and with `forge stack` (forge/stack.py): pinned
images at the installed versions, the stack's ports, secrets, bucket, work pool and database names, and Prefect's
own rules for a base job template. The files are parsed, never run: no network, no docker. One test asks the
local PostgreSQL for its version and skips, saying so, where none answers."""

from __future__ import annotations

import json
import os
import re
import shlex
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from forge.stack import BUCKET, PORTS, REQUIRED, RESULTS_BUCKET, WORK_POOL, WORKER_SETTINGS, StackConfig, stack_config
from forge.workspace import REPO_ROOT, Workspace

INFRA = REPO_ROOT / "infra"
K8S = INFRA / "k8s"
# The compose stack runs its own PostgreSQL, so it takes the password that creates it where `forge stack` takes a
# server's URL (FORGE_STACK_DATABASE_URL); every other secret is one of forge/stack.py's.
SECRET_NAMES = set(REQUIRED) | {"POSTGRES_PASSWORD"}
SECRET_LIKE = re.compile(r"PASSWORD|SECRET|TOKEN|(^|_)KEY($|_)")
# ${NAME}, ${NAME:-default}, ${NAME:?message} (and the colon-less forms, which are refused); $$ escapes a dollar.
INTERPOLATION = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")
BARE_VARIABLE = re.compile(r"(?<!\$)\$[A-Za-z_]")
# The PORTS entry each published service stands for.
PUBLISHED = {"s3": "s3", "prefect-server": "prefect", "mlflow": "mlflow", "dashboard": "dashboard"}


# --- reading the files ---

def _compose() -> dict:
    return yaml.safe_load((INFRA / "compose.yaml").read_text())


def _strings(node):
    """Every string of a parsed YAML document, keys included: what compose interpolates."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def _resolve(text: str) -> str:
    """``text`` as compose renders it with nothing set: defaults in, a required variable as ``<NAME>``."""
    return INTERPOLATION.sub(lambda m: m.group(3) if m.group(2) == ":-" else f"<{m.group(1)}>", text)


def _command(service: dict) -> list[str]:
    command = service.get("command", [])
    return shlex.split(command) if isinstance(command, str) else list(command)


def _option(argv: list[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``-name=VALUE`` in ``argv``."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _listen_port(service: dict) -> int:
    """The port the service's own command listens on (SeaweedFS: its S3 gateway's)."""
    argv = _command(service)
    port = _option(argv, "--port") or _option(argv, "-s3.port")
    assert port is not None, f"no --port / -s3.port in {argv}"
    return int(port)


def _image_ref(ref: str) -> tuple[str, str | None, str | None]:
    """(name, tag, digest) of an image reference; a registry's port is not a tag."""
    name, _, digest = ref.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1:], digest or None
    return name, None, digest or None


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of infra/Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in (INFRA / "Dockerfile").read_text().splitlines()
                                           if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def _dockerfile_env() -> dict[str, str]:
    env = {}
    for instruction, args in _dockerfile():
        if instruction == "ENV":
            env.update(token.split("=", 1) for token in shlex.split(args))
    return env


def _pin(text: str, package: str) -> str:
    found = re.findall(rf"(?<![\w-]){re.escape(package)}==([\w.+]+)", text)
    assert found, f"no {package}==VERSION pin"
    assert len(set(found)) == 1, f"{package} pinned to several versions: {found}"
    return found[0]


def _constraint(package: str) -> str:
    return _pin((REPO_ROOT / "constraints.txt").read_text(), package)


def _stack_cfg(monkeypatch, tmp_path) -> StackConfig:
    """forge/stack.py's settings with nothing but the secrets set: its default prefix and ports."""
    for key in list(os.environ):
        if key.startswith("FORGE_STACK_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("FORGE_STACK_DATABASE_URL", "postgresql://forge@postgres:5432")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    return stack_config(Workspace(root=tmp_path, home=tmp_path / "home"))


def _without_password(url: str) -> str:
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1@", url)


def _job_template() -> dict:
    return json.loads((K8S / "gpu-job-template.json").read_text())


# --- compose: versions ---

def test_every_image_is_pinned_to_a_version():
    compose = _compose()
    refs = {f"compose service {name}": svc["image"] for name, svc in compose["services"].items() if "image" in svc}
    refs.update({f"Dockerfile FROM {args}": args.split()[0] for instr, args in _dockerfile() if instr == "FROM"})
    missing = [name for name, svc in compose["services"].items() if "image" not in svc and "build" not in svc]
    assert not missing, f"services with neither image nor build: {missing}"
    for where, ref in refs.items():
        name, tag, digest = _image_ref(ref)
        assert tag or digest, f"{where}: {ref} has no tag"
        if tag:
            assert tag != "latest" and re.match(r"v?\d+(\.\d+)+", tag), f"{where}: {ref} is not a version"
    # Our own image is built from the checkout, tagged with the project's version.
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name, svc in compose["services"].items():
        if "build" in svc:
            assert svc["build"]["dockerfile"] == "infra/Dockerfile", name
            assert (INFRA / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file(), name
            assert _image_ref(svc["image"])[1] == version, f"{name}: {svc['image']} is not forge:{version}"


def test_prefect_server_image_is_the_installed_prefect():
    import prefect

    servers = [svc for svc in _compose()["services"].values() if _command(svc)[:3] == ["prefect", "server", "start"]]
    assert len(servers) == 1
    name, tag, _ = _image_ref(servers[0]["image"])
    assert name == "prefecthq/prefect"
    version, _, python = tag.partition("-python")
    assert version == prefect.__version__ == _constraint("prefect")
    for spec in (INFRA / "prefect.yaml", K8S / "prefect.yaml"):
        assert str(yaml.safe_load(spec.read_text())["prefect-version"]) == prefect.__version__, spec
    # The server's Python is the one the project's image runs.
    base = next(args.split()[0] for instr, args in _dockerfile() if instr == "FROM")
    assert _image_ref(base)[1].startswith(python + "."), f"server on Python {python}, Forge's image on {base}"


def test_dockerfile_installs_like_the_makefile():
    from packaging.specifiers import SpecifierSet

    dockerfile = (INFRA / "Dockerfile").read_text()
    assert "infra/install_venv.sh" in (REPO_ROOT / "Makefile").read_text()  # make setup installs through it
    installer = (INFRA / "install_venv.sh").read_text()
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    torch = _pin(dockerfile, "torch")
    assert torch == _pin(installer, "torch") == _pin(pyproject, "torch") == _constraint("torch")
    runs = [args for instr, args in _dockerfile() if instr == "RUN"]
    torch_run = next(i for i, run in enumerate(runs) if "torch==" in run)
    forge_run = next(i for i, run in enumerate(runs) if "-c constraints.txt" in run and "-e" in run.split())
    assert torch_run < forge_run, "torch must be installed first, as infra/install_venv.sh's pip path does"
    args = {a.split("=", 1)[0]: a.split("=", 1)[1] for instr, a in _dockerfile() if instr == "ARG" and "=" in a}
    assert "/whl/cpu" in args["TORCH_INDEX"] and "stack" in args["EXTRAS"].split(",")
    base = next(a.split()[0] for instr, a in _dockerfile() if instr == "FROM")
    python = re.match(r"\d+\.\d+\.\d+", _image_ref(base)[1]).group(0)
    requires = tomllib.loads(pyproject)["project"]["requires-python"]
    assert python in SpecifierSet(requires), f"{base} is outside requires-python {requires}"
    # The build context is the checkout: a secret in .env must never reach an image.
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert {".env", ".venv/", ".forge/"} <= set(ignored)


def test_mlflow_server_is_the_installed_mlflow_as_forge_stack_runs_it(monkeypatch, tmp_path):
    import mlflow

    cfg = _stack_cfg(monkeypatch, tmp_path)
    servers = {name: svc for name, svc in _compose()["services"].items() if _command(svc)[:2] == ["mlflow", "server"]}
    assert list(servers) == ["mlflow"]
    svc = servers["mlflow"]
    if "build" in svc:  # our image: mlflow at constraints.txt's pin
        assert _constraint("mlflow") == mlflow.__version__
    else:
        assert _image_ref(svc["image"])[1].lstrip("v") == mlflow.__version__
    argv = _command(svc)
    assert _option(argv, "--artifacts-destination") == f"s3://{BUCKET}/mlflow" and "--serve-artifacts" in argv
    assert _without_password(svc["environment"]["MLFLOW_BACKEND_STORE_URI"]) == cfg.database("mlflow", "psycopg2")
    # The one-shot that makes the bucket makes forge/stack.py's.
    bucket_job = "\n".join(_command(_compose()["services"]["create-bucket"]))
    assert set(re.findall(r'"(forge[\w-]*)"', bucket_job)) == {BUCKET, RESULTS_BUCKET}


# --- compose: ports, secrets, names ---

def test_published_ports_are_forge_stacks_on_loopback():
    services = _compose()["services"]
    published = {}
    for name, svc in services.items():
        for entry in svc.get("ports", []):
            host_ip, host_port, container_port = _resolve(entry).split(":")
            assert host_ip == "127.0.0.1", f"{name} publishes on {host_ip}"
            assert name in PUBLISHED, f"{name} is published but forge stack publishes no such service"
            key = PUBLISHED[name]
            assert f"${{FORGE_STACK_{key.upper()}_PORT:-" in entry, f"{name}: not overridable as forge stack's is"
            published[key] = int(host_port)
            assert int(container_port) == _listen_port(svc), f"{name} publishes a port it does not listen on"
    assert published == PORTS


def test_clients_reach_each_service_where_it_listens(monkeypatch, tmp_path):
    services = _compose()["services"]
    client_keys = set(_stack_cfg(monkeypatch, tmp_path).client_env())
    for name in ("worker", "dashboard"):
        env = services[name]["environment"]
        assert client_keys <= set(env), f"{name} lacks {client_keys - set(env)}"
        for key in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_S3_ENDPOINT_URL",
                    "AWS_ENDPOINT_URL"):
            url = urlsplit(env[key])
            assert url.hostname in services, f"{name} {key}: no service {url.hostname}"
            assert url.port == _listen_port(services[url.hostname]), f"{name} {key}: {url.hostname} listens elsewhere"


def test_every_secret_is_required_and_one_forge_stack_names():
    compose = _compose()
    used = set()
    for text in _strings(compose):
        assert not BARE_VARIABLE.search(text), f"write ${{NAME:-default}} or ${{NAME:?why}}, not $NAME: {text!r}"
        for name, op, _ in INTERPOLATION.findall(text):
            used.add(name)
            assert op in (":?", ":-"), f"${{{name}}} has neither a default nor a requirement"
            if SECRET_LIKE.search(name) or name in SECRET_NAMES:
                assert op == ":?", f"{name} is a secret: it must be required (:?), never defaulted"
                assert name in SECRET_NAMES, f"{name} is not one of forge/stack.py's secrets"
            else:
                assert op == ":-", f"{name} is required but is no secret: give it a default"
        # A URL with a password in it takes it from a required variable.
        for password in re.findall(r"://[^/@\s:]+:([^@]+)@", text):
            assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]*\}", password), f"a literal password in {text!r}"
    assert {"POSTGRES_PASSWORD", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= used
    # No secret-named setting is written out in the file.
    for name, svc in compose["services"].items():
        for key, value in (svc.get("environment") or {}).items():
            if SECRET_LIKE.search(key):
                assert INTERPOLATION.fullmatch(str(value)), f"{name}: {key} is not taken from the environment"


def test_databases_are_forge_stacks_and_the_init_script_makes_them(monkeypatch, tmp_path):
    cfg = _stack_cfg(monkeypatch, tmp_path)
    services = _compose()["services"]
    urls = {
        "prefect-server": ("PREFECT_API_DATABASE_CONNECTION_URL", cfg.database("prefect", "asyncpg")),
        "mlflow": ("MLFLOW_BACKEND_STORE_URI", cfg.database("mlflow", "psycopg2")),
        "worker": ("FORGE_REVIEW_DB_URL", cfg.database("review", "psycopg2")),
        "dashboard": ("FORGE_REVIEW_DB_URL", cfg.database("review", "psycopg2")),
    }
    for name, (key, expected) in urls.items():
        assert _without_password(services[name]["environment"][key]) == expected, f"{name} {key}"
    assert services["postgres"]["environment"]["POSTGRES_USER"] == urlsplit(cfg.database_url).username
    mounts = [v.split(":") for v in services["postgres"]["volumes"] if "docker-entrypoint-initdb.d" in v]
    assert len(mounts) == 1 and (INFRA / mounts[0][0]).resolve() == INFRA / "postgres-init.sql"
    sql = (INFRA / "postgres-init.sql").read_text()
    created = set(re.findall(r"^CREATE DATABASE (\w+);", sql, re.MULTILINE))
    assert created == {urlsplit(expected).path.lstrip("/") for _, expected in urls.values()}
    # pg_trgm in Prefect's database, the one the server connects to.
    prefect_db = urlsplit(cfg.database("prefect")).path.lstrip("/")
    trgm = rf"^\\connect {prefect_db}\s*\nCREATE EXTENSION IF NOT EXISTS pg_trgm;"
    assert re.search(trgm, sql, re.MULTILINE), f"no pg_trgm in {prefect_db}"


def test_worker_serves_the_deployments_pool_with_the_images_home():
    services = _compose()["services"]
    pools = {d["work_pool"]["name"] for d in yaml.safe_load((INFRA / "prefect.yaml").read_text())["deployments"]}
    assert pools == {WORK_POOL}
    worker = services["worker"]
    assert _option(_command(worker), "--pool") == WORK_POOL and _option(_command(worker), "--type") == "process"
    deploy = " ".join(_command(services["deploy"]))
    assert deploy == "forge stack configure"  # forge/stack.py configure_server: pool, deployments, results, zombies
    assert {"PREFECT_API_URL", "AWS_ENDPOINT_URL"} <= set(services["deploy"]["environment"])
    worker_env = services["worker"]["environment"]
    assert {k: worker_env.get(k) for k in WORKER_SETTINGS} == WORKER_SETTINGS
    # The worker's home is the image's, on a volume; flows run in the image's checkout (prefect.yaml's pull step).
    env = _dockerfile_env()
    assert worker["environment"]["FORGE_HOME"] == env["FORGE_HOME"]
    assert any(v.split(":")[1] == env["FORGE_HOME"] for v in worker["volumes"])
    workdir = [args for instr, args in _dockerfile() if instr == "WORKDIR"]
    assert workdir == [env["FORGE_ROOT"]]


def test_services_are_healthchecked_and_wait_for_what_they_need():
    services = _compose()["services"]
    for name, svc in services.items():
        one_shot = svc.get("restart") == "no"
        assert one_shot or "healthcheck" in svc, f"{name} runs on but has no healthcheck"
        for needed, how in (svc.get("depends_on") or {}).items():
            assert needed in services, f"{name} depends on a missing service {needed}"
            condition = how["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[needed], f"{name} waits for {needed} to be healthy: it cannot be"
            elif condition == "service_completed_successfully":
                assert services[needed].get("restart") == "no", f"{name} waits for {needed} to exit: it restarts"


def test_postgres_major_is_the_local_servers():
    tag = _image_ref(_compose()["services"]["postgres"]["image"])[1]
    major = int(tag.split(".")[0])
    try:
        import psycopg2

        conn = psycopg2.connect("postgresql://postgres@127.0.0.1:5432/postgres", connect_timeout=3)
    except Exception as err:  # noqa: BLE001 - no server, no driver, no access: nothing to compare with
        pytest.skip(f"no PostgreSQL answers on 127.0.0.1:5432 to compare with ({type(err).__name__})")
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW server_version_num")
            local = int(cur.fetchone()[0]) // 10000
    finally:
        conn.close()
    assert major == local, f"compose runs PostgreSQL {major}, the tests run against {local}"


# --- Kubernetes GPU pool ---

def _render(template: dict, **values) -> dict:
    """The Job a flow run gets, as Prefect's worker renders it: the variables' defaults, then ``values``."""
    from prefect.utilities.templating import apply_values

    defaults = {name: spec["default"] for name, spec in template["variables"]["properties"].items()
                if spec.get("default") is not None}
    return apply_values(template["job_configuration"], {**defaults, **values})


def test_gpu_job_template_is_one_prefect_accepts_and_uses_every_variable():
    from prefect.server.schemas.actions import WorkPoolCreate
    from prefect.utilities.templating import find_placeholders

    template = _job_template()
    WorkPoolCreate(name="forge-gpu", type="kubernetes", base_job_template=template)  # the server's own checks
    used = {p.name for p in find_placeholders(template["job_configuration"])}
    declared = set(template["variables"]["properties"])
    assert used == declared, f"declared, unused: {declared - used}; used, undeclared: {used - declared}"
    assert set(template["variables"]["required"]) <= declared


def test_gpu_job_requests_gpus_the_secret_and_the_checkpoint_claim():
    from prefect.workers.base import BaseJobConfiguration

    template = _job_template()
    job = _render(template, image="registry.example.com/forge:0.1.0-gpu")
    assert "{{" not in json.dumps(job), "a placeholder was left unrendered"
    pod = job["job_manifest"]["spec"]["template"]["spec"]
    # What Prefect's Kubernetes worker insists on (prefect_kubernetes.worker's manifest checks).
    assert (pod["restartPolicy"], pod["parallelism"], pod["completions"]) == ("Never", 1, 1)
    container = pod["containers"][0]
    assert container["name"] == "prefect-job"
    gpus = template["variables"]["properties"]["gpus"]["default"]
    assert gpus >= 1
    assert container["resources"]["requests"]["nvidia.com/gpu"] == container["resources"]["limits"]["nvidia.com/gpu"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
    # The command is Prefect's flow-run entry point (Forge has no accelerate launcher to put here).
    assert job["command"] == BaseJobConfiguration._base_flow_run_command() == "prefect flow-run execute"
    # Forge's home is the PVC, at the image's FORGE_HOME.
    pvc = yaml.safe_load((K8S / "checkpoints-pvc.yaml").read_text())
    assert pvc["kind"] == "PersistentVolumeClaim"
    claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == claim["name"])
    env = {e["name"]: e["value"] for e in container["env"]}
    assert mount["mountPath"] == env["FORGE_HOME"] == _dockerfile_env()["FORGE_HOME"]
    # Secrets come from the Secret only, and with the plain settings they give the run what forge stack's clients
    # get (PREFECT_API_URL comes from the worker); the README's `kubectl create secret` makes those keys.
    secret = container["envFrom"][0]["secretRef"]["name"]
    assert secret == template["variables"]["properties"]["secret_name"]["default"]
    secret_keys = set(REQUIRED) - {"FORGE_STACK_DATABASE_URL"} | {"FORGE_REVIEW_DB_URL"}
    assert not secret_keys & set(env)
    cfg = StackConfig(home=Path("/h"), root=Path("/r"), database_url="postgresql://u@h:1", db_prefix="forge_",
                      secrets={k: "" for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}, ports=PORTS)
    assert set(cfg.client_env()) - {"PREFECT_API_URL"} <= set(env) | secret_keys
    assert {k: env.get(k) for k in WORKER_SETTINGS} == WORKER_SETTINGS  # results in the bucket, heartbeats
    readme = (K8S / "README.md").read_text()
    create_secret = readme[readme.index(f"create secret generic {secret}"):].split("\n\n")[0]
    assert set(re.findall(r"--from-literal=(\w+)=", create_secret)) == secret_keys


def test_gpu_job_image_must_be_pinned():
    from prefect.utilities.schema_tools import ValidationError, validate

    schema = _job_template()["variables"]
    for image in ("registry.example.com/forge:0.1.0-gpu", "registry:5000/forge@sha256:" + "0" * 64):
        validate({"image": image}, schema, raise_on_error=True, ignore_required=True)
    for image in ("", "forge", "forge:latest", "registry:5000/forge"):
        with pytest.raises(ValidationError):
            validate({"image": image}, schema, raise_on_error=True, ignore_required=True)


def test_gpu_deployment_runs_the_recipe_on_the_gpu_profile_in_the_pool():
    from forge.config import profile_names

    spec = yaml.safe_load((K8S / "prefect.yaml").read_text())
    template = _job_template()
    readme = (K8S / "README.md").read_text()
    pool = re.search(r"prefect work-pool create (\S+) --type kubernetes --base-job-template "
                     r"infra/k8s/gpu-job-template.json", readme).group(1)
    nightly = next(d for d in yaml.safe_load((INFRA / "prefect.yaml").read_text())["deployments"]
                   if d["name"] == "recipe-nightly")
    (deployment,) = spec["deployments"]
    assert deployment["work_pool"]["name"] == pool != WORK_POOL
    assert deployment["entrypoint"] == nightly["entrypoint"]
    profile = deployment["parameters"]["profile"]
    assert profile in profile_names() and yaml.safe_load((REPO_ROOT / "configs" / f"{profile}.yaml").read_text())[
        "generation"]["backend"] == "vllm", f"{profile} is not the GPU profile"
    assert set(deployment["work_pool"]["job_variables"]) <= set(template["variables"]["properties"])
    (step,) = spec["pull"]
    assert step["prefect.deployments.steps.set_working_directory"]["directory"] == _dockerfile_env()["FORGE_ROOT"]


def test_gpu_constraints_pin_what_ci_tests():
    """constraints-gpu.txt (make setup-gpu) is resolved apart from constraints.txt (vLLM's pins decide it), but the
    libraries every stage's behaviour rests on must be the releases CI tests on the CPU, and vLLM the extra's pin."""
    gpu = (REPO_ROOT / "constraints-gpu.txt").read_text()
    for package in ("torch", "transformers", "trl", "accelerate", "datasets", "prefect", "mlflow", "dvc"):
        assert _pin(gpu, package) == _constraint(package), package
    extra = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    assert f"vllm=={_pin(gpu, 'vllm')}" in extra
    assert "-e " not in gpu and "file://" not in gpu  # constraints name releases, never a checkout
