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

Languages: python (python3), javascript (js, node, nodejs) and typescript
(ts), the last two on the sandbox's Node.js (node_worker.js beside this
script or in /usr/local/lib/airlock-code-interpreter); any other is refused
(UnsupportedLanguage in an execution, 501 for a context), as are JavaScript
without node and TypeScript without a way to strip types.

Every context is its own process (a "worker": worker.py, beside this script
or in /usr/local/lib/airlock-code-interpreter), like a Jupyter kernel: its state persists between executions, and
its working directory, environment, output and crashes are its own. A
JavaScript or TypeScript worker runs node_worker.js under it and relays its
messages. The server runs the executions of one context one at a time (a lock
per context); different contexts run concurrently. A worker's file
descriptors 1 and 2 are pipes it reads itself, so output from print() or
console.log, from C extensions and from child processes is all captured and
streamed, one line per message (a partial line after 50 ms without more
output).

Results are E2B's (display.py): the text/plain of the value as IPython shows
it without surrounding single quotes ('hello' is hello), the formats of its
_repr_*_ methods, a DataFrame's data, and for every matplotlib figure left
open or shown, a result with its PNG and its structure as a chart.

A context's working directory is any existing directory (cwd; default
/home/user, else /). Run as root, the server runs each context as the owner
of its working directory (/home/user: user; /root, /tmp: root), with that
user's groups, HOME and USER: in an Airlock sandbox root lacks
CAP_DAC_OVERRIDE, so only the owner can be sure to write there. Run as
anyone else, it runs contexts as itself.

Interrupts: when the client goes away during an execution (the SDK's
timeoutMs aborts its request), the server sends SIGINT to the worker, which
raises KeyboardInterrupt in the running code (not in the worker's own code);
the context survives. Code that ignores KeyboardInterrupt runs on; restart the
context (POST /contexts/{id}/restart) to kill it. There is no server-side
execution time limit.

env_vars apply to os.environ for the duration of that execution only.
"""

import argparse
import json
import logging
import os
import pwd
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_PORT = 49999
# The names a client may use for each language this server runs.
LANGUAGES = {
    "python": "python", "python3": "python",
    "javascript": "javascript", "js": "javascript", "node": "javascript", "nodejs": "javascript",
    "typescript": "typescript", "ts": "typescript",
}
MAX_BODY = 64 << 20
# Where the server's helpers (worker.py, display.py, node_worker.js) are:
# beside this script (the repository, tests) or where the template installs
# them.
HELPER_DIRS = (os.path.dirname(os.path.realpath(__file__)), "/usr/local/lib/airlock-code-interpreter")

log = logging.getLogger("airlock-code-interpreter")


def default_cwd():
    return "/home/user" if os.path.isdir("/home/user") else "/"


def helper(name):
    """The path of one of the server's helper files."""
    for d in HELPER_DIRS:
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p
    raise RequestError(500, "%s is missing (looked in %s)" % (name, ", ".join(HELPER_DIRS)))


class RequestError(Exception):
    """An error answered as JSON with an HTTP status."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def parse_language(value):
    """The language of a request: python (None, the default), javascript or
    typescript; 400 if it is not a string, 501 for any other language."""
    if value is None or value == "":
        return "python"
    if not isinstance(value, str):
        raise RequestError(400, "language must be a string")
    lang = LANGUAGES.get(value.strip().lower())
    if lang is None:
        raise RequestError(501, "language %r is not supported: this code interpreter runs python, "
                                "javascript (js) and typescript (ts)" % value)
    return lang


class NodeSupport:
    """What the sandbox's Node.js can run, asked once (node_worker.js --probe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._probed = False
        self.node = None  # the node executable, if any
        self.version = None
        self.typescript = False

    def check(self, language):
        """Returns the node executable for language, or raises 501."""
        with self._lock:
            if not self._probed:
                self._probe()
                self._probed = True
        if self.node is None:
            raise RequestError(501, "language %s needs Node.js, which is not installed in this sandbox "
                                    "(no node on PATH)" % language)
        if language == "typescript" and not self.typescript:
            raise RequestError(501, "language typescript is not supported by this sandbox's Node.js %s: it "
                                    "needs Node.js 22.13 or later (type stripping) or the typescript package "
                                    "(Debian: node-typescript)" % self.version)
        return self.node

    def _probe(self):
        node = shutil.which("node") or shutil.which("nodejs")
        if node is None:
            return
        try:
            out = subprocess.run([node, helper("node_worker.js"), "--probe"], capture_output=True, timeout=30,
                                 stdin=subprocess.DEVNULL, close_fds=True)
            info = json.loads(out.stdout.decode() or "{}")
        except (OSError, ValueError, subprocess.TimeoutExpired, RequestError) as e:
            log.error("probe node: %s", e)
            return
        self.node = node
        self.version = info.get("node")
        self.typescript = bool(info.get("typescript"))


class Identity:
    """The user a context runs as: the owner of its working directory when
    the server is root, the server's own user otherwise."""

    def __init__(self, uid, gid, groups, env):
        self.uid, self.gid, self.groups, self.env = uid, gid, groups, env

    @classmethod
    def for_cwd(cls, cwd):
        try:
            st = os.stat(cwd)
        except FileNotFoundError:
            raise RequestError(400, "cwd %s does not exist" % cwd)
        except OSError as e:
            raise RequestError(400, "cwd %s: %s" % (cwd, e.strerror))
        if not os.path.isdir(cwd):
            raise RequestError(400, "cwd %s is not a directory" % cwd)
        if os.geteuid() != 0:
            if not os.access(cwd, os.R_OK | os.X_OK):
                raise RequestError(400, "cwd %s is not accessible to the code interpreter's user (uid %d)"
                                   % (cwd, os.geteuid()))
            return None  # the server's own user, environment as it is
        uid = st.st_uid
        try:
            pw = pwd.getpwuid(uid)
        except KeyError:
            return cls(uid, st.st_gid, [st.st_gid], {"HOME": cwd})
        try:
            groups = os.getgrouplist(pw.pw_name, pw.pw_gid)
        except OSError:
            groups = [pw.pw_gid]
        return cls(uid, pw.pw_gid, groups, {"HOME": pw.pw_dir or cwd, "USER": pw.pw_name, "LOGNAME": pw.pw_name})


# ---------------------------------------------------------------------------
# The server process: contexts and their workers.


class Context:
    """A context: one worker process, its executions serialized."""

    def __init__(self, cwd, language, script, identity, node=None):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self._script = script
        self._identity = identity
        self._node = node  # the node executable (javascript, typescript)
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
            env = dict(os.environ)
            env.setdefault("MPLBACKEND", "Agg")
            env["PYTHONUNBUFFERED"] = "1"
            args = [sys.executable, self._script, "--language", self.language]
            if self._node is not None:
                args += ["--node", self._node]
            ident = {}
            if self._identity is not None:
                env.update(self._identity.env)
                ident = {"user": self._identity.uid, "group": self._identity.gid,
                         "extra_groups": self._identity.groups}
            try:
                self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=self.cwd,
                                             env=env, close_fds=True, **ident)
            except OSError as e:
                raise RequestError(400, "cannot start a %s context in %s: %s" % (self.language, self.cwd, e))
            return self.proc

    def kill(self):
        """Kills the worker; a running execution ends with an error."""
        with self._proc_lock:
            proc = self.proc
            self.proc = None
        if proc is not None:
            if proc.poll() is None and self._node is not None:
                # A node worker kills and reaps its node on SIGTERM: a
                # SIGKILL would leave node to be reaped by init.
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
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
            "value": "the %s process of context %s %s; its state is lost" % (self.language, self.id, how),
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
        self._defaults = {}  # language -> its default context
        self.node = NodeSupport()

    def create(self, cwd=None, language="python"):
        cwd = cwd or default_cwd()
        if not os.path.isabs(cwd) or "\0" in cwd:
            raise RequestError(400, "cwd must be an absolute path, not %r" % cwd)
        cwd = os.path.normpath(cwd)
        node = self.node.check(language) if language != "python" else None
        ctx = Context(cwd, language, self._script, Identity.for_cwd(cwd), node)
        ctx.start()
        with self._lock:
            self._by_id[ctx.id] = ctx
        return ctx

    def default(self, language="python"):
        with self._lock:
            ctx = self._defaults.get(language)
            if ctx is not None and not ctx.closed:
                return ctx
        ctx = self.create(language=language)
        with self._lock:
            other = self._defaults.get(language)
            if other is not None and not other.closed:
                pass
            else:
                self._defaults[language], other = ctx, None
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
            for lang, c in list(self._defaults.items()):
                if c is ctx:
                    del self._defaults[lang]
        if ctx is None:
            raise RequestError(404, "context %s not found" % ctx_id)
        ctx.close()

    def close_all(self):
        with self._lock:
            ctxs = list(self._by_id.values())
            self._by_id.clear()
            self._defaults.clear()
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
                language = parse_language(body.get("language"))
                cwd = body.get("cwd")
                if cwd is not None and not isinstance(cwd, str):
                    raise RequestError(400, "cwd must be a string")
                return self._json(200, self.contexts.create(cwd, language).info())
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
                ctx = self.contexts.default(parse_language(language))
            except RequestError as e:
                if e.status != 501:
                    raise
                unsupported, ctx = e.message, None

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
    contexts = Contexts(helper("worker.py"))
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


def main(argv=None):
    p = argparse.ArgumentParser(prog="airlock-code-interpreter", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to listen on (default %d; 0: any)" % DEFAULT_PORT)
    args = p.parse_args(argv)
    # Descriptors inherited beyond stdin, stdout and stderr (a parent's
    # pipes left without close-on-exec) would be held open as long as the
    # server runs.
    os.closerange(3, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 1024)
    serve(args)


if __name__ == "__main__":
    main()
