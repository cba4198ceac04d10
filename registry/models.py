"""Checkpoints in the MLflow model registry: register, alias, load, and per-version eval metrics.

    from registry.models import register_checkpoint, set_alias, load_model
    version = register_checkpoint("path/to/ckpt", "forge-policy", run_id=run.info.run_id, tags=lineage)
    set_alias("forge-policy", "candidate", version)
    model, tokenizer = load_model("models:/forge-policy@champion")

A checkpoint is a directory written by ``save_pretrained`` (model + tokenizer). It is logged with MLflow's
transformers flavour, so ``models:/<name>@<alias>`` also works with ``mlflow.transformers.load_model``; Forge
itself loads the files back with transformers' ``from_pretrained``. Metrics live on the version as
``metric.<name>`` tags: versions are compared by the promotion gate (``registry.promotion``), which is the only
other place aliases move.
"""

from __future__ import annotations

from pathlib import Path

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from registry.tracking import GIT_COMMIT_TAG, git_commit

METRIC_TAG_PREFIX = "metric."
TASK = "text-generation"


def _client(client: MlflowClient | None) -> MlflowClient:
    return client or MlflowClient()


def _requirements() -> list[str]:
    # Given explicitly: MLflow's inference of requirements imports torchvision, which we do not install.
    import tokenizers
    import torch
    import transformers

    return [
        f"torch=={torch.__version__.split('+')[0]}",
        f"transformers=={transformers.__version__}",
        f"tokenizers=={tokenizers.__version__}",
    ]


def register_checkpoint(
    ckpt_dir: str | Path,
    model_name: str,
    *,
    run_id: str,
    tags: dict[str, str] | None = None,
    metrics: dict[str, float] | None = None,
) -> str:
    """Log the checkpoint directory to run ``run_id`` and register it as a new version of ``model_name``.

    ``tags`` (the lineage tags of ``registry.tracking``) are set on the version; the git commit is added when
    missing; ``metrics`` become the version's ``metric.*`` tags (:func:`set_version_metrics`). Returns the version
    number (a string, as MLflow's API takes it).
    """
    ckpt = Path(ckpt_dir)
    missing = [f for f in ("config.json", "tokenizer_config.json") if not (ckpt / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{ckpt}: not a save_pretrained checkpoint with its tokenizer (missing {missing})")
    version_tags = {k: str(v) for k, v in (tags or {}).items()}
    if GIT_COMMIT_TAG not in version_tags:  # the recipe's lineage carries it: no second read per version
        version_tags[GIT_COMMIT_TAG] = git_commit()
    active = mlflow.active_run()
    if active is not None and active.info.run_id == run_id:
        info = _log(ckpt)
    else:
        with mlflow.start_run(run_id=run_id, nested=active is not None):
            info = _log(ckpt)
    # Returns once the version is READY (immediately on SQLite; it polls a server's asynchronous registration).
    mv = mlflow.register_model(info.model_uri, model_name, tags=version_tags)
    if metrics:
        set_version_metrics(model_name, mv.version, metrics)
    return str(mv.version)


def _log(ckpt: Path):
    return mlflow.transformers.log_model(
        str(ckpt), name="model", task=TASK, pip_requirements=_requirements(), save_pretrained=True
    )


def set_alias(name: str, alias: str, version: str | int, *, client: MlflowClient | None = None) -> None:
    _client(client).set_registered_model_alias(name, alias, str(version))


def get_alias_version(name: str, alias: str, *, client: MlflowClient | None = None) -> str | None:
    """The version ``alias`` points to, or None when the alias (or the model) does not exist."""
    try:
        return str(_client(client).get_model_version_by_alias(name, alias).version)
    except MlflowException as err:
        if err.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            return None
        raise


def model_uri(uri_or_name: str, alias: str | None = None) -> str:
    """``models:/…``/``runs:/…`` URIs pass through; a bare name becomes ``models:/<name>@<alias or champion>``."""
    if "://" in uri_or_name or uri_or_name.startswith(("models:/", "runs:/")):
        if alias:
            raise ValueError(f"give either a URI ({uri_or_name}) or a name with an alias, not both")
        return uri_or_name
    return f"models:/{uri_or_name}@{alias or 'champion'}"


def _checkpoint_dir(root: Path) -> Path:
    """Where config.json lies in downloaded artifacts: ``model/`` for the transformers flavour, else the root."""
    for candidate in (root / "model", root):
        if (candidate / "config.json").is_file():
            return candidate
    found = sorted(root.rglob("config.json"))
    if not found:
        raise FileNotFoundError(f"{root}: no config.json in the downloaded model artifacts")
    return found[0].parent


def download_checkpoint(uri_or_name: str | Path, alias: str | None = None, *,
                        dst_path: str | Path | None = None) -> Path:
    """The local ``save_pretrained`` folder behind a registry URI, a model name (+ alias) or a local folder."""
    local = Path(uri_or_name)
    if local.is_dir():
        return _checkpoint_dir(local)
    uri = model_uri(str(uri_or_name), alias)
    root = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dst_path) if dst_path else None)
    return _checkpoint_dir(Path(root))


def load_model(uri_or_name: str | Path, alias: str | None = None, *, dst_path: str | Path | None = None):
    """Load ``(model, tokenizer)`` with transformers from a registry URI, a model name (+ alias, default
    ``champion``) or a local checkpoint directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = download_checkpoint(uri_or_name, alias, dst_path=dst_path)
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    model.eval()
    return model, tokenizer


def set_version_metrics(
    name: str, version: str | int, metrics: dict[str, float], *, client: MlflowClient | None = None
) -> None:
    """Store metrics on a model version as ``metric.<name>`` tags; the promotion gate compares those its profile
    declares (``promotion.metrics``) and ignores the rest."""
    c = _client(client)
    for key, value in metrics.items():
        c.set_model_version_tag(name, str(version), f"{METRIC_TAG_PREFIX}{key}", repr(float(value)))


def version_metrics(name: str, version: str | int, *, client: MlflowClient | None = None) -> dict[str, float]:
    tags = _client(client).get_model_version(name, str(version)).tags
    return {k[len(METRIC_TAG_PREFIX) :]: float(v) for k, v in tags.items() if k.startswith(METRIC_TAG_PREFIX)}
