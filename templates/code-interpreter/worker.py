#!/usr/bin/env python3
"""The worker of one code-interpreter context (see server.py, which runs it
as `worker.py --language L [--node PATH]` in the context's working directory
and as its user).

It reads one JSON request a line on stdin ({code, env_vars}) and writes the
execution's NDJSON messages on stdout: number_of_executions, stdout and
stderr (fds 1 and 2 are pipes it reads itself, so output of child processes
and C code is caught too), results, an error, end_of_execution. A Python
context is this process's own interpreter (Worker); a JavaScript or
TypeScript context is node_worker.js run by it (NodeBridge). SIGINT raises
KeyboardInterrupt in the running code (Python) or is passed on to node.
"""

import argparse
import ast
import asyncio
import base64
import builtins
import codecs
import datetime
import importlib.util
import io
import json
import linecache
import os
import select
import signal
import subprocess
import sys
import threading
import traceback
import types
import uuid

# Where the helpers (display.py, node_worker.js) are: beside this script
# (the repository, tests) or where the template installs them.
HELPER_DIRS = (os.path.dirname(os.path.realpath(__file__)), "/usr/local/lib/airlock-code-interpreter")


def helper(name):
    """The path of one of the interpreter's helper files."""
    for d in HELPER_DIRS:
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p
    raise FileNotFoundError("%s is missing (looked in %s)" % (name, ", ".join(HELPER_DIRS)))


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


class Channel:
    """The worker's NDJSON messages to the server (its original stdout)."""

    def __init__(self, fd):
        self._f = os.fdopen(fd, "wb", buffering=0)
        self._lock = threading.Lock()
        self.active = False  # inside an execution: stream messages are sent

    def send(self, obj):
        data = json.dumps(obj, default=str).encode() + b"\n"
        with self._lock:
            self._f.write(data)


class StreamReader:
    """Reads one of the worker's output pipes (fd 1 or 2) and sends what
    arrives as stdout/stderr messages, a line at a time."""

    SENTINEL = "\x00airlock-code-interpreter-drain-%s\x00" % uuid.uuid4().hex

    def __init__(self, name, fd, channel):
        self.name = name
        self._fd = fd
        self._ch = channel
        self._cond = threading.Condition()
        self._seen = 0  # sentinels read
        self._thread = threading.Thread(target=self._run, name="read-" + name, daemon=True)
        self._thread.start()

    def _emit(self, text):
        if text and self._ch.active:
            self._ch.send({"type": self.name, "text": text, "timestamp": now_iso()})

    def _run(self):
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        buf = ""
        while True:
            r, _, _ = select.select([self._fd], [], [], 0.05 if buf else None)
            if not r:
                self._emit(buf)  # a partial line, after a pause
                buf = ""
                continue
            data = os.read(self._fd, 1 << 16)
            if not data:
                self._emit(buf + dec.decode(b"", final=True))
                return
            buf += dec.decode(data)
            while True:
                s = buf.find(self.SENTINEL)
                nl = buf.find("\n")
                if nl >= 0 and (s < 0 or nl < s):
                    self._emit(buf[: nl + 1])
                    buf = buf[nl + 1 :]
                elif s >= 0:
                    self._emit(buf[:s])
                    buf = buf[s + len(self.SENTINEL) :]
                    with self._cond:
                        self._seen += 1
                        self._cond.notify_all()
                else:
                    break

    def mark(self):
        with self._cond:
            return self._seen

    def wait(self, target, timeout):
        with self._cond:
            return self._cond.wait_for(lambda: self._seen >= target, timeout)


def load_display():
    """display.py, loaded by path (not importable by user code as a module
    of sys.path)."""
    # No __pycache__ beside it (the template's directory is root's; the
    # repository's is no place for one).
    dont_write, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec = importlib.util.spec_from_file_location("_airlock_display", helper("display.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.dont_write_bytecode = dont_write
    return mod


def dedent_cell(code):
    """Code without the indentation of its first non-blank line, taken off
    every line that has it (IPython does the same): an indented snippet runs."""
    lines = code.splitlines(True)
    first = next((ln for ln in lines if ln.strip()), None)
    if first is None:
        return code
    indent = first[: len(first) - len(first.lstrip(" \t"))]
    if not indent:
        return code
    return "".join(ln[len(indent):] if ln.startswith(indent) else ("\n" if not ln.strip() else ln) for ln in lines)


class WorkerBase:
    """A worker's plumbing: the request channel is the original stdin, the
    message channel the original stdout; the code gets /dev/null as stdin
    and pipes as fds 1 and 2, read by StreamReaders."""

    def __init__(self):
        self._requests = os.fdopen(os.dup(0), "rb")
        self.channel = Channel(os.dup(1))
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        self._pipes = []
        for name, fd in (("stdout", 1), ("stderr", 2)):
            r, w = os.pipe()
            os.dup2(w, fd)
            os.close(w)
            self._pipes.append((name, r))
        self.readers = []
        self.count = 0

    def start_readers(self):
        self.readers = [StreamReader(name, r, self.channel) for name, r in self._pipes]

    def drain(self):
        """Waits until what was written to fds 1 and 2 so far was sent."""
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except (OSError, ValueError):
                pass
        targets = [r.mark() + 1 for r in self.readers]
        for fd in (1, 2):
            try:
                os.write(fd, StreamReader.SENTINEL.encode())
            except OSError:
                return
        for r, t in zip(self.readers, targets):
            r.wait(t, 30)

    def requests(self):
        for line in self._requests:
            try:
                req = json.loads(line)
            except ValueError:
                continue
            if isinstance(req, dict):
                yield req


class Worker(WorkerBase):
    """A Python context's interpreter."""

    def __init__(self):
        super().__init__()
        self.start_readers()
        self.disp = load_display()
        sys.stdin = open(0, "r", closefd=False)
        # Line-buffered: print() reaches the pipe a whole line at a time.
        sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0, closefd=False), encoding="utf-8",
                                      errors="backslashreplace", line_buffering=True)
        sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0, closefd=False), encoding="utf-8",
                                      errors="backslashreplace", line_buffering=True)
        sys.path[0] = ""  # like an interactive interpreter: the working directory
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        main.__dict__["display"] = self.display
        sys.modules["__main__"] = main
        self.globals = main.__dict__
        self.executing = False
        self.loop = None
        self._pyplot_patched = False
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum, frame):
        if self.executing:
            raise KeyboardInterrupt

    def run(self):
        for req in self.requests():
            code = req.get("code", "")
            env_vars = req.get("env_vars") or {}
            self.execute(code if isinstance(code, str) else "", env_vars if isinstance(env_vars, dict) else {})

    def execute(self, code, env_vars):
        self.count += 1
        ch = self.channel
        ch.active = True
        ch.send({"type": "number_of_executions", "execution_count": self.count})
        saved = {k: os.environ.get(k) for k in env_vars}
        os.environ.update(env_vars)
        value, error = None, None
        try:
            value, error = self._run_code(dedent_cell(code))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.drain()
        if value is not None:
            ch.send(self._result(value, True))
        self._flush_figures()
        if error is not None:
            ch.send(error)
        self.drain()
        ch.active = False
        ch.send({"type": "end_of_execution"})

    def _run_code(self, code):
        """Runs code; returns (value of its last expression, error message)."""
        filename = "<cell %d>" % self.count
        lines = code.splitlines(True)
        linecache.cache[filename] = (len(code), None, lines, filename)
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        try:
            tree = ast.parse(code, filename, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            body = compile(tree, filename, "exec", flags=flags)
            expr = compile(last, filename, "eval", flags=flags) if last is not None else None
        except (SyntaxError, ValueError, OverflowError) as e:
            e.__traceback__ = None  # the parser's frames are not the user's
            return None, self._error(e)
        self._patch_pyplot()
        self.executing = True
        try:
            self._run(body)
            value = self._run(expr) if expr is not None else None
            return value, None
        except BaseException as e:  # noqa: B902 - user code may raise anything, SystemExit too
            return None, self._error(e)
        finally:
            self.executing = False

    def _run(self, code_obj):
        """Evaluates a compiled cell part (a frame skipped in tracebacks)."""
        result = eval(code_obj, self.globals)
        if code_obj.co_flags & 0x80:  # CO_COROUTINE: top-level await
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
            result = self.loop.run_until_complete(result)
        return result

    def _error(self, e):
        # The traceback starts at the user's code: the worker's frames (and
        # asyncio's, for top-level await) before it are left out.
        tb = e.__traceback__
        while tb is not None and (tb.tb_frame.f_code.co_filename == __file__
                                  or os.sep + "asyncio" + os.sep in tb.tb_frame.f_code.co_filename):
            tb = tb.tb_next
        text = "".join(traceback.format_exception(type(e), e, tb))
        return {"type": "error", "name": type(e).__name__, "value": str(e), "traceback": text}

    # Rich results -----------------------------------------------------------

    def _result(self, value, main):
        msg = {"type": "result", "is_main_result": main}
        if self._is_figure(value):
            msg["text"] = self.disp.plain_text(self.disp.safe_repr(value))
            msg.update(self._figure(value))
            return msg
        msg.update(self.disp.bundle(value))
        return msg

    def display(self, *objs):
        """IPython's display(): each object becomes a result (not the main one)."""
        self.drain()
        for obj in objs:
            self.channel.send(self._result(obj, False))

    # matplotlib -------------------------------------------------------------

    @staticmethod
    def _is_figure(value):
        mod = sys.modules.get("matplotlib.figure")
        return mod is not None and isinstance(value, mod.Figure)

    def _figure(self, fig):
        """A figure's PNG and chart; the figure is closed."""
        out = {}
        try:
            buf = io.BytesIO()
            fig.savefig(buf, format="png", bbox_inches="tight")
            out["png"] = base64.b64encode(buf.getvalue()).decode()
            chart = self.disp.chart_of(fig)  # after the drawing: tick labels are set
            if chart is not None:
                out["chart"] = chart
        except Exception as e:
            print("airlock-code-interpreter: could not render a figure: %s" % e, file=sys.stderr)
        finally:
            plt = sys.modules.get("matplotlib.pyplot")
            if plt is not None:
                plt.close(fig)
        return out

    def _patch_pyplot(self):
        """Makes plt.show() send the open figures (it would do nothing on Agg)."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None or self._pyplot_patched:
            return
        self._pyplot_patched = True

        def show(*args, **kwargs):
            self.drain()
            self._flush_figures()

        plt.show = show

    def _flush_figures(self):
        """Sends every open figure as a result (PNG and chart) and closes it."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        try:
            nums = plt.get_fignums()
        except Exception:
            return
        for n in nums:
            fig = plt.figure(n)
            self.channel.send(self._result(fig, False))


class NodeBridge(WorkerBase):
    """A JavaScript or TypeScript context's worker: it runs node_worker.js
    with this worker's fds 1 and 2 as node's stdout and stderr and a pipe of
    its own for node's messages, and relays them, each after the output
    written before it (drain). SIGINT is passed on to node; when node ends,
    the worker ends the same way."""

    def __init__(self, language, node):
        super().__init__()
        self.proc = None
        # Before node exists: a SIGTERM at any time kills and reaps it.
        signal.signal(signal.SIGTERM, self._on_sigterm)
        r, w = os.pipe()
        self.proc = subprocess.Popen(
            [node, helper("node_worker.js"), "--language", language, "--msg-fd", str(w)],
            stdin=subprocess.PIPE, pass_fds=(w,), preexec_fn=_die_with_parent)
        os.close(w)
        self._msgs = os.fdopen(r, "rb")
        self.start_readers()
        self.disp = load_display()
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum, frame):
        try:
            self.proc.send_signal(signal.SIGINT)
        except OSError:
            pass

    def _on_sigterm(self, signum, frame):
        """The server ends the context: node is killed and reaped first
        (directly: the main thread may be inside the Popen's own wait)."""
        if self.proc is not None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
                os.waitpid(self.proc.pid, 0)
            except OSError:
                pass  # already reaped
        os._exit(0)

    def run(self):
        ch = self.channel
        for req in self.requests():
            self.count += 1
            ch.active = True
            ch.send({"type": "number_of_executions", "execution_count": self.count})
            try:
                self.proc.stdin.write(json.dumps({"code": req.get("code", ""), "env_vars": req.get("env_vars") or {}})
                                      .encode() + b"\n")
                self.proc.stdin.flush()
            except OSError:
                self._node_ended()
            while True:
                line = self._msgs.readline()
                if not line:
                    self._node_ended()
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                self.drain()
                if msg.get("type") == "end_of_execution":
                    ch.active = False
                    ch.send(msg)
                    break
                if msg.get("type") == "result" and "text" in msg:
                    msg["text"] = self.disp.plain_text(msg["text"])
                ch.send(msg)
        self.proc.stdin.close()
        self.proc.wait()

    def _node_ended(self):
        """node is gone: this worker ends as it did (the server reports it)."""
        status = self.proc.wait()
        self.drain()
        sys.stderr.flush()
        if status < 0:
            signal.signal(-status, signal.SIG_DFL)
            os.kill(os.getpid(), -status)
        os._exit(status if 0 <= status < 256 else 1)


def _die_with_parent():
    """In the child before exec: SIGKILL when the worker dies (prctl
    PR_SET_PDEATHSIG), so that node never outlives its context."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)


def work(language, node):
    if language == "python":
        Worker().run()
    else:
        NodeBridge(language, node).run()


def main(argv=None):
    p = argparse.ArgumentParser(prog="airlock-code-interpreter worker")
    p.add_argument("--language", default="python")
    p.add_argument("--node", default=None)
    args = p.parse_args(argv)
    work(args.language, args.node)


if __name__ == "__main__":
    main()
