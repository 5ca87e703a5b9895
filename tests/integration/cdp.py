"""A headless Chromium driven over the DevTools protocol, Python stdlib only.

Used by test_ui.py (browser tests of the dashboard) and bench/ui_bench.py
(load times). Chromium (Debian package `chromium`, tools/install-deps.sh)
is started with --remote-debugging-pipe: commands go to its fd 3 and
answers come from its fd 4, NUL-separated JSON, so no WebSocket client and
no port are needed. In a root container it needs --no-sandbox; it runs
--headless=new in its own session (process group), and close() ends it
with Browser.close, then SIGKILL of its PID and of its own process group
(only the processes it started).

    b = Browser(tmpdir, width=1400, height=900)
    b.navigate("http://127.0.0.1:PORT/ui/")
    b.wait_for("document.body.dataset.ready === 'run'")
    b.eval("document.title")
    b.screenshot("page.png")
    b.close()
"""

import base64
import fcntl
import json
import os
import shutil
import signal
import subprocess
import threading
import time

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium():
    """Path of a Chromium binary ($RDB_CHROMIUM first), or None."""
    env = os.environ.get("RDB_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for c in CANDIDATES:
        p = shutil.which(c)
        if p:
            return p
    return None


class CdpError(AssertionError):
    pass


def _high_fd(fd):
    """fd moved to a number >= 10 (so bash's 3</4> redirections cannot clobber it)."""
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return new


class Browser:
    def __init__(self, tmpdir, width=1400, height=900, binary=None, extra_args=()):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise CdpError("no chromium found (apt-get install chromium; tools/install-deps.sh "
                           "does it) - or set RDB_CHROMIUM")
        self.profile = os.path.join(tmpdir, "chromium-profile")
        os.makedirs(self.profile, exist_ok=True)
        self.log_path = os.path.join(tmpdir, "chromium.log")
        to_r, to_w = os.pipe()      # we write commands, chromium reads (its fd 3)
        from_r, from_w = os.pipe()  # chromium writes answers (its fd 4), we read
        to_r, from_w = _high_fd(to_r), _high_fd(from_w)
        args = [self.binary, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--remote-debugging-pipe", "--user-data-dir=" + self.profile,
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars",
                "--mute-audio", "--password-store=basic", "--use-mock-keychain",
                "--window-size=%d,%d" % (width, height)] + list(extra_args) + ["about:blank"]
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                ["/bin/bash", "-c", 'exec "$@" 3<&%d 4>&%d %d<&- %d>&-' % (to_r, from_w, to_r, from_w),
                 "bash"] + args,
                pass_fds=(to_r, from_w), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True)
        finally:
            log.close()
            os.close(to_r)
            os.close(from_w)
        self.wfd, self.rfd = to_w, from_r
        self.width, self.height = width, height
        self._id = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._answers = {}
        self.events = []
        self.console = []
        self.request_headers = []  # headers of every request the page sent
        self.exceptions = []
        self._closed = False
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()
        self.session = None
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)
        att = self.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True},
                        session=False)
        self.session = att["sessionId"]
        for dom in ("Page", "Runtime", "Network"):
            self.call(dom + ".enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    # -- protocol -------------------------------------------------------------

    def _read_loop(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self.rfd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._closed = True
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw.decode("utf-8"))
                with self._cond:
                    if "id" in msg:
                        self._answers[msg["id"]] = msg
                    else:
                        self._event(msg)
                    self._cond.notify_all()

    def _event(self, msg):
        method = msg.get("method", "")
        params = msg.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console.append("%s: %s" % (params.get("type"), text))
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            self.exceptions.append(d.get("exception", {}).get("description") or d.get("text"))
        elif method == "Network.responseReceived":
            r = params.get("response", {})
            self.events.append(("response", r.get("url"), r.get("status")))
        elif method == "Network.requestWillBeSent":
            self.request_headers.append(params.get("request", {}).get("headers", {}))
        elif method == "Page.loadEventFired":
            self.events.append(("load",))

    def call(self, method, params=None, session=True, timeout=60):
        with self._lock:
            self._id += 1
            mid = self._id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        data = json.dumps(msg).encode("utf-8") + b"\0"
        view = memoryview(data)
        while view:
            n = os.write(self.wfd, view)
            view = view[n:]
        deadline = time.monotonic() + timeout
        with self._cond:
            while mid not in self._answers:
                if self._closed:
                    raise CdpError("chromium exited while waiting for %s; see %s" % (method, self.log_path))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CdpError("no answer to %s within %gs" % (method, timeout))
                self._cond.wait(left)
            ans = self._answers.pop(mid)
        if "error" in ans:
            raise CdpError("%s failed: %s" % (method, ans["error"]))
        return ans.get("result", {})

    # -- page helpers -----------------------------------------------------------

    def navigate(self, url, timeout=60):
        n = len([e for e in self.events if e[0] == "load"])
        r = self.call("Page.navigate", {"url": url})
        if r.get("errorText"):
            raise CdpError("navigation to %s failed: %s" % (url, r["errorText"]))
        self.wait_until(lambda: len([e for e in self.events if e[0] == "load"]) > n, timeout,
                        "load event of " + url)

    def eval(self, expr, timeout=60):
        """Value of a JS expression (awaited if it is a promise)."""
        r = self.call("Runtime.evaluate", {"expression": expr, "awaitPromise": True,
                                           "returnByValue": True}, timeout=timeout)
        if r.get("exceptionDetails"):
            d = r["exceptionDetails"]
            raise CdpError("JS error in %r: %s" % (expr[:200], d.get("exception", {}).get("description")
                                                   or d.get("text")))
        return r.get("result", {}).get("value")

    def wait_until(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while True:
            v = pred()
            if v:
                return v
            if time.monotonic() > deadline:
                raise CdpError("timed out after %gs waiting for %s" % (timeout, what))
            time.sleep(0.05)

    def wait_for(self, expr, timeout=60):
        """Polls a JS expression until it is truthy; returns its value."""
        return self.wait_until(lambda: self.eval(expr), timeout, "JS condition %s" % expr)

    def click(self, x, y):
        for typ in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": typ, "x": x, "y": y, "button": "left",
                                                  "clickCount": 1 if typ != "mouseMoved" else 0})

    def drag(self, x0, y, x1, steps=8):
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x0, "y": y})
        self.call("Input.dispatchMouseEvent", {"type": "mousePressed", "x": x0, "y": y,
                                              "button": "left", "clickCount": 1})
        for i in range(1, steps + 1):
            self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x0 + (x1 - x0) * i / steps,
                                                  "y": y, "button": "left", "buttons": 1})
        self.call("Input.dispatchMouseEvent", {"type": "mouseReleased", "x": x1, "y": y,
                                              "button": "left", "clickCount": 1})

    def screenshot(self, path, full_page=False):
        params = {"format": "png"}
        if full_page:
            h = self.eval("Math.ceil(document.documentElement.scrollHeight)")
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": self.width, "height": int(h), "deviceScaleFactor": 1, "mobile": False})
            params["captureBeyondViewport"] = True
        try:
            r = self.call("Page.captureScreenshot", params)
        finally:
            if full_page:
                self.call("Emulation.setDeviceMetricsOverride",
                          {"width": self.width, "height": self.height, "deviceScaleFactor": 1,
                           "mobile": False})
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))
        return path

    def close(self):
        try:
            if not self._closed:
                self.call("Browser.close", session=False, timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: helpers it left
        except OSError:
            pass
        for fd in (self.wfd, self.rfd):
            try:
                os.close(fd)
            except OSError:
                pass
