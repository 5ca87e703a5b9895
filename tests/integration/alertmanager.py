"""A real Alertmanager and a webhook receiver for integration tests.

Python 3 standard library only. Both register with the current test's
harness context, so harness.end_test() stops them (the Alertmanager by PID)
even when a test fails or times out.

  am = Alertmanager(webhook_url=hook.url("/am")).start()  # free 127.0.0.1 port
  am.url()                               # "http://127.0.0.1:PORT" (rankdbd's alertmanager_url)
  am.alerts()                            # GET /api/v2/alerts (active, silenced, inhibited)
  am.wait_alert({"alertname": "RankDown", "rank": "3"})   # -> the alert (dict)
  am.wait_gone({"alertname": "RankDown", "rank": "3"})    # resolved ones are not listed
  am.stop()                              # SIGTERM, wait; kill9() for SIGKILL

  hook = WebhookReceiver().start()       # records POSTs; hook.url("/path")
  hook.status = 503                      # answer this from now on
  hook.hold()/hook.release()             # block answers until released
  hook.wait_for(lambda reqs: ..., timeout=30) -> the list of requests
  each request: {"path", "headers", "body" (bytes), "json" (or None)}

Environment: RDB_ALERTMANAGER = the binary (default
/usr/bin/prometheus-alertmanager, Debian package prometheus-alertmanager,
installed by tools/install-deps.sh).

Alertmanager runs with clustering off (--cluster.listen-address= ; no
gossip port), its own temp config and storage dir under the test's temp dir,
and group_wait / group_interval of 1 s so its own notifications (to
webhook_url, if given) follow quickly.
"""

import http.client
import http.server
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.parse

import harness

AM_BIN = os.environ.get("RDB_ALERTMANAGER") or "/usr/bin/prometheus-alertmanager"
START_TIMEOUT_S = 30


def free_port():
    """A port that was free on 127.0.0.1 a moment ago."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def labels_match(alert, want):
    """True if alert's labels include every name=value in want."""
    got = alert.get("labels", {})
    return all(got.get(k) == v for k, v in want.items())


class Alertmanager:
    """One Alertmanager process with its own config and storage."""

    def __init__(self, webhook_url=None, name="alertmanager", binary=None, extra_config=""):
        c = harness.ctx()
        self.name = name
        self.binary = binary or AM_BIN
        self.workdir = c.mkdir(name)
        self.log_path = os.path.join(self.workdir, "alertmanager.log")
        self.config_path = os.path.join(self.workdir, "alertmanager.yml")
        self.storage = os.path.join(self.workdir, "data")
        self.webhook_url = webhook_url
        self.proc = None
        self.port = None
        self.starts = 0
        self.last_rc = None
        self._write_config(extra_config)
        c.servers.append(self)  # end_test kills it by PID

    def _write_config(self, extra):
        receiver = "  - name: default\n"
        if self.webhook_url:
            receiver += ("    webhook_configs:\n"
                         "      - url: %s\n"
                         "        send_resolved: true\n" % json.dumps(self.webhook_url))
        text = ("route:\n"
                "  receiver: default\n"
                "  group_by: ['alertname', 'job']\n"
                "  group_wait: 1s\n"
                "  group_interval: 1s\n"
                "  repeat_interval: 1h\n"
                "receivers:\n" + receiver + extra)
        with open(self.config_path, "w") as f:
            f.write(text)

    # -- lifecycle ----------------------------------------------------------

    def start(self):
        """Starts on a free loopback port and waits for GET /-/ready -> 200.
        Retries on another port if the chosen one was taken meanwhile."""
        if not os.access(self.binary, os.X_OK):
            raise harness.ServerError(
                "Alertmanager binary not found: %s (tools/install-deps.sh installs the Debian "
                "package prometheus-alertmanager; or set RDB_ALERTMANAGER)" % self.binary)
        last = None
        for _ in range(5):
            try:
                return self._start_once(free_port())
            except harness.ServerError as e:
                last = e
                if "address already in use" not in str(e):
                    raise
        raise last

    def _start_once(self, port):
        os.makedirs(self.storage, exist_ok=True)
        self.starts += 1
        argv = [self.binary,
                "--config.file=%s" % self.config_path,
                "--storage.path=%s" % self.storage,
                "--web.listen-address=127.0.0.1:%d" % port,
                "--cluster.listen-address=",
                "--log.level=debug"]
        log = open(self.log_path, "ab")
        log.write(("\n==== start #%d: %s\n" % (self.starts, " ".join(argv))).encode())
        log.flush()
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         cwd=self.workdir)
        finally:
            log.close()
        self.port = port
        deadline = time.monotonic() + START_TIMEOUT_S
        last = None
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self.last_rc = rc
                raise harness.ServerError("alertmanager exited with %s during startup\n%s"
                                          % (rc, self.log_tail(30)))
            try:
                st, _ = self.request("GET", "/-/ready", timeout=5)
                if st == 200:
                    return self
                last = "status %d" % st
            except (OSError, http.client.HTTPException) as e:
                last = repr(e)
            if time.monotonic() > deadline:
                self.kill9()
                raise harness.ServerError("alertmanager not ready within %ds (last: %s)\n%s"
                                          % (START_TIMEOUT_S, last, self.log_tail(30)))
            time.sleep(0.05)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def pid(self):
        return self.proc.pid

    def stop(self, timeout=30):
        """SIGTERM and wait (SIGKILL if it does not exit)."""
        if self.running():
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        if self.proc is not None:
            self.last_rc = self.proc.returncode

    def kill9(self):
        if self.running():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc is not None:
            self.last_rc = self.proc.returncode

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[-n:])

    # -- API ------------------------------------------------------------------

    def url(self):
        """Base URL, as rankdbd's alertmanager_url takes it."""
        assert self.port, "alertmanager is not running"
        return "http://127.0.0.1:%d" % self.port

    def request(self, method, path, body=None, timeout=30):
        """-> (status, body bytes)"""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            hdrs = {"Connection": "close"}
            if body is not None:
                if not isinstance(body, (bytes, str)):
                    body = json.dumps(body)
                if isinstance(body, str):
                    body = body.encode()
                hdrs["Content-Type"] = "application/json"
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def alerts(self, filters=None):
        """GET /api/v2/alerts: every alert Alertmanager holds that has not
        ended (active, silenced and inhibited). filters: optional list of
        matcher strings such as 'alertname="RankDown"'."""
        q = [("active", "true"), ("silenced", "true"), ("inhibited", "true")]
        for f in filters or ():
            q.append(("filter", f))
        st, body = self.request("GET", "/api/v2/alerts?" + urllib.parse.urlencode(q))
        if st != 200:
            raise AssertionError("GET /api/v2/alerts -> %d: %r" % (st, body[:300]))
        return json.loads(body)

    def post_alerts(self, alerts):
        """POST /api/v2/alerts (for tests of the helper itself)."""
        return self.request("POST", "/api/v2/alerts", alerts)

    def find(self, labels):
        return [a for a in self.alerts() if labels_match(a, labels)]

    def wait_alert(self, labels, timeout=30, count=1):
        """Waits until exactly `count` alerts match labels; returns the first."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.find(labels)
            if len(got) == count:
                return got[0]
            if time.monotonic() > deadline:
                raise AssertionError("alertmanager: %d alert(s) matching %r after %gs (want %d); "
                                     "it holds: %s" % (len(got), labels, timeout, count,
                                                       json.dumps(self.alerts())[:3000]))
            time.sleep(0.1)

    def wait_gone(self, labels, timeout=30):
        """Waits until no alert matches labels (resolved alerts are not listed)."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.find(labels)
            if not got:
                return
            if time.monotonic() > deadline:
                raise AssertionError("alertmanager still holds %d alert(s) matching %r after %gs: %s"
                                     % (len(got), labels, timeout, json.dumps(got)[:3000]))
            time.sleep(0.1)


class WebhookReceiver:
    """An HTTP server on a free 127.0.0.1 port (a thread in the test process)
    that records every request; answers `status` (default 200), or blocks
    its answers while held."""

    def __init__(self, name="webhook"):
        self.name = name
        self.requests = []
        self.status = 200
        self.starts = 0  # harness prints no log tail for it
        self.log_path = None
        self._cv = threading.Condition()
        self._release = threading.Event()
        self._release.set()
        self._server = None
        self._thread = None
        harness.ctx().servers.append(self)

    def start(self):
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                try:
                    doc = json.loads(body)
                except ValueError:
                    doc = None
                with owner._cv:
                    owner.requests.append({"path": self.path, "headers": dict(self.headers),
                                           "body": body, "json": doc})
                    owner._cv.notify_all()
                owner._release.wait()
                status = owner.status
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def url(self, path="/"):
        return "http://127.0.0.1:%d%s" % (self._server.server_address[1], path)

    def hold(self):
        self._release.clear()

    def release(self):
        self._release.set()

    def wait_for(self, pred, timeout=30):
        """Waits until pred(list of requests) is true; returns the list."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while not pred(list(self.requests)):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("webhook %s: condition not met after %gs; got %d "
                                         "request(s): %s" % (self.name, timeout, len(self.requests),
                                                             [r["body"][:300] for r in self.requests]))
                self._cv.wait(min(left, 0.5))
            return list(self.requests)

    def running(self):
        return self._server is not None

    def kill9(self):
        self.stop()

    def stop(self):
        if self._server is None:
            return
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._server = None

    def log_tail(self, n=40):
        return ""
