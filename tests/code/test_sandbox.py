"""The sandbox confines what it runs: limits, scratch dir, empty env, no network, no root, capped output.

.venv/bin/pytest tests/code/test_sandbox.py -q
"""

import os
import re
import socket
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from forge.code._jail import get_jail
from forge.code.sandbox import isolation_report, run_python

AS_ROOT = os.geteuid() == 0
REPORT = isolation_report()
needs_root = pytest.mark.skipif(not AS_ROOT, reason="uid isolation is only done when we run as root")
needs_netns = pytest.mark.skipif(not REPORT.network_isolation, reason="host allows no network namespace")


def run(source: str, **kw):
    kw.setdefault("timeout_s", 5.0)
    kw.setdefault("memory_mb", 256)
    kw.setdefault("allow_weak_isolation", not REPORT.strong)
    return run_python(textwrap.dedent(source), **kw)


def sandbox_processes() -> list[int]:
    """Host pids of live processes running as a uid this process's sandbox leased (the code sees only
    namespaced pids; other Forge processes on the machine draw uids from the same range)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        uid = int(re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE).group(1))
        state = re.search(r"^State:\s+(\w)", status, re.MULTILINE).group(1)
        if uid in get_jail().used_uids and state not in "ZX":
            found.append(int(entry.name))
    return found


def _gone(within_s: float = 3.0) -> bool:
    """True once no process of any sandbox uid is left (as root; without root there is no way to tell)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not AS_ROOT or not sandbox_processes():
            return True
        time.sleep(0.05)
    return False


def test_host_isolation_is_strong_when_root():
    if AS_ROOT:
        assert REPORT.strong and REPORT.filesystem_isolation, REPORT.notes


def test_runs_code_with_stdin_and_reports_ok():
    result = run("import sys\nprint(sum(map(int, sys.stdin.read().split())))", stdin="1 2 3\n")
    assert (result.status, result.exit_code, result.stdout) == ("ok", 0, "6\n")


def test_exception_is_a_runtime_error_with_traceback():
    result = run("def f():\n    raise ValueError('boom')\nf()")
    assert result.status == "runtime_error" and result.exit_code == 1
    assert "ValueError: boom" in result.stderr and "main.py" in result.stderr


def test_busy_loop_times_out():
    result = run("while True:\n    pass", timeout_s=1.0)
    assert result.status == "timeout"  # the loop never ends: only the deadline stops it
    assert result.wall_s > 0.9  # and not before it


def test_sleeping_child_times_out_on_wall_clock():
    # Sleeping uses no CPU, so only the wall-clock deadline can stop it.
    start = time.monotonic()
    result = run("import time\ntime.sleep(60)", timeout_s=1.0)
    # Stopped, not slept out: a bound at half the sleep holds on any machine, however loaded.
    assert result.status == "timeout" and time.monotonic() - start < 30


def test_double_forked_grandchild_in_the_group_is_killed():
    result = run(
        """
        import os, sys, time
        if os.fork() == 0:
            if os.fork() == 0:
                print(os.getpid(), flush=True)
                time.sleep(600)
            os._exit(0)
        time.sleep(600)
        """,
        timeout_s=1.0,
    )
    assert result.status == "timeout"
    assert result.stdout.split(), result.stderr
    assert _gone()


@needs_root
def test_daemon_that_left_the_group_is_killed_after_the_run():
    # setsid() leaves the process group and closing stdio lets the run end "ok": only the per-run uid finds it.
    result = run(
        """
        import os, time
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(w, str(os.getpid()).encode())
                os.close(w)
                for fd in (0, 1, 2):
                    os.close(fd)
                time.sleep(600)
            os._exit(0)
        os.close(w)
        print(os.read(r, 32).decode())
        """
    )
    assert result.status == "ok", result.stderr
    assert result.stdout.strip()
    assert _gone()


def test_memory_bomb_hits_the_memory_limit():
    result = run("blocks = []\nwhile True:\n    blocks.append(bytearray(10**7))", memory_mb=128)
    assert result.status == "memory_limit", (result.status, result.stderr[-300:])


def test_environment_is_empty(monkeypatch):
    monkeypatch.setenv("FORGE_TEST_SECRET", "s3cr3t-token")
    result = run("import os\nprint(sorted(os.environ.items()))")
    assert result.status == "ok"
    assert "s3cr3t" not in result.stdout
    # Python itself only adds LC_CTYPE (PEP 538 locale coercion of the empty C locale).
    assert set(eval(result.stdout)) <= {("LC_CTYPE", "C.UTF-8")}


def test_cwd_is_a_fresh_scratch_dir_and_writes_outside_fail():
    outside = [os.getcwd(), str(Path.home()), tempfile.gettempdir(), "/var/tmp", "/dev/shm", "/etc"]
    result = run(
        f"""
        import os
        open("mine.txt", "w").write("ok")
        print(os.getcwd())
        print(sorted(os.listdir(".")))
        for d in {outside!r}:
            try:
                open(os.path.join(d, "forge-sandbox-escape.txt"), "w").write("escaped")
                print("WROTE", d)
            except OSError:
                pass
        """
    )
    assert result.status == "ok", result.stderr
    cwd, listing = result.stdout.splitlines()[:2]
    assert "WROTE" not in result.stdout
    assert cwd != os.getcwd() and eval(listing) == ["main.py", "mine.txt"]
    # With a PID namespace the scratch dir is the run's own tmpfs: nothing of it reaches the host's disk.
    assert not Path(cwd).exists() or not any(Path(cwd).iterdir()), "scratch files must not outlive the run"
    assert not any(Path(d, "forge-sandbox-escape.txt").exists() for d in outside)


def test_scratch_dirs_are_not_shared_between_runs():
    first = run("import os\nopen('left-behind', 'w').write('x')\nprint(os.listdir('.'))")
    second = run("import os\nprint(os.listdir('.'))")
    assert "left-behind" in first.stdout and "left-behind" not in second.stdout


@needs_netns
def test_network_is_unreachable_even_on_loopback():
    # A server of ours on 127.0.0.1 (where Prefect's and MLflow's servers listen) must be out of reach.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        result = run(
            f"""
            import socket
            for addr in [("127.0.0.1", {port}), ("1.1.1.1", 53), ("10.0.0.1", 80)]:
                s = socket.socket()
                s.settimeout(2)
                try:
                    s.connect(addr)
                    print("CONNECTED", addr)
                except OSError as err:
                    print("refused", addr, err.errno)
            """
        )
    finally:
        server.close()
    assert result.status == "ok", result.stderr
    assert "CONNECTED" not in result.stdout and result.stdout.count("refused") == 3


@needs_root
def test_runs_as_an_unprivileged_uid():
    result = run("import os\nprint(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())")
    uid, euid, gid, groups = result.stdout.split(maxsplit=3)
    assert int(uid) != 0 and int(euid) != 0 and int(gid) != 0 and groups.strip() == "[]"


@needs_root
def test_process_limit_stops_a_fork_bomb():
    result = run(
        """
        import os, time
        made = failed = 0
        for _ in range(100):
            try:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                made += 1
            except OSError:
                failed += 1
        print(made, failed)
        """
    )
    made, failed = map(int, result.stdout.split())
    assert failed > 0 and made < 40


def test_output_flood_is_capped():
    result = run("import sys\nwhile True:\n    sys.stdout.write('x' * 4096)", max_output_bytes=10_000)
    assert result.status == "output_limit"
    assert len(result.stdout) == 10_000
    result = run("import sys\nsys.stderr.write('e' * 10**6)", max_output_bytes=5_000)
    assert result.status == "output_limit" and len(result.stderr) <= 5_000


def test_two_workers_share_the_fork_server():
    # Throughput is measured in bench/code_judge.py, side by side with a baseline; here: concurrent runs through
    # the one fork server each get their own output.
    n = 60
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda i: run(f"print({i} * 2)"), range(n)))
    assert [(r.status, r.stdout) for r in results] == [("ok", f"{i * 2}\n") for i in range(n)]
