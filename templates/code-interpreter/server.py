#!/usr/bin/env python3
"""airlock-code-interpreter: the E2B code-interpreter API on guest port 49999.

It answers what the @e2b/code-interpreter SDKs call (see
/work/shared/e2b-protocol.md section 6 in the Airlock repository):

  POST   /execute               {code, context_id?, language?, env_vars?}
                                -> 200, NDJSON stream (one JSON object a line)
  POST   /contexts              {language?, cwd?} -> {id, language, cwd}
  GET    /contexts              -> [{id, language, cwd}, ...]
  DELETE /contexts/{id}         -> 204
  POST   /contexts/{id}/restart -> 204 (fresh globals)
  GET    /health                -> 200

Only Python 3 is supported (the standard library; matplotlib figures are
returned as PNG results when matplotlib is installed).

Every context is its own Python process (a "worker": this script run with
--worker), like a Jupyter kernel: its globals persist between executions, and
its working directory, environment, output and crashes are its own. The
server runs the executions of one context one at a time (a lock per context);
different contexts run concurrently. A worker's file descriptors 1 and 2 are
pipes it reads itself, so output from print(), from C extensions and from
child processes (os.system, subprocess) is all captured and streamed, one
line per message (a partial line after 50 ms without more output).

Interrupts: when the client goes away during an execution (the SDK's
timeoutMs aborts its request), the server sends SIGINT to the worker, which
raises KeyboardInterrupt in the running code (not in the worker's own code);
the context survives. Code that ignores KeyboardInterrupt runs on; restart the
context (POST /contexts/{id}/restart) to kill it. There is no server-side
execution time limit.

env_vars apply to os.environ for the duration of that execution only.
"""

import argparse
import ast
import asyncio
import base64
import builtins
import codecs
import datetime
import io
import json
import linecache
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
import types
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_PORT = 49999
LANGUAGE = "python"
# Names a client may use for the one language this server has.
PYTHON_NAMES = ("python", "python3")
MAX_BODY = 64 << 20

log = logging.getLogger("airlock-code-interpreter")


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def default_cwd():
    return "/home/user" if os.path.isdir("/home/user") else "/"


class RequestError(Exception):
    """An error answered as JSON with an HTTP status."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def parse_language(value):
    """The language of a request: None (the default), or python; else 400."""
    if value is None or value == "":
        return LANGUAGE
    if not isinstance(value, str):
        raise RequestError(400, "language must be a string")
    if value.lower() in PYTHON_NAMES:
        return LANGUAGE
    raise RequestError(400, "language %r is not supported: this code interpreter runs only python" % value)


# ---------------------------------------------------------------------------
# The server process: contexts and their workers.


class Context:
    """A Python context: one worker process, its executions serialized."""

    def __init__(self, cwd, script, env=None):
        self.id = str(uuid.uuid4())
        self.language = LANGUAGE
        self.cwd = cwd
        self._script = script
        self._env = env
        self.lock = threading.Lock()  # held for a whole execution
        self._proc_lock = threading.Lock()  # guards self.proc
        self.proc = None
        self.closed = False

    def info(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def start(self):
        """Starts the worker (again) unless it runs."""
        with self._proc_lock:
            if self.closed:
                raise RequestError(404, "context %s was removed" % self.id)
            if self.proc is not None and self.proc.poll() is None:
                return self.proc
            env = dict(os.environ if self._env is None else self._env)
            env.setdefault("MPLBACKEND", "Agg")
            env["PYTHONUNBUFFERED"] = "1"
            self.proc = subprocess.Popen(
                [sys.executable, self._script, "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=self.cwd,
                env=env,
                close_fds=True,
            )
            return self.proc

    def kill(self):
        """Kills the worker; a running execution ends with an error."""
        with self._proc_lock:
            proc = self.proc
            self.proc = None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for f in (proc.stdin, proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass

    def close(self):
        with self._proc_lock:
            self.closed = True
        self.kill()

    def restart(self):
        self.kill()
        # The execution that ran (if any) sees its worker die and lets go.
        with self.lock:
            self.start()

    def execute(self, request, emit, client_gone):
        """Runs one execution, calling emit(line_bytes) for every NDJSON line.

        client_gone() returns True once the HTTP client went away; the
        execution is then interrupted (SIGINT) and its output discarded.
        """
        with self.lock:
            proc = self.start()
            fd = proc.stdout.fileno()
            try:
                proc.stdin.write(json.dumps(request).encode() + b"\n")
                proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                self._died(proc, emit)
                return
            buf = b""
            interrupted = False
            watch_client = True
            while True:
                if not interrupted and watch_client:
                    gone = client_gone()
                    if gone is None:
                        watch_client = False  # the client sent more: stop watching
                    elif gone:
                        interrupted = True
                        try:
                            proc.send_signal(signal.SIGINT)
                        except OSError:
                            pass
                r, _, _ = select.select([fd], [], [], 0.5)
                if not r:
                    continue
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    chunk = b""
                if not chunk:
                    self._died(proc, emit)
                    return
                buf += chunk
                while True:
                    i = buf.find(b"\n")
                    if i < 0:
                        break
                    line, buf = buf[: i + 1], buf[i + 1 :]
                    try:
                        msg = json.loads(line)
                    except ValueError:
                        log.error("context %s: the worker wrote a line that is not JSON: %r", self.id, line[:200])
                        continue
                    if not emit(line):
                        if not interrupted:
                            interrupted = True
                            try:
                                proc.send_signal(signal.SIGINT)
                            except OSError:
                                pass
                    if msg.get("type") == "end_of_execution":
                        return

    def _died(self, proc, emit):
        try:
            status = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            status = None
        if status is not None and status < 0:
            how = "was killed by signal %d" % -status
        else:
            how = "exited with status %s" % status
        if self.closed:
            name = "ContextRemoved"
        elif self.proc is not proc:
            name = "ContextRestarted"
        else:
            name = "WorkerDied"
        emit(ndjson({
            "type": "error",
            "name": name,
            "value": "the Python process of context %s %s; its state is lost" % (self.id, how),
            "traceback": "",
        }))
        emit(ndjson({"type": "unexpected_end_of_execution"}))


def ndjson(obj):
    return json.dumps(obj).encode() + b"\n"


class Contexts:
    """Every context of the server, and which one is the default."""

    def __init__(self, script):
        self._script = script
        self._lock = threading.Lock()
        self._by_id = {}
        self._default = None

    def create(self, cwd=None):
        cwd = cwd or default_cwd()
        if not os.path.isabs(cwd):
            raise RequestError(400, "cwd must be an absolute path, not %r" % cwd)
        if not os.path.isdir(cwd):
            raise RequestError(400, "cwd %s is not a directory" % cwd)
        ctx = Context(cwd, self._script)
        ctx.start()
        with self._lock:
            self._by_id[ctx.id] = ctx
        return ctx

    def default(self):
        with self._lock:
            ctx = self._default
            if ctx is not None and not ctx.closed:
                return ctx
        ctx = self.create()
        with self._lock:
            if self._default is not None and not self._default.closed:
                other = self._default
            else:
                self._default, other = ctx, None
        if other is not None:
            self.remove(ctx.id)
            return other
        return ctx

    def get(self, ctx_id):
        with self._lock:
            ctx = self._by_id.get(ctx_id)
        if ctx is None:
            raise RequestError(404, "context %s not found" % ctx_id)
        return ctx

    def list(self):
        with self._lock:
            return [c.info() for c in self._by_id.values()]

    def remove(self, ctx_id):
        with self._lock:
            ctx = self._by_id.pop(ctx_id, None)
            if ctx is self._default:
                self._default = None
        if ctx is None:
            raise RequestError(404, "context %s not found" % ctx_id)
        ctx.close()

    def close_all(self):
        with self._lock:
            ctxs = list(self._by_id.values())
            self._by_id.clear()
            self._default = None
        for c in ctxs:
            c.close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "airlock-code-interpreter"
    timeout = 600  # an idle keep-alive connection is closed after this

    def log_message(self, fmt, *args):
        log.info("%s %s", self.address_string(), fmt % args)

    @property
    def contexts(self):
        return self.server.contexts

    _streaming = False  # the response's status line was sent

    def _route(self, method):
        self._streaming = False
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        try:
            parts = path.strip("/").split("/")
            if path == "/health" and method in ("GET", "HEAD"):
                self._drain_body()
                return self._json(200, "OK")
            if path == "/execute" and method == "POST":
                return self._execute(self._body())
            if path == "/contexts" and method == "POST":
                body = self._body()
                parse_language(body.get("language"))
                cwd = body.get("cwd")
                if cwd is not None and not isinstance(cwd, str):
                    raise RequestError(400, "cwd must be a string")
                return self._json(200, self.contexts.create(cwd).info())
            if path == "/contexts" and method == "GET":
                self._drain_body()
                return self._json(200, self.contexts.list())
            if len(parts) == 2 and parts[0] == "contexts" and method == "DELETE":
                self._drain_body()
                self.contexts.remove(parts[1])
                return self._empty(204)
            if len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart" and method == "POST":
                self._drain_body()
                self.contexts.get(parts[1]).restart()
                return self._empty(204)
            self._drain_body()
            raise RequestError(404, "no route %s %s" % (method, path))
        except RequestError as e:
            self._json(e.status, {"error": e.message, "code": e.status})
        except Exception as e:
            log.exception("%s %s", method, path)
            self.close_connection = True
            if not self._streaming:
                self._json(500, {"error": "%s: %s" % (type(e).__name__, e), "code": 500})

    def do_GET(self):
        self._route("GET")

    def do_HEAD(self):
        self._route("HEAD")

    def do_POST(self):
        self._route("POST")

    def do_DELETE(self):
        self._route("DELETE")

    def do_PUT(self):
        self._route("PUT")

    def _read_raw_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = b""
            while True:
                size_line = self.rfile.readline(1024)
                try:
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    raise RequestError(400, "malformed chunked request body")
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                if len(out) + size > MAX_BODY:
                    self.close_connection = True
                    raise RequestError(413, "request body larger than %d bytes" % MAX_BODY)
                out += self.rfile.read(size)
                self.rfile.readline(1024)
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise RequestError(400, "bad Content-Length")
        if n < 0 or n > MAX_BODY:
            self.close_connection = True
            raise RequestError(413, "request body larger than %d bytes" % MAX_BODY)
        return self.rfile.read(n) if n else b""

    def _drain_body(self):
        self._read_raw_body()

    def _body(self):
        raw = self._read_raw_body()
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError as e:
            raise RequestError(400, "the request body is not JSON: %s" % e)
        if not isinstance(body, dict):
            raise RequestError(400, "the request body must be a JSON object")
        return body

    def _json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _empty(self, status):
        self.send_response(status)
        self.end_headers()

    def _execute(self, body):
        code = body.get("code")
        if not isinstance(code, str):
            raise RequestError(400, "code must be a string")
        ctx_id = body.get("context_id")
        language = body.get("language")
        if ctx_id and language:
            raise RequestError(400, "give context_id or language, not both")
        env_vars = body.get("env_vars") or {}
        if not isinstance(env_vars, dict) or not all(
            isinstance(k, str) and k and "=" not in k and "\0" not in k and isinstance(v, str) and "\0" not in v
            for k, v in env_vars.items()
        ):
            raise RequestError(400, "env_vars must map variable names to strings")
        unsupported = None
        if ctx_id:
            if not isinstance(ctx_id, str):
                raise RequestError(400, "context_id must be a string")
            ctx = self.contexts.get(ctx_id)
        else:
            try:
                parse_language(language)
            except RequestError as e:
                unsupported = e.message
            ctx = None if unsupported else self.contexts.default()

        self._streaming = True
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        alive = [True]

        def emit(line):
            if not alive[0]:
                return False
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                return True
            except OSError:
                alive[0] = False
                self.close_connection = True
                return False

        if unsupported:
            emit(ndjson({"type": "error", "name": "UnsupportedLanguage", "value": unsupported, "traceback": ""}))
            emit(ndjson({"type": "end_of_execution"}))
        else:
            ctx.execute({"code": code, "env_vars": env_vars}, emit, self._client_gone)
        if alive[0]:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                self.close_connection = True

    def _client_gone(self):
        """True if the client closed its connection, None if it sent more
        (a pipelined request: stop asking), False if nothing happened."""
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if not r:
                return False
            data = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        return True if data == b"" else None


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, contexts):
        self.contexts = contexts
        super().__init__(addr, Handler)


def serve(args):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    contexts = Contexts(os.path.realpath(__file__))
    contexts.default()  # warm: the first execution finds its worker running
    srv = Server((args.host, args.port), contexts)
    stop = threading.Event()

    def on_signal(signum, frame):
        if not stop.is_set():
            stop.set()
            threading.Thread(target=srv.shutdown, name="shutdown").start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("listening on %s:%d", args.host, srv.server_address[1])
    try:
        srv.serve_forever()
    finally:
        srv.server_close()
        contexts.close_all()


# ---------------------------------------------------------------------------
# The worker process: one context's interpreter.


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


class Worker:
    def __init__(self):
        # The request channel is the original stdin, the message channel the
        # original stdout; user code gets /dev/null as stdin and pipes as
        # fds 1 and 2.
        self._requests = os.fdopen(os.dup(0), "rb")
        self.channel = Channel(os.dup(1))
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        self.readers = []
        for name, fd in (("stdout", 1), ("stderr", 2)):
            r, w = os.pipe()
            os.dup2(w, fd)
            os.close(w)
            self.readers.append(StreamReader(name, r, self.channel))
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
        self.count = 0
        self.executing = False
        self.loop = None
        self._pyplot_patched = False
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum, frame):
        if self.executing:
            raise KeyboardInterrupt

    def run(self):
        for line in self._requests:
            try:
                req = json.loads(line)
            except ValueError:
                continue
            self.execute(req.get("code", ""), req.get("env_vars") or {})

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

    def execute(self, code, env_vars):
        self.count += 1
        ch = self.channel
        ch.active = True
        ch.send({"type": "number_of_executions", "execution_count": self.count})
        saved = {k: os.environ.get(k) for k in env_vars}
        os.environ.update(env_vars)
        value, error = None, None
        try:
            value, error = self._run_code(code)
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

    REPRS = (
        ("_repr_html_", "html"),
        ("_repr_markdown_", "markdown"),
        ("_repr_svg_", "svg"),
        ("_repr_png_", "png"),
        ("_repr_jpeg_", "jpeg"),
        ("_repr_latex_", "latex"),
        ("_repr_json_", "json"),
        ("_repr_javascript_", "javascript"),
    )

    def _result(self, value, main):
        msg = {"type": "result", "is_main_result": main}
        try:
            msg["text"] = repr(value)
        except Exception as e:  # a broken __repr__ must not end the worker
            msg["text"] = "<repr failed: %s: %s>" % (type(e).__name__, e)
        if self._is_figure(value):
            png = self._figure_png(value)
            if png:
                msg["png"] = png
            return msg
        for attr, key in self.REPRS:
            fn = getattr(type(value), attr, None)
            if fn is None:
                continue
            try:
                out = fn(value)
            except Exception:
                continue
            if isinstance(out, tuple):  # (data, metadata)
                out = out[0]
            if out is None:
                continue
            if key in ("png", "jpeg") and isinstance(out, (bytes, bytearray)):
                out = base64.b64encode(out).decode()
            msg[key] = out
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

    @staticmethod
    def _figure_png(fig):
        try:
            buf = io.BytesIO()
            fig.savefig(buf, format="png", bbox_inches="tight")
            return base64.b64encode(buf.getvalue()).decode()
        except Exception as e:
            print("airlock-code-interpreter: could not render a figure: %s" % e, file=sys.stderr)
            return None
        finally:
            plt = sys.modules.get("matplotlib.pyplot")
            if plt is not None:
                plt.close(fig)

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
        """Sends every open figure as a PNG result and closes it."""
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


def work():
    Worker().run()


def main(argv=None):
    p = argparse.ArgumentParser(prog="airlock-code-interpreter", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to listen on (default %d; 0: any)" % DEFAULT_PORT)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        work()
        return
    # Descriptors inherited beyond stdin, stdout and stderr (a parent's
    # pipes left without close-on-exec) would be held open as long as the
    # server runs.
    os.closerange(3, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 1024)
    serve(args)


if __name__ == "__main__":
    main()
