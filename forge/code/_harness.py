# ruff: noqa
"""The candidate server: runs as main.py of a sandboxed run (text only, never imported by Forge) and answers
Forge's requests for every test of one Python submission, so all tests share one process.

Forge (the checker, outside the sandbox) holds the tests' expected answers and decides every verdict; this
process only ever sees the tests' inputs. Requests arrive as JSON lines on stdin, answers leave as JSON lines on
a private copy of stdout (the code's own prints go to /dev/null, or into the captured output of a stdio test).
Answers cross as tagged JSON of plain values only (``encode`` from forge/code/wire.py is prepended), so an
object with an always-true ``__eq__`` cannot leave; ``sys.exit`` inside a test is caught and reported as an
error. Whatever the code does to this process, it can only change its own answers.
"""

import io, json, os, sys

ANSWERS = os.dup(1)
_null = os.open("/dev/null", os.O_WRONLY)
os.dup2(_null, 1)
os.close(_null)
_requests = io.open(0, "rb", buffering=1 << 16, closefd=False)


def answer(obj):
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(ANSWERS, data) :]


def main():
    with open("solution.py", encoding="utf-8") as f:
        source = f.read()
    load_error = None
    try:
        code = compile(source, "solution.py", "exec")
    except BaseException as e:
        code, load_error = None, e
    module = {"__name__": "solution", "__builtins__": __builtins__}
    loaded = None
    while True:
        line = _requests.readline()
        if not line:
            os._exit(0)
        if not line.strip():
            continue
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "stdio":
                # the input follows the request line as raw bytes: no parsing cost that grows with its size
                sys.stdin = io.TextIOWrapper(io.BytesIO(_requests.read(req["len"])), encoding="utf-8")
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
                answer({"ok": printed.decode("utf-8", "replace")})
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
            answer({"ok": encode(value)})
        except BaseException as e:  # SystemExit and KeyboardInterrupt included: a test cannot end the run
            try:
                answer({"err": f"{type(e).__name__}: {e}"[:500]})
            except BaseException:
                os._exit(3)


main()
