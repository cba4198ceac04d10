"""The sandbox as a normal user: user + PID + mount + network namespaces of its own, reported strong, and the whole
attack suite (tests/code/test_attacks.py) passing there as it does as root.

Run as root (CI here), the suite is run again under uid 65534 — a real unprivileged uid on the host, not root in a
namespace — with a mount namespace that keeps the interpreter and the checkout readable where they sit under a
private /root (``setpriv`` drops every privilege; nothing is mapped back to root). Run as a normal user, the attack
suite itself already runs unprivileged and this module has nothing to add."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forge.workspace import REPO_ROOT

NOBODY = 65534
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="already unprivileged: tests/code/test_attacks.py runs as this user"),
    pytest.mark.skipif(not (shutil.which("unshare") and shutil.which("setpriv")), reason="needs util-linux's "
                       "unshare and setpriv to become a throw-away user"),
]

# In a private mount namespace (what it mounts is gone with it): /root stashed under a tmpfs on /mnt, an empty
# /root with the interpreter's prefix and the checkout bound back where they lie under it, a home for the user on
# that tmpfs, then setpriv to the uid with no capabilities and no groups.
AS_NOBODY = r"""
set -e
mount -t tmpfs -o mode=755 forge-stash /mnt
mkdir /mnt/root /mnt/home
mount --bind /root /mnt/root
mount -t tmpfs -o mode=755 forge-root /root
for path in "$PREFIX" "$CHECKOUT"; do
    case "$path" in /root/*) mkdir -p "$path"; mount --bind "/mnt/root/${path#/root/}" "$path";; esac
done
chown "$UID_" /mnt/home
export HOME=/mnt/home FORGE_HOME=/mnt/home/forge
exec setpriv --reuid="$UID_" --regid="$UID_" --clear-groups --inh-caps=-all --bounding-set=-all "$@"
"""


def as_nobody(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFIX": os.path.realpath(sys.base_prefix), "CHECKOUT": str(REPO_ROOT), "UID_": str(NOBODY),
           "PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", AS_NOBODY, "as-nobody",
                           *argv], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def test_sandbox_report_is_strong_for_a_normal_user():
    whoami = as_nobody(sys.executable, "-c", "import os; print(os.getuid(), os.geteuid(), "
                       "open('/proc/self/status').read().split('CapEff:')[1].split()[0])")
    assert whoami.stdout.split() == [str(NOBODY), str(NOBODY), "0000000000000000"], whoami.stderr
    done = as_nobody(str(Path(sys.executable).parent / "forge"), "sandbox", "report")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["running_as_root"] is False and report["user_namespace"] is True
    assert report["strong"] and report["network_isolation"] and report["filesystem_isolation"]
    assert report["pid_namespace"] and report["syscall_filter"]


def test_attack_suite_passes_as_a_normal_user():
    done = as_nobody(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                     "tests/code/test_attacks.py")
    tail = done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout and "skipped" not in done.stdout and "failed" not in done.stdout, tail
