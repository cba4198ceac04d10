"""Plain loaders behind the training pages: mix manifests, the data's DVC history, registered versions and their
eval metrics — as pandas frames, so the pages only draw and the tests check numbers.

    frames = mix_frames(ws.mixes)                     # {mix name: frame per domain}
    history = dvc_history(ws.root)                    # one row per commit of data.dvc
    runs = data_runs(client)                          # one row per recipe `data` stage run (md5, tokens)
    versions = model_versions(client, "forge-policy")  # one row per version: aliases, lineage, metrics
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import yaml

from forge.data.mix import read_manifest

LINEAGE = {
    "forge.stage": "stage",
    "forge.parent_version": "parent",
    "forge.data_md5": "data_md5",
    "forge.git_commit": "git_commit",
    "forge.profile": "profile",
    "promotion.decision": "promotion",
}


def mix_frames(mixes_dir: Path) -> dict[str, pd.DataFrame]:
    """Per mix directory with a manifest: domain → target/actual share, tokens, target tokens, rows."""
    out = {}
    for path in sorted(Path(mixes_dir).glob("*/manifest.json")):
        manifest = read_manifest(path.parent)
        out[path.parent.name] = pd.DataFrame(
            [{"domain": d, "target share": s.target_share, "actual share": s.actual_share, "tokens": s.tokens,
              "target tokens": s.target_tokens, "rows": s.rows, "held-out rows": s.heldout_rows}
             for d, s in manifest.domains.items()]
        ).set_index("domain")
    return out


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def dvc_history(root: Path, target: str = "data") -> pd.DataFrame:
    """Every committed version of ``<target>.dvc``: commit, date, md5, size (bytes), files. Empty when the
    checkout is not a git repository or the file was never committed."""
    columns = ["commit", "date", "md5", "size", "nfiles", "subject"]
    try:
        log = _git(root, "log", "--format=%H%x1f%cI%x1f%s", "--", f"{target}.dvc")
    except (subprocess.CalledProcessError, FileNotFoundError):
        return pd.DataFrame(columns=columns)
    rows = []
    for line in log.splitlines():
        commit, date, subject = line.split("\x1f", 2)
        try:
            outs = (yaml.safe_load(_git(root, "show", f"{commit}:{target}.dvc")) or {}).get("outs") or [{}]
        except subprocess.CalledProcessError:  # the commit deleted the file
            continue
        out = outs[0]
        rows.append({"commit": commit[:10], "date": pd.Timestamp(date), "md5": out.get("md5"),
                     "size": out.get("size"), "nfiles": out.get("nfiles"), "subject": subject})
    return pd.DataFrame(rows, columns=columns).sort_values("date").reset_index(drop=True)


def data_runs(client) -> pd.DataFrame:
    """The recipe's ``data`` stage runs (flows/data.py): start time, DVC md5, mix name and tokens per domain."""
    from registry.tracking import DATA_MD5_TAG, EXPERIMENT, STAGE_TAG

    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        return pd.DataFrame()
    runs = client.search_runs([experiment.experiment_id], f"tags.`{STAGE_TAG}` = 'data'",
                              order_by=["attributes.start_time ASC"], max_results=1000)
    rows = []
    for run in runs:
        row = {"started": pd.Timestamp(run.info.start_time, unit="ms", tz="UTC"),
               "data_md5": run.data.tags.get(DATA_MD5_TAG), "mix": run.data.params.get("mix"),
               "run_id": run.info.run_id}
        row.update({k: v for k, v in run.data.metrics.items() if k.endswith(("_tokens", "_share"))})
        rows.append(row)
    return pd.DataFrame(rows)


def registered_models(client) -> list[str]:
    return sorted(m.name for m in client.search_registered_models())


def model_versions(client, model: str) -> pd.DataFrame:
    """One row per version of ``model``: aliases, lineage tags, promotion decision and ``metric.*`` values."""
    from registry.models import METRIC_TAG_PREFIX

    aliases: dict[str, list[str]] = {}
    for alias, version in client.get_registered_model(model).aliases.items():
        aliases.setdefault(str(version), []).append(alias)
    rows = []
    for mv in client.search_model_versions(f"name = '{model}'"):
        row = {"version": int(mv.version), "aliases": ", ".join(sorted(aliases.get(str(mv.version), []))),
               "created": pd.Timestamp(mv.creation_timestamp, unit="ms", tz="UTC"), "run_id": mv.run_id}
        row.update({short: mv.tags.get(tag) for tag, short in LINEAGE.items()})
        row.update({f"metric:{k[len(METRIC_TAG_PREFIX):]}": float(v) for k, v in mv.tags.items()
                    if k.startswith(METRIC_TAG_PREFIX)})
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).sort_values("version").reset_index(drop=True)


def all_versions(client) -> pd.DataFrame:
    """:func:`model_versions` of every registered model, with a ``model`` column."""
    frames = [model_versions(client, m).assign(model=m) for m in registered_models(client)]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def lineage_dot(versions: pd.DataFrame) -> str:
    """A Graphviz digraph parent → child over registered versions of all models (``forge.parent_version`` is
    ``<model>/<version>``). Node labels carry only model names, version numbers, stages and aliases."""

    def quote(text: str) -> str:
        return text.replace("\\", "/").replace('"', "'")

    lines = ["digraph lineage {", "rankdir=LR;", "node [shape=box, fontsize=10];"]
    for row in versions.itertuples():
        node = f"{row.model}/{row.version}"
        parts = [node, row.stage or ""] + ([f"[{row.aliases}]"] if row.aliases else [])
        label = "\\n".join(quote(p) for p in parts)  # \n is Graphviz's line break inside a label
        lines.append(f'"{quote(node)}" [label="{label}"];')
        if row.parent:
            lines.append(f'"{quote(str(row.parent))}" -> "{quote(node)}";')
    lines.append("}")
    return "\n".join(lines)
