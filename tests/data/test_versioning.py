"""DVC versioning of data/ in a scratch directory (not a git repo → dvc init --no-scm)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forge.data.versioning import (
    DVCError,
    built_on,
    checkout_data,
    cpu_kind,
    data_status_clean,
    ensure_dvc,
    read_data_md5,
    run_dvc,
    same_bits,
    version_data,
)


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    (root / "data" / "pools").mkdir(parents=True)
    (root / "data" / "pools" / "stem.jsonl").write_text('{"a": 1}\n')
    (root / "data" / "notes.txt").write_text("v1\n")
    ensure_dvc(root, tmp_path / "remote")
    return root


def test_version_then_change_is_detected(project, tmp_path):
    config = (project / ".dvc" / "config").read_text()
    assert "verify = true" in config and "autostage = false" in config and "remote = local" in config
    md5 = version_data(project)
    assert md5.endswith(".dir") and md5 == read_data_md5(project)
    assert data_status_clean(project)
    assert any((tmp_path / "remote").rglob("*"))  # objects were pushed
    (project / "data" / "notes.txt").write_text("v2\n")
    assert not data_status_clean(project)
    assert version_data(project) != md5 and data_status_clean(project)


def test_a_version_records_the_cpu_kind_that_built_it_outside_its_md5(project):
    md5 = version_data(project)
    dvc_file = project / "data.dvc"
    assert built_on(dvc_file.read_text()) == cpu_kind()
    # Another machine's record is replaced by this one's; the md5 does not move and the status stays clean.
    dvc_file.write_text(dvc_file.read_text().replace(cpu_kind(), "x86_64 AVX2-elsewhere"))
    assert version_data(project) == md5 and built_on(dvc_file.read_text()) == cpu_kind()
    assert data_status_clean(project)


def test_only_kinds_measured_to_build_the_same_data_count_as_one():
    zen4, zen5 = "x86_64 AVX512 AuthenticAMD 25/17 AVX512-BF16", "x86_64 AVX512 AuthenticAMD 26/2 AVX512-BF16"
    assert same_bits(zen4, zen5) and same_bits(zen5, zen4) and same_bits(cpu_kind(), cpu_kind())
    assert not same_bits(zen4, "x86_64 AVX512 GenuineIntel 6/167 AMX")
    assert not same_bits("x86_64 AVX512 GenuineIntel 6/207 AMX", "x86_64 AVX512 GenuineIntel 6/207 AVX512-BF16")


def test_a_failing_push_is_named_and_the_add_before_it_kept(project, tmp_path):
    """version_data adds then pushes (DVC's Python API, in this process): a push that fails raises DVCError naming
    `dvc push`, with DVC's reason; the add before it stands, and versioning again once the remote is back works."""
    remote = tmp_path / "remote"
    shutil.rmtree(remote)
    remote.write_text("not a folder\n")  # the remote cannot take objects
    with pytest.raises(DVCError, match=r"`dvc push data.dvc` failed in .*proj:\n"):
        version_data(project)
    assert read_data_md5(project).endswith(".dir")  # data.dvc was written by the add
    remote.unlink()
    remote.mkdir()
    md5 = version_data(project)
    assert md5 == read_data_md5(project) and any(remote.rglob("*")) and data_status_clean(project)


def test_corrupted_remote_object_is_refused_on_pull(project, tmp_path):
    version_data(project)
    target = next(p for p in (tmp_path / "remote").rglob("*") if p.is_file() and not p.name.endswith(".dir"))
    target.chmod(0o644)
    target.write_text("corrupted\n")
    shutil.rmtree(project / ".dvc" / "cache")
    shutil.rmtree(project / "data")
    with pytest.raises(DVCError, match="Checkout failed"):
        run_dvc(project, "pull")
    # verify = true: the corrupted object never reaches the workspace
    assert not (project / "data" / "notes.txt").exists() or (project / "data" / "notes.txt").read_text() == "v1\n"
    assert not (project / "data" / "pools" / "stem.jsonl").exists() or \
        (project / "data" / "pools" / "stem.jsonl").read_text() == '{"a": 1}\n'


def test_moved_home_goes_to_config_local(tmp_path):
    root = tmp_path / "proj"
    (root / ".dvc").mkdir(parents=True)
    (root / ".dvc" / "config").write_text("[core]\n    remote = local\n['remote \"local\"']\n"
                                          "    url = ../.forge/dvc-remote\n    verify = true\n")
    run_dvc(root, "init", "--no-scm", "--force")
    (root / ".dvc" / "config").write_text("[core]\n    no_scm = True\n    remote = local\n['remote \"local\"']\n"
                                          "    url = ../.forge/dvc-remote\n    verify = true\n")
    committed = (root / ".dvc" / "config").read_text()
    ensure_dvc(root, tmp_path / "elsewhere")
    assert "../.forge/dvc-remote" in (root / ".dvc" / "config").read_text()
    local = (root / ".dvc" / "config.local").read_text()
    assert str(tmp_path / "elsewhere") in local and "verify = true" in local
    assert "remote = local" in committed
    with pytest.raises(DVCError, match="nothing to version"):
        version_data(root)


def test_checkout_restores_a_version_and_keeps_what_was_there(project, tmp_path):
    v1 = version_data(project)
    (project / "data" / "notes.txt").write_text("v2, never versioned\n")  # e.g. another run rewrote data/
    kept = checkout_data(project, v1)
    assert (project / "data" / "notes.txt").read_text() == "v1\n" and read_data_md5(project) == v1
    assert data_status_clean(project)
    assert kept is not None and kept != v1  # the unversioned change was versioned and pushed first...
    assert checkout_data(project, kept.removesuffix(".dir")) is None  # ...and comes back by its md5 alone
    assert (project / "data" / "notes.txt").read_text() == "v2, never versioned\n"
    assert checkout_data(project, kept) is None  # already there: nothing to do


def test_checkout_of_a_version_the_remote_lacks_fails_and_changes_nothing(project):
    v1 = version_data(project)
    before = (project / "data.dvc").read_text()
    with pytest.raises(DVCError, match="0123456789abcdef0123456789abcdef.dir could not be restored"):
        checkout_data(project, "0123456789abcdef0123456789abcdef")
    assert (project / "data.dvc").read_text() == before and read_data_md5(project) == v1
    assert (project / "data" / "notes.txt").read_text() == "v1\n"
    with pytest.raises(DVCError, match="not a data version"):
        checkout_data(project, "models-policy-3")


@pytest.fixture
def bucket(monkeypatch):
    """An S3-compatible server (moto's, on loopback) with the bucket ``forge``; its endpoint and keys in the env."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "forge-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-in-any-tracked-file")
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="forge")
    yield s3
    server.stop()


def _forge_data(root, action: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FORGE_ROOT": str(root), "FORGE_HOME": str(root / ".forge"),
           "FORGE_DVC_REMOTE": "s3://forge/dvc"}
    return subprocess.run([str(Path(sys.executable).parent / "forge"), "data", action], env=env, cwd=root,
                          capture_output=True, text=True, check=False)


def test_s3_remote_keeps_versions_and_pull_names_a_missing_or_corrupted_object(bucket, tmp_path, monkeypatch):
    root = tmp_path / "proj"
    (root / "data").mkdir(parents=True)
    for name, text in (("a.txt", "alpha\n"), ("b.txt", "beta\n"), ("c.txt", "gamma\n")):
        (root / "data" / name).write_text(text)
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    with pytest.raises(DVCError, match="needs AWS_ENDPOINT_URL"):  # no endpoint: refused, named
        ensure_dvc(root, "s3://forge/dvc")
    monkeypatch.setenv("AWS_ENDPOINT_URL", bucket.meta.endpoint_url)
    ensure_dvc(root, "s3://forge/dvc")
    local, committed = (root / ".dvc" / "config.local").read_text(), (root / ".dvc" / "config").read_text()
    assert "s3://forge/dvc" in local and "not-in-any-tracked-file" in local and "verify = true" in local
    assert "not-in-any-tracked-file" not in committed and "s3" not in committed

    md5 = version_data(root)
    keys = {o["Key"] for o in bucket.list_objects_v2(Bucket="forge", Prefix="dvc/")["Contents"]}
    listing = {e["relpath"]: e["md5"] for e in json.loads(
        bucket.get_object(Bucket="forge", Key=f"dvc/files/md5/{md5[:2]}/{md5[2:]}")["Body"].read())}
    key = {rel: f"dvc/files/md5/{m[:2]}/{m[2:]}" for rel, m in listing.items()}
    assert set(key.values()) <= keys and len(listing) == 3

    def fresh() -> None:  # a new machine: no cache, no data
        shutil.rmtree(root / ".dvc" / "cache", ignore_errors=True)
        shutil.rmtree(root / "data", ignore_errors=True)

    fresh()
    pulled = _forge_data(root, "pull")
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert (root / "data" / "b.txt").read_text() == "beta\n" and data_status_clean(root)

    bucket.put_object(Bucket="forge", Key=key["b.txt"], Body=b"tampered\n")
    fresh()
    corrupted = _forge_data(root, "pull")
    assert corrupted.returncode == 1 and f"data/b.txt (md5 {listing['b.txt']})" in corrupted.stdout
    assert not (root / "data" / "b.txt").exists() or (root / "data" / "b.txt").read_text() == "beta\n"

    bucket.delete_object(Bucket="forge", Key=key["c.txt"])
    fresh()
    missing = _forge_data(root, "pull")
    assert missing.returncode == 1 and listing["c.txt"] in missing.stdout, missing.stdout

    # The good objects were never lost: put the two back as they were and everything comes home.
    bucket.put_object(Bucket="forge", Key=key["b.txt"], Body=b"beta\n")
    bucket.put_object(Bucket="forge", Key=key["c.txt"], Body=b"gamma\n")
    fresh()
    assert _forge_data(root, "pull").returncode == 0 and (root / "data" / "c.txt").read_text() == "gamma\n"
    pushed = _forge_data(root, "push")
    assert pushed.returncode == 0 and "s3://forge/dvc" in pushed.stdout


def test_ensure_dvc_changes_nothing_when_configured_and_fixes_what_differs(project, tmp_path):
    """ensure_dvc runs before every versioning: it reads the config (DVC's own loader) and runs no dvc command when
    nothing would change, but a different remote, or verify turned off, is still put right."""
    from forge.data.versioning import _configured

    config = project / ".dvc" / "config"
    assert _configured(project, tmp_path / "remote")
    before = config.read_text()
    ensure_dvc(project, tmp_path / "remote")
    assert config.read_text() == before
    assert not _configured(project, tmp_path / "elsewhere")
    ensure_dvc(project, tmp_path / "elsewhere")  # another home: the default remote moves there
    version_data(project)
    assert any((tmp_path / "elsewhere").rglob("*")) and _configured(project, tmp_path / "elsewhere")
    run_dvc(project, "remote", "modify", "--local", "local", "verify", "false")  # where ensure_dvc put the new remote
    assert not _configured(project, tmp_path / "elsewhere")
    ensure_dvc(project, tmp_path / "elsewhere")
    assert _configured(project, tmp_path / "elsewhere") and "verify = true" in (config.parent / "config.local").read_text()


def test_no_directory_of_the_dvc_site_cache_is_writable_by_other_users(project):
    """DVC makes its site cache's repo/ world-writable (it expects one cache shared by a machine's users); in
    Forge's home another user could swap in a state database there (forge/workspace.py)."""
    version_data(project)
    site = Path(os.environ["DVC_SITE_CACHE_DIR"])
    dirs = [site, *(p for p in site.rglob("*") if p.is_dir())]
    assert len(dirs) > 2  # DVC wrote its per-project state here
    assert [str(p) for p in dirs if p.stat().st_mode & 0o022] == []


def test_a_world_writable_site_cache_an_earlier_run_left_is_closed(tmp_path, monkeypatch):
    from forge.workspace import Workspace, configure_environment

    home = tmp_path / "home"
    (home / "dvc-site-cache" / "repo").mkdir(parents=True)
    for path in (home / "dvc-site-cache", home / "dvc-site-cache" / "repo"):
        path.chmod(0o777)
    monkeypatch.delenv("DVC_SITE_CACHE_DIR")
    configure_environment(Workspace(root=tmp_path, home=home))
    assert os.environ["DVC_SITE_CACHE_DIR"] == str(home / "dvc-site-cache")
    for path in (home / "dvc-site-cache", home / "dvc-site-cache" / "repo"):
        assert path.stat().st_mode & 0o777 == 0o700
