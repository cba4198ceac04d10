"""DVC versioning of data/ in a scratch directory (not a git repo → dvc init --no-scm)."""

from __future__ import annotations

import shutil

import pytest

from forge.data.versioning import (
    DVCError,
    checkout_data,
    data_status_clean,
    ensure_dvc,
    read_data_md5,
    run_dvc,
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
