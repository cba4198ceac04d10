"""Lineage of a registered version: its MLflow run and lineage tags, the parent chain back to the base model, and
the data it was trained on (DVC snapshot, mix manifest, corpora and their licences).

    from registry.lineage import trace
    report = trace(Workspace.from_env(), "models:/forge-policy@champion")
    report["chain"][-1]["ref"]          # 'forge-base/1': the base model the chain starts from
    report["data"][0]["corpora"]        # [{"source": "gsm8k/train.jsonl.gz", "rows": 812, "licence": "MIT ..."}]

The tags are those of ``registry.tracking`` (docs/architecture.md, "registry"): every stage's run and registered
version carries them, and ``forge.parent_version`` names the version a stage started from. A data md5 is DVC's hash
of ``data/`` (``data.dvc``) or ``rl-data/`` (``rl-data.dvc``); the snapshot is read from the DVC cache or the local
remote under the home (docs/stack.md, "DVC 3.67"), else from the checkout when its ``.dvc`` file names that md5.
The ``data`` stage's run also holds the mix's ``manifest.json``. Licences come from the summary table of
``corpora/PROVENANCE.md``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import mlflow
import yaml
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from forge.workspace import Workspace
from registry.tracking import (
    DATA_MD5_TAG,
    EXPERIMENT,
    FLOW_RUN_ID_TAG,
    GIT_COMMIT_TAG,
    PARENT_VERSION_TAG,
    PREFECT_URL_TAG,
    PROFILE_TAG,
    RL_DATA_MD5_TAG,
    STAGE_TAG,
    init_mlflow,
)

FIELDS = {STAGE_TAG: "stage", GIT_COMMIT_TAG: "git_commit", PROFILE_TAG: "profile", FLOW_RUN_ID_TAG: "flow_run_id",
          PREFECT_URL_TAG: "prefect_url",
          DATA_MD5_TAG: "data_md5", RL_DATA_MD5_TAG: "rl_data_md5", PARENT_VERSION_TAG: "parent"}
DATA_TARGETS = {DATA_MD5_TAG: "data", RL_DATA_MD5_TAG: "rl-data"}  # tag → the DVC-tracked folder it hashes
MAX_CHAIN = 100  # a parent chain longer than this is a cycle in the tags


class LineageError(LookupError):
    """The URI names no registered version, or the workspace has no registry; the message names the URI."""


def parse_ref(uri: str) -> tuple[str, str | None, str | None]:
    """``models:/<name>/<version>``, ``models:/<name>@<alias>`` or a parent tag's ``<name>/<version>`` as
    ``(name, version, alias)``."""
    body = uri.removeprefix("models:/")
    name, sep, alias = body.partition("@")
    if sep:
        return name, None, alias
    name, sep, version = body.rpartition("/")
    if not sep or not name or not version:
        raise LineageError(f"{uri}: not a model version URI (models:/<name>/<version> or models:/<name>@<alias>)")
    return name, version, None


def _version(client: MlflowClient, uri: str):
    name, version, alias = parse_ref(uri)
    try:
        if alias:
            return client.get_model_version_by_alias(name, alias)
        return client.get_model_version(name, version)
    except MlflowException as err:
        raise LineageError(f"{uri}: no such registered version ({err.message})") from None


def _node(client: MlflowClient, mv) -> dict:
    """One version: its run's lineage tags, overridden by the version's own, and its ``metric.*`` tags."""
    tags: dict[str, str] = {}
    run_name = None
    if mv.run_id:
        try:
            run = client.get_run(mv.run_id)
            tags, run_name = dict(run.data.tags), run.info.run_name
        except MlflowException:
            pass
    tags |= mv.tags
    node = {"ref": f"{mv.name}/{mv.version}", "registered": True, "aliases": sorted(mv.aliases or []),
            "run_id": mv.run_id, "run_name": run_name}
    node |= {field: tags.get(tag) or None for tag, field in FIELDS.items()}
    node["metrics"] = {k.removeprefix("metric."): float(v) for k, v in mv.tags.items() if k.startswith("metric.")}
    return node


def data_version(client: MlflowClient, uri: str, target: str = "data") -> str:
    """The md5 of ``target`` (``data`` or ``rl-data``) the version ``uri`` was trained on (its lineage tag)."""
    tag = next(tag for tag, name in DATA_TARGETS.items() if name == target)
    md5 = _node(client, _version(client, uri))[FIELDS[tag]]
    if not md5:
        raise LineageError(f"{uri}: no {tag} tag: the version does not say which {target}/ it was trained on")
    return md5


def _chain(client: MlflowClient, uri: str) -> list[dict]:
    """The version, its parent, the parent's parent... down to a version without a parent (the base model), or to
    a parent the registry does not hold (a hub checkpoint: ``forge-base/hub``)."""
    chain = [_node(client, _version(client, uri))]
    while (parent := chain[-1]["parent"]) and len(chain) < MAX_CHAIN:
        if any(n["ref"] == parent for n in chain):
            raise LineageError(f"{uri}: the parent tags loop back to {parent}")
        try:
            chain.append(_node(client, _version(client, parent)))
        except LineageError:
            chain.append({"ref": parent, "registered": False, "parent": None})
    return chain


def _licences(corpora: Path) -> dict[str, str]:
    """Folder → licence, from the summary table of corpora/PROVENANCE.md (its ``upstream licence`` column)."""
    path = corpora / "PROVENANCE.md"
    out: dict[str, str] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3:
            for folder in re.findall(r"`([\w.-]+)/`", cells[1]):
                out[folder] = cells[2]
    return out


def _store_reader(ws: Workspace, md5: str, target: str):
    """``(where, read(relpath) -> bytes | None, relpaths)`` for the snapshot ``md5`` of ``target``, or None."""
    if md5.endswith(".dir"):
        for where in (ws.root / ".dvc" / "cache", ws.dvc_remote):
            objects = where / "files" / "md5"
            listing = objects / md5[:2] / md5[2:]
            if listing.is_file():
                entries = {e["relpath"]: e["md5"] for e in json.loads(listing.read_text())}

                def read(rel: str, entries=entries, objects=objects) -> bytes | None:
                    obj = objects / entries[rel][:2] / entries[rel][2:] if rel in entries else None
                    return obj.read_bytes() if obj is not None and obj.is_file() else None

                return str(where), read, sorted(entries)
    dvc_file, folder = ws.root / f"{target}.dvc", ws.root / target
    outs = ((yaml.safe_load(dvc_file.read_text()) or {}).get("outs") if dvc_file.exists() else None) or [{}]
    if outs[0].get("md5") == md5 and folder.is_dir():
        rels = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        return str(folder), lambda rel: (folder / rel).read_bytes() if (folder / rel).is_file() else None, rels
    return None


def _data_run(client: MlflowClient, md5: str):
    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        return None
    runs = client.search_runs([experiment.experiment_id], max_results=1, order_by=["attributes.start_time DESC"],
                              filter_string=f"tags.`{STAGE_TAG}` = 'data' AND tags.`{DATA_MD5_TAG}` = '{md5}'")
    return runs[0] if runs else None


def _data(client: MlflowClient, ws: Workspace, tag: str, md5: str) -> dict:
    """What a data md5 holds: where the snapshot lies, the ``data`` run and mix manifest, the corpora and licences."""
    target = DATA_TARGETS[tag]
    node = {"md5": md5, "dvc_file": f"{target}.dvc", "snapshot": None, "data_run_id": None, "mixes": []}
    store = _store_reader(ws, md5, target)
    manifests: dict[str, dict] = {}
    run = _data_run(client, md5) if tag == DATA_MD5_TAG else None
    if run is not None:
        node["data_run_id"] = run.info.run_id
        try:
            manifest = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/manifest.json")
            manifests[manifest.get("name") or run.data.params.get("mix", "mix")] = manifest
        except (MlflowException, OSError, ValueError):
            pass
    sources: dict[str, Counter] = {}
    if store is not None:
        node["snapshot"], read, rels = store
        for rel in rels:
            parts = rel.split("/")
            if len(parts) == 3 and parts[0] == "mixes" and parts[2] == "manifest.json" and parts[1] not in manifests:
                manifests[parts[1]] = json.loads(read(rel) or b"{}")
            if len(parts) == 3 and parts[0] == "mixes" and parts[2].startswith("train-") and parts[2].endswith(".jsonl"):
                counts = sources.setdefault(parts[1], Counter())
                for line in (read(rel) or b"").decode().splitlines():
                    if line.strip():
                        counts[json.loads(line).get("source") or "?"] += 1
    licences = _licences(ws.corpora)
    for name in sorted(set(manifests) | set(sources)):
        manifest = manifests.get(name) or {}
        domains = {d: {k: row.get(k) for k in ("rows", "tokens", "actual_share", "target_share")}
                   for d, row in (manifest.get("domains") or {}).items()}
        corpora = [{"source": src, "rows": n, "licence": licences.get(src.split("/")[0])}
                   for src, n in sorted(sources.get(name, Counter()).items())]
        node["mixes"].append({"name": name, "total_tokens": manifest.get("total_tokens"), "domains": domains,
                              "corpora": corpora})
    return node


def trace(ws: Workspace, uri: str, *, client: MlflowClient | None = None) -> dict:
    """The lineage of ``uri`` (``models:/<name>/<version>`` or ``models:/<name>@<alias>``) as a JSON-able dict:
    ``chain`` (the version first, the base model last) and ``data`` (one entry per distinct data md5 of the chain).

    Raises :class:`LineageError` when the workspace has no registry or the URI names no version.
    """
    if client is None:
        if not (ws.mlflow_dir / "mlflow.db").exists():
            raise LineageError(f"{uri}: no model registry in this workspace ({ws.mlflow_dir}); run `forge run` first")
        client = init_mlflow(ws)
    chain = _chain(client, uri)
    seen = dict.fromkeys((tag, n[FIELDS[tag]]) for n in chain for tag in DATA_TARGETS if n.get(FIELDS[tag]))
    return {"uri": uri, "chain": chain, "data": [_data(client, ws, tag, md5) for tag, md5 in seen]}
