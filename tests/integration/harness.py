"""Integration-test harness for rankdbd: start/stop/kill servers, talk HTTP.

Python 3 standard library only. Every test runs in its own process (see
run.py), which calls begin_test() before and end_test() after the test
function; servers started in between are registered with that test and
killed (by PID) if a test leaves them running.

Environment:
  RDB_BIN       path of rankdbd (run.py --bin sets it)
  RDB_TEST_TMP  parent directory of the per-test temp dirs (default /tmp)
  RDB_KEEP_TMP  if set, temp dirs are kept even when a test passes
  RDB_TEST_SERVER_FLAGS  extra rankdbd options for every server started
                (shell words, e.g. "--http-write-loop on"); an option the
                test passes itself wins (run.py --server-flags sets it)
"""

import http.client
import json
import math
import os
import shlex
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_BIN = os.path.join(REPO, "build", "server", "rankdbd")

START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 60
REQUEST_TIMEOUT_S = 60


def bin_path():
    return os.environ.get("RDB_BIN") or DEFAULT_BIN


def set_bin(path):
    os.environ["RDB_BIN"] = os.path.abspath(path)


def env_flags(argv):
    """The options of $RDB_TEST_SERVER_FLAGS that argv does not already name
    (rankdbd refuses an option given twice; the test's own choice wins)."""
    words = shlex.split(os.environ.get("RDB_TEST_SERVER_FLAGS", ""))
    named = {a.split("=", 1)[0] for a in argv if a.startswith("-")}
    out = []
    i = 0
    while i < len(words):
        w = words[i]
        if not w.startswith("-"):
            raise ServerError("RDB_TEST_SERVER_FLAGS: expected an option, got %r" % w)
        opt = [w] if "=" in w or i + 1 == len(words) or words[i + 1].startswith("-") \
            else [w, words[i + 1]]
        i += len(opt)
        if w.split("=", 1)[0] not in named:
            out += opt
    return out


def tmp_root():
    return os.environ.get("RDB_TEST_TMP") or "/tmp"


# ---------------------------------------------------------------------------
# Per-test context


class TestContext:
    def __init__(self, name):
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
        os.makedirs(tmp_root(), exist_ok=True)
        self.name = name
        self.dir = tempfile.mkdtemp(prefix="rdbit-%s-" % safe[:60], dir=tmp_root())
        self.servers = []
        self.pidfile = os.environ.get("RDB_PIDFILE")  # set by run.py
        self._n = 0
        self._lock = threading.Lock()

    def mkdir(self, name):
        with self._lock:
            self._n += 1
            path = os.path.join(self.dir, "%s.%d" % (name, self._n))
        os.makedirs(path)
        return path

    def note_pid(self, pid):
        if self.pidfile:
            with open(self.pidfile, "a") as f:
                f.write("%d\n" % pid)


_ctx = None


def begin_test(name):
    global _ctx
    _ctx = TestContext(name)
    return _ctx


def ctx():
    global _ctx
    if _ctx is None:  # a test run outside run.py
        _ctx = TestContext("adhoc")
    return _ctx


def kill_all_servers():
    """Kill (SIGKILL, by PID) every still-running server this test started."""
    if _ctx is None:
        return
    for s in _ctx.servers:
        try:
            if s.running():
                s.kill9()
        except Exception:
            pass


def end_test(ok, tail_lines=60):
    """Kills leftover servers; on failure prints log tails and keeps the temp
    dir, on success removes it."""
    global _ctx
    c = _ctx
    if c is None:
        return
    kill_all_servers()
    started = [s for s in c.servers if s.starts > 0]
    if not ok and started:
        for s in started:
            print("---- %s: last %d lines of %s ----" % (s.name, tail_lines, s.log_path))
            print(s.log_tail(tail_lines))
        print("---- temp dir kept: %s" % c.dir)
    elif os.environ.get("RDB_KEEP_TMP"):
        print("temp dir kept: %s" % c.dir)
    else:
        shutil.rmtree(c.dir, ignore_errors=True)
    _ctx = None


# ---------------------------------------------------------------------------
# Server


class ServerError(AssertionError):
    pass


class Server:
    """One rankdbd instance on one data directory (which survives restarts)."""

    def __init__(self, flags=(), data_dir=None, name="rankdbd", binary=None, http_port=0):
        c = ctx()
        self.http_port = http_port  # 0: a free port at each start; keep_port() pins it
        self.name = name
        self.workdir = c.mkdir(name)
        self.data_dir = data_dir or os.path.join(self.workdir, "data")
        self.flags = list(flags)
        self.binary = binary or bin_path()
        self.log_path = os.path.join(self.workdir, "stderr.log")
        self.proc = None
        self.port = None
        self.env = {}  # extra environment of the next starts (e.g. RANKDB_FAULTS)
        self.starts = 0
        self.last_rc = None
        self._local = threading.local()
        c.servers.append(self)

    # -- lifecycle ----------------------------------------------------------

    def _check_binary(self):
        if not os.path.isfile(self.binary):
            raise ServerError("rankdbd binary not found: %s (build it, or pass --bin)" % self.binary)
        if not os.access(self.binary, os.X_OK):
            raise ServerError("rankdbd binary is not executable: %s" % self.binary)

    def _spawn(self, extra_flags=()):
        self._check_binary()
        os.makedirs(self.data_dir, exist_ok=True)
        self.starts += 1
        self.port_file = os.path.join(self.workdir, "port.%d" % self.starts)
        argv = [self.binary, "--data-dir", self.data_dir, "--http-addr", "127.0.0.1",
                "--http-port", str(self.http_port), "--port-file", self.port_file]
        argv += self.flags + list(extra_flags)
        argv += env_flags(argv)
        log = open(self.log_path, "ab")
        log.write(("\n==== start #%d: %s\n" % (self.starts, " ".join(argv))).encode())
        log.flush()
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log, cwd=self.workdir,
                                         env=dict(os.environ, **self.env) if self.env else None)
        finally:
            log.close()
        ctx().note_pid(self.proc.pid)
        self.port = None
        self._drop_conns()
        return self.proc

    def start(self, extra_flags=()):
        """Starts the server and waits until it serves GET /healthz -> 200."""
        proc = self._spawn(extra_flags)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            rc = proc.poll()
            if rc is not None:
                self.last_rc = rc
                raise ServerError("rankdbd exited with %s during startup\n%s" % (rc, self.log_tail(30)))
            port = self._read_port_file()
            if port:
                self.port = port
                break
            if time.monotonic() > deadline:
                self.kill9()
                raise ServerError("rankdbd did not write its port file within %ds\n%s"
                                  % (START_TIMEOUT_S, self.log_tail(30)))
            time.sleep(0.05)
        last = None
        while True:
            try:
                st, _, body = self.request("GET", "/healthz", timeout=5)
                if st == 200:
                    return self
                last = "status %d: %r" % (st, body[:200])
            except (OSError, http.client.HTTPException) as e:
                last = repr(e)
            if proc.poll() is not None:
                self.last_rc = proc.returncode
                raise ServerError("rankdbd exited with %s during startup\n%s" % (proc.returncode, self.log_tail(30)))
            if time.monotonic() > deadline:
                self.kill9()
                raise ServerError("GET /healthz did not answer 200 within %ds (last: %s)\n%s"
                                  % (START_TIMEOUT_S, last, self.log_tail(30)))
            time.sleep(0.05)

    def start_expect_failure(self, extra_flags=(), timeout=START_TIMEOUT_S):
        """Starts the server expecting it to exit non-zero by itself.
        Returns (exit code, text logged by this start)."""
        before = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        proc = self._spawn(extra_flags)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise ServerError("rankdbd was expected to fail at startup but still runs after %ds\n%s"
                              % (timeout, self.log_tail(30)))
        self.last_rc = rc
        with open(self.log_path, "rb") as f:
            f.seek(before)
            text = f.read().decode("utf-8", "replace")
        if rc == 0:
            raise ServerError("rankdbd was expected to fail at startup but exited 0\n%s" % text[-3000:])
        return rc, text

    def _read_port_file(self):
        try:
            with open(self.port_file) as f:
                s = f.read()
        except FileNotFoundError:
            return None
        if not s.endswith("\n"):
            return None
        try:
            port = int(s.strip())
        except ValueError:
            return None
        return port if 0 < port < 65536 else None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def pid(self):
        return self.proc.pid

    def signal_stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT_S, expect_rc=0):
        assert self.proc is not None, "server was never started"
        self._drop_conns()
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise ServerError("rankdbd did not exit within %ds of %s\n%s"
                              % (timeout, signal.Signals(sig).name, self.log_tail(30)))
        self.last_rc = rc
        if expect_rc is not None and rc != expect_rc:
            raise ServerError("rankdbd exited with %d after %s (expected %d)\n%s"
                              % (rc, signal.Signals(sig).name, expect_rc, self.log_tail(30)))
        return rc

    def stop(self, timeout=STOP_TIMEOUT_S):
        """SIGTERM, wait, assert exit code 0."""
        return self.signal_stop(signal.SIGTERM, timeout)

    def kill9(self):
        self._drop_conns()
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc is not None:
            self.last_rc = self.proc.returncode

    def keep_port(self):
        """Later starts reuse the current port (clients keep their URL)."""
        self.http_port = self.port
        return self

    def restart(self, extra_flags=()):
        """Clean stop (if running) and start again on the same data dir."""
        if self.running():
            self.stop()
        return self.start(extra_flags)

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n=40):
        lines = self.log_text().splitlines()
        return "\n".join(lines[-n:])

    # -- HTTP -----------------------------------------------------------------

    def _drop_conns(self):
        conns = getattr(self._local, "conns", None)
        if conns:
            for c in conns.values():
                try:
                    c.close()
                except Exception:
                    pass
            conns.clear()
        # keep-alive connections of other threads die with the server socket
        self._local = threading.local()

    def _conn(self, timeout):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, keepalive=False,
                timeout=REQUEST_TIMEOUT_S):
        """Returns (status, headers dict with lower-case names, body bytes)."""
        assert self.port, "server is not running"
        if isinstance(body, str):
            body = body.encode("utf-8")
        hdrs = dict(headers or {})
        if not keepalive:
            hdrs.setdefault("Connection", "close")
        if keepalive:
            conns = getattr(self._local, "conns", None)
            if conns is None:
                conns = self._local.conns = {}
            conn = conns.get(self.port)
            reused = conn is not None
            if conn is None:
                conn = conns[self.port] = self._conn(timeout)
            try:
                return self._do(conn, method, path, body, hdrs)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                conns.pop(self.port, None)
                # a reused idle connection may have been closed by the server:
                # retrying is safe only for requests without side effects
                if reused and method in ("GET", "HEAD"):
                    conn = conns[self.port] = self._conn(timeout)
                    return self._do(conn, method, path, body, hdrs)
                raise
            except Exception:
                conn.close()
                conns.pop(self.port, None)
                raise
        conn = self._conn(timeout)
        try:
            return self._do(conn, method, path, body, hdrs)
        finally:
            conn.close()

    @staticmethod
    def _do(conn, method, path, body, hdrs):
        try:
            conn.request(method, path, body=body, headers=hdrs)
        except (BrokenPipeError, ConnectionResetError):
            # the server may answer (413) and close before reading the whole
            # body; try to read its answer anyway
            pass
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, content_type="application/json", **kw):
        headers = dict(kw.pop("headers", None) or {})
        headers.setdefault("Content-Type", content_type)
        return self.request("POST", path, body=body, headers=headers, **kw)

    def get_json(self, path, **kw):
        st, h, body = self.get(path, **kw)
        return st, parse_json(body, st, path)

    def post_json(self, path, body, **kw):
        st, h, data = self.post(path, body, **kw)
        return st, parse_json(data, st, path)

    # -- rankdb API helpers ---------------------------------------------------

    def write(self, records, ndjson=False, **kw):
        """POSTs records (list of dicts) as a JSON array or NDJSON."""
        if ndjson:
            body = "".join(json.dumps(r) + "\n" for r in records)
            return self.post_json("/api/v1/write", body, content_type="application/x-ndjson", **kw)
        return self.post_json("/api/v1/write", json.dumps(records), **kw)

    def write_ok(self, records, ndjson=False, **kw):
        st, obj = self.write(records, ndjson=ndjson, **kw)
        assert st == 200, "write failed: %d %r" % (st, obj)
        npts = sum(len(r["metrics"]) for r in records)
        assert obj.get("accepted_points") == npts, "accepted_points %r, expected %d" % (obj, npts)
        assert obj.get("records") == len(records), "records %r, expected %d" % (obj, len(records))
        return obj

    def query(self, **params):
        """GET /api/v1/query/range; list values become repeated parameters."""
        return self.get_json(query_path(params))

    def query_ok(self, **params):
        st, obj = self.query(**params)
        assert st == 200, "query %r failed: %d %r" % (params, st, obj)
        check_query_shape(obj)
        return obj


# ---------------------------------------------------------------------------
# helpers


def query_path(params):
    items = []
    for k, v in params.items():
        if isinstance(v, (list, tuple)):
            for x in v:
                items.append((k, str(x)))
        elif v is not None:
            items.append((k, str(v)))
    return "/api/v1/query/range?" + urllib.parse.urlencode(items)


def parse_json(body, status=None, what=""):
    try:
        return json.loads(body.decode("utf-8"))
    except Exception as e:
        raise AssertionError("response to %s (status %s) is not JSON (%s): %r"
                             % (what, status, e, body[:500]))


def bits(x):
    """IEEE-754 bits of a Python float (or int, converted exactly-rounded)."""
    return struct.unpack("<Q", struct.pack("<d", float(x)))[0]


def from_bits(b):
    return struct.unpack("<d", struct.pack("<Q", b))[0]


def f32(x):
    """A float32 value widened to double (what tensor.item() returns)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


NULL = "null"
NAN_BITS = 0x7FF8000000000000
INF_BITS = 0x7FF0000000000000
NINF_BITS = 0xFFF0000000000000


def decode_value(v):
    """A query-response value -> int bits, or NULL. Checks the spec's form:
    finite values are JSON numbers, NaN is "NaN", infinities "+Inf"/"-Inf",
    other NaNs "0x<16 hex>"."""
    if v is None:
        return NULL
    if isinstance(v, bool):
        raise AssertionError("value is a JSON boolean: %r" % v)
    if isinstance(v, (int, float)):
        b = bits(v)
        assert math.isfinite(float(v)), "non-finite value as JSON number: %r" % v
        return b
    if isinstance(v, str):
        if v == "NaN":
            return NAN_BITS
        if v == "+Inf":
            return INF_BITS
        if v == "-Inf":
            return NINF_BITS
        if v.startswith("0x") and len(v) == 18:
            b = int(v[2:], 16)
            assert math.isnan(from_bits(b)), "0x form used for a non-NaN value: %r" % v
            assert b != NAN_BITS, "canonical NaN must be written \"NaN\", got %r" % v
            return b
        raise AssertionError("unexpected string value in response: %r" % v)
    raise AssertionError("unexpected value type in response: %r" % (v,))


def expected_bits(v):
    """What a value written by a test should read back as (bits or NULL)."""
    if v is None:
        return NULL
    if isinstance(v, str):
        s = v
        if s in ("NaN",):
            return NAN_BITS
        if s in ("Inf", "+Inf", "Infinity"):
            return INF_BITS
        if s in ("-Inf", "-Infinity"):
            return NINF_BITS
        if s.startswith("0x"):
            return int(s[2:], 16)
        raise ValueError(s)
    if isinstance(v, float) and math.isnan(v):
        return NAN_BITS
    return bits(v)


def fmt_bits(b):
    if b == NULL:
        return "null"
    return "0x%016x(%r)" % (b, from_bits(b))


def check_query_shape(obj):
    assert isinstance(obj, dict) and isinstance(obj.get("series"), list), "bad query response: %r" % (obj,)
    total = 0
    for s in obj["series"]:
        for k in ("job", "rank", "metric", "timestamps", "steps", "attempts", "values"):
            assert k in s, "series lacks %r: %r" % (k, {x: s[x] for x in s if not isinstance(s[x], list)})
        n = len(s["timestamps"])
        assert n > 0, "series with no points must be omitted: %r" % s
        assert len(s["steps"]) == n and len(s["attempts"]) == n and len(s["values"]) == n, \
            "column lengths differ in series %s/%s/%s" % (s["job"], s["rank"], s["metric"])
        ts = s["timestamps"]
        assert all(isinstance(t, int) for t in ts), "timestamps must be integers"
        assert all(ts[i] <= ts[i + 1] for i in range(n - 1)), \
            "points of %s/%s/%s not sorted by timestamp" % (s["job"], s["rank"], s["metric"])
        total += n
    assert obj.get("points") == total, "points=%r but series hold %d" % (obj.get("points"), total)


def series_map(obj):
    """{(job, rank, metric): [(ts, step, attempt, bits-or-NULL), ...]}"""
    out = {}
    for s in obj["series"]:
        key = (s["job"], s["rank"], s["metric"])
        assert key not in out, "series %r appears twice in one response" % (key,)
        out[key] = [(t, st, a, decode_value(v))
                    for t, st, a, v in zip(s["timestamps"], s["steps"], s["attempts"], s["values"])]
    return out


def expected_series(records, job=None, ranks=None, metrics=None, tfrom=None, tto=None,
                    step_from=None, step_to=None):
    """The series_map() a range query should return for what records wrote
    (records must all carry timestamps)."""
    out = {}
    for r in records:
        if job is not None and r["job"] != job:
            continue
        if ranks is not None and r["rank"] not in ranks:
            continue
        ts = r["timestamp"]
        step = r.get("step")
        if tfrom is not None and ts < tfrom:
            continue
        if tto is not None and ts > tto:
            continue
        if step_from is not None or step_to is not None:
            if step is None:
                continue
            if step_from is not None and step < step_from:
                continue
            if step_to is not None and step > step_to:
                continue
        for m, v in r["metrics"].items():
            if metrics is not None and m not in metrics:
                continue
            out.setdefault((r["job"], r["rank"], m), []).append(
                (ts, step, r.get("attempt", 0), expected_bits(v)))
    for k in out:
        out[k].sort(key=lambda p: p[0])
    return out


def assert_series_equal(got, want, what="query"):
    """Compares two series_map()s and reports the first differences."""
    if got == want:
        return
    msgs = []
    for k in sorted(set(got) | set(want), key=repr):
        if k not in got:
            msgs.append("%s: series %r missing (%d points expected)" % (what, k, len(want[k])))
        elif k not in want:
            msgs.append("%s: unexpected series %r (%d points)" % (what, k, len(got[k])))
        elif got[k] != want[k]:
            g, w = got[k], want[k]
            msgs.append("%s: series %r: %d points, expected %d" % (what, k, len(g), len(w)))
            for i in range(max(len(g), len(w))):
                a = g[i] if i < len(g) else None
                b = w[i] if i < len(w) else None
                if a != b:
                    def f(p):
                        return None if p is None else (p[0], p[1], p[2], fmt_bits(p[3]))
                    msgs.append("   first difference at point %d: got %r, expected %r" % (i, f(a), f(b)))
                    break
        if len(msgs) > 20:
            break
    raise AssertionError("\n".join(msgs))


def assert_error(st, obj, want_status, record=None, field=None, what=""):
    """A 4xx/5xx with a JSON body {"error": "<non-empty>", ...}."""
    assert st == want_status, "%s: status %d, expected %d; body %r" % (what, st, want_status, obj)
    assert isinstance(obj, dict) and isinstance(obj.get("error"), str) and obj["error"], \
        "%s: error body must be {\"error\": \"<message>\"}, got %r" % (what, obj)
    if record is not None:
        assert obj.get("record") == record, "%s: error names record %r, expected %r: %r" % (
            what, obj.get("record"), record, obj)
    if field is not None:
        assert field in str(obj.get("field", "")), "%s: error field %r does not name %r: %r" % (
            what, obj.get("field"), field, obj)


def segment_files(data_dir):
    d = os.path.join(data_dir, "chunks")
    if not os.path.isdir(d):
        return []
    return sorted(os.path.join(d, f) for f in os.listdir(d)
                  if f.startswith("seg-") and f.endswith(".dat"))


SEG_HEADER = 32
CHUNK_HEADER = 48
CHUNK_MAGIC = 0x314B4843


def parse_segment(path):
    """[(offset of chunk header, payload length), ...] of a segment file."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"RDBSEG\x00\x01", "%s: bad segment magic %r" % (path, data[:8])
    out = []
    off = SEG_HEADER
    while off + CHUNK_HEADER <= len(data):
        magic, plen = struct.unpack_from("<II", data, off)
        if magic != CHUNK_MAGIC:
            break
        if off + CHUNK_HEADER + plen > len(data):
            break
        out.append((off, plen))
        off += CHUNK_HEADER + plen
    return out


def wait_until(pred, timeout=30, interval=0.05, what="condition"):
    """Polls pred() until true; this is for eventual state, never a timing check."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(interval)


T0 = 1_700_000_000_000_000_000  # ns


def jobs_brief(obj):
    """GET /api/v1/jobs reduced to job and series count of each entry."""
    return {"jobs": [{"job": j["job"], "series": j["series"]} for j in obj["jobs"]]}


def jobs_stored(obj):
    """GET /api/v1/jobs without the detection fields (state, firing_alerts):
    what storage says, equal across a restart."""
    return {"jobs": [{k: v for k, v in j.items() if k not in ("state", "firing_alerts")}
                     for j in obj["jobs"]]}
