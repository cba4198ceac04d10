# ruff: noqa
"""The batch harness: every test of one Python submission in one sandboxed run (text run as main.py, never
imported by Forge).

Two processes, both as the run's unprivileged uid:
- the *checker* reads the job (tests, expected answers, a random nonce) from stdin, which only it holds; it
  never executes the submission. It sends each test's input to the candidate, measures the round trip, decides
  the verdict itself and prints one line ``<nonce> <json>`` on stdout at the end;
- the *candidate* is forked before the job is read (so nothing secret is in its memory), gives up stdin and
  stdout, loads ``solution.py`` and answers requests on a pipe. Its answers cross as tagged JSON of plain values
  only (an object with an always-true ``__eq__`` cannot be encoded), ``sys.exit`` inside a test is caught, and a
  dead candidate fails the test in flight; the checker is non-dumpable, so the candidate can neither trace it
  nor open its descriptors through /proc.
"""

import ctypes, io, json, os, select, sys, time

ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no ptrace, no /proc/<pid>/{mem,fd} for the candidate


# encode() and decode() are prepended from forge/code/wire.py when the run's main.py is built.


def send(fd, obj):
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


class Reader:
    def __init__(self, fd):
        self.fd, self.buf = fd, b""

    def read(self, deadline=None):
        """One JSON line, None at EOF; raises TimeoutError past ``deadline``."""
        while b"\n" not in self.buf:
            if deadline is not None:
                left = deadline - time.perf_counter()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    raise TimeoutError
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def candidate(req_r, resp_w):
    os.close(0)
    null = os.open("/dev/null", os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    requests = Reader(req_r)
    send_err = lambda e: send(resp_w, {"err": f"{type(e).__name__}: {e}"[:500]})
    with open("solution.py", encoding="utf-8") as f:
        source = f.read()
    try:
        code = compile(source, "solution.py", "exec")
    except BaseException as e:
        code, load_error = None, e
    module = {"__name__": "solution", "__builtins__": __builtins__}
    loaded = None
    if code is not None:
        load_error = None
    while True:
        req = requests.read()
        if req is None:
            os._exit(0)
        op = req["op"]
        try:
            if op == "stdio":
                sys.stdin = io.TextIOWrapper(io.BytesIO(req["input"].encode()), encoding="utf-8")
                out = io.BytesIO()
                wrapper = sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
                try:
                    if code is None:
                        raise load_error
                    exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
                except SystemExit as e:
                    if e.code not in (None, 0):
                        raise RuntimeError(f"exit status {e.code}") from None
                finally:
                    wrapper.flush()
                    printed = out.getvalue()
                    sys.stdout, sys.stdin = sys.__stdout__, sys.__stdin__
                send(resp_w, {"ok": printed.decode("utf-8", "replace")})
                continue
            if loaded is None:
                loaded = False
                if code is not None:
                    try:
                        exec(code, module)
                        loaded = True
                    except BaseException as e:
                        load_error = e
            if not loaded:
                raise load_error
            fn = module[req["fn"]]
            value = fn(*decode(req["args"]), **decode(req["kwargs"]))
            send(resp_w, {"ok": encode(value)})
        except BaseException as e:  # SystemExit and KeyboardInterrupt included: a test cannot end the run
            try:
                send_err(e)
            except BaseException:
                os._exit(3)


class CandidateDied(Exception):
    pass


class Link:
    """The checker's end: one request, one answer, within the test's deadline."""

    def __init__(self, req_w, resp_r):
        self.req_w, self.resp = req_w, Reader(resp_r)
        self.deadline = None

    def ask(self, req):
        try:
            send(self.req_w, req)
        except BrokenPipeError:
            raise CandidateDied("the submission's process ended") from None
        reply = self.resp.read(self.deadline)
        if reply is None:
            raise CandidateDied("the submission's process ended")
        if "err" in reply:
            raise RuntimeError(str(reply["err"]))
        return decode(reply["ok"])

    def proxy(self, name):
        def call(*args, **kwargs):
            return self.ask({"op": "call", "fn": name, "args": encode(list(args)), "kwargs": encode(kwargs)})

        call.__name__ = name
        return call


def same(got, want, tol):
    """Equality of decoded plain values (no user-defined __eq__ can reach here), floats within ``tol``."""
    if type(want) is float and type(got) in (int, float):
        return abs(got - want) <= tol * max(1.0, abs(want))
    if type(want) in (list, tuple) and type(got) is type(want):
        return len(got) == len(want) and all(same(g, w, tol) for g, w in zip(got, want))
    return type(got) is type(want) and got == want


def check_one(link, job, test):
    kind = test["kind"]
    if kind == "stdio":
        got = link.ask({"op": "stdio", "input": test["input"]})
        want = test.get("output")
        return want is None or got.split() == want.split(), got[:200]
    if kind == "call":
        got = link.ask({"op": "call", "fn": test["fn"], "args": test["args"], "kwargs": {"$d": []}})
        return same(got, decode(test["expected"]), job.get("tol", 1e-6)), repr(got)[:200]
    # "assert": trusted test code, run here with the submission's functions as proxies
    names = {n: link.proxy(n) for n in job["functions"]}
    scope = {"__name__": "__checker__", **names}
    if job.get("entry_point") in names:
        scope["candidate"] = names[job["entry_point"]]
    exec(job.get("setup", ""), scope)
    exec(test["code"], scope)
    return True, ""


def main():
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(req_w)
        os.close(resp_r)
        candidate(req_r, resp_w)
        os._exit(0)
    os.close(req_r)
    os.close(resp_w)
    job = json.loads(sys.stdin.read())
    os.close(0)
    link = Link(req_w, resp_r)
    # The candidate's CPU clock, read from here: load on the machine does not inflate it and the code under
    # test cannot touch it (the complexity judge times with it).
    clock = ((~pid) << 3) | 2

    def cpu():
        try:
            return time.clock_gettime(clock)
        except OSError:
            return float("nan")

    results = []
    for test in job["tests"]:
        cpu_start = cpu()
        start = time.perf_counter()
        link.deadline = start + job["time_limit"]
        try:
            passed, detail = check_one(link, job, test)
            status = "pass" if passed else "fail"
        except TimeoutError:
            status, detail = "timeout", ""
        except CandidateDied as e:
            status, detail = "died", str(e)
        except BaseException as e:
            status, detail = "fail", f"{type(e).__name__}: {e}"[:300]
        results.append([status, time.perf_counter() - start, detail, cpu() - cpu_start])
        if status in ("timeout", "died"):
            break
    sys.stdout.write(job["nonce"] + " " + json.dumps(results) + "\n")
    sys.stdout.flush()
    try:
        os.kill(pid, 9)
    except OSError:
        pass
    os._exit(0)


main()
