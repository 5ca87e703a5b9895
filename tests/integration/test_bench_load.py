"""The benchmark loader (bench/rdb-load, event-driven: epoll threads over
keep-alive connections) tells the truth: what it says it sent is what the
real rankdbd stores, over several connections and threads, in line protocol
and JSON; against a stub server it retries 429/503 after Retry-After without
stalling its other connections, reopens connections the server closes,
reads chunked and Content-Length answers, counts a non-retryable status as
an error (exit 1), resends uncounted only what the server cannot have taken
(a request not written whole) and counts every other resend, the keep-alive
idle-close race included, and takes
an answer sent before the whole body (413/503 + close) as the outcome, and
refuses --threads with --udp instead of ignoring it.
No durations are asserted, only that a Retry-After wait was not shorter
than asked."""

import http.server
import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse

import harness
from harness import Server

LOAD_TIMEOUT_S = 120


def load_bin():
    # build/server/rankdbd -> build/bench/rdb-load (one build tree)
    b = os.path.join(os.path.dirname(os.path.dirname(harness.bin_path())), "bench", "rdb-load")
    assert os.access(b, os.X_OK), "rdb-load not built next to rankdbd: %s" % b
    return b


def run_load(args, expect_rc=0):
    p = subprocess.run([load_bin()] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=LOAD_TIMEOUT_S)
    out = p.stdout.decode()
    assert p.returncode == expect_rc, "rdb-load exit %d (want %d)\n%s\n%s" % (
        p.returncode, expect_rc, out, p.stderr.decode())
    res = [ln for ln in out.splitlines() if ln.startswith("result ")]
    assert len(res) == 1, "no result line:\n%s" % out
    return {k: v for k, v in (t.split("=", 1) for t in res[0].split()[1:])}, p.stderr.decode()


def stored_points(srv, job):
    st, _, body = srv.get("/api/v1/jobs/%s/metrics" % job)
    assert st == 200, "metrics of %s: %d %r" % (job, st, body)
    metrics = json.loads(body)["metrics"]
    obj = srv.query_ok(job=job, metric=",".join(metrics), attempt="all")
    return obj["points"], len(metrics)


def test_loader_counts_match_rankdbd():
    srv = Server()
    srv.start()
    # 8 ranks x 50 steps, one record per POST: 400 requests over 8 connections, 2 threads
    wl = ["--ranks", "8", "--steps", "50", "--metrics", "4", "--port", str(srv.port)]
    r, _ = run_load(wl + ["--seed", "1", "--format", "lp", "--batch-records", "1",
                          "--connections", "8", "--threads", "2", "--path", "/write?precision=ns"])
    assert r["bodies"] == "400" and r["errors"] == "0", r
    assert int(r["points"]) == 400 * 4, r
    points, nmetrics = stored_points(srv, "bench-1")
    assert nmetrics == 4, nmetrics
    assert points == int(r["points"]), "stored %d points, rdb-load sent %s" % (points, r["points"])

    # JSON bodies of 2 ranks x 3 steps over 5 connections on 1 thread: a
    # last step block shorter than the others (50 = 16 x 3 + 2)
    r, _ = run_load(wl + ["--seed", "2", "--format", "json", "--batch-records", "6",
                          "--ranks-per-body", "2", "--connections", "5", "--threads", "1"])
    assert r["errors"] == "0" and r["bodies"] == str(17 * 4), r
    points, _ = stored_points(srv, "bench-2")
    assert points == int(r["points"]) == 400 * 4, (points, r)
    srv.stop()


class Stub:
    """A loopback HTTP/1.1 server that answers request number k (1-based,
    in arrival order), the nth on its connection, as plan(k, nth) says:
    (status, headers, body, chunked), or one of
      ("drop",)   read the request, close without an answer (logged as 0)
      ("cut",)    read it, send half a response, close (logged as 0)
      ("stall", s) read it, say nothing for s seconds, close (logged as 0)
      ("idle-close",) answer 204 keep-alive, then close at once (logged 204)
      ("early", status, headers, body)  answer before reading the body and
                  close (the body is logged as b"")."""

    def __init__(self, plan):
        self.plan = plan
        self.lock = threading.Lock()
        self.log = []  # (k, status, body bytes) in arrival order
        self.times = []  # time.monotonic() of each request's arrival
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            nth = 0

            def log_message(self, *a):
                pass

            def do_POST(self):
                self.nth += 1
                with stub.lock:
                    k = len(stub.log) + 1
                    act = stub.plan(k, self.nth)
                    stub.log.append((k, 0, b""))
                    stub.times.append(time.monotonic())
                if act[0] == "early":
                    self.answer(act[1], act[2], act[3], False)
                    self.close_connection = True
                    return
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with stub.lock:
                    stub.log[k - 1] = (k, act[0] if isinstance(act[0], int) else 0, body)
                if act[0] == "cut":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"acc")
                if act[0] == "stall":
                    time.sleep(act[1])
                if act[0] == "idle-close":
                    with stub.lock:
                        stub.log[k - 1] = (k, 204, body)
                    self.answer(204, [], b"", False)
                if not isinstance(act[0], int):
                    self.close_connection = True
                    return
                self.answer(*act)

            def answer(self, status, hdrs, out, chunked):
                self.send_response(status)
                for name, v in hdrs:
                    self.send_header(name, v)
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                if chunked:
                    for i in range(0, len(out), 3):
                        piece = out[i:i + 3]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.wfile.write(out)
                if ("Connection", "close") in hdrs:
                    self.close_connection = True

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def again(self, k):
        """Request numbers after k that carried request k's body."""
        body = self.log[k - 1][2]
        return [j for j, _, b in self.log if b == body and j > k]

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def lp_records(body):
    return sum(1 for ln in body.split(b"\n") if ln.strip())


def test_loader_retries_reconnects_and_framing():
    ok = (200, [], b'{"accepted_points":4}', False)

    def plan(k, _nth):
        if k == 3:
            return (429, [("Retry-After", "2")], b"slow down", False)  # a 2 s timer
        if k == 7:
            return (503, [("Retry-After", "0")], b"", True)  # resend at once
        if k == 11:
            return (429, [], b"", False)  # no Retry-After: 1 s
        if k in (20, 40):
            return (200, [("Connection", "close")], b"{}", False)
        if k % 2:
            return (200, [], b'{"accepted_points":4}', True)  # chunked
        if k % 5 == 0:
            return (204, [], b"", False)
        return ok

    stub = Stub(plan)
    try:
        r, err = run_load(["--ranks", "4", "--steps", "60", "--metrics", "4", "--format", "lp",
                           "--batch-records", "1", "--connections", "4", "--threads", "1",
                           "--port", str(stub.port), "--path", "/write?precision=ns"])
    finally:
        stub.stop()
    log = stub.log
    assert r["errors"] == "0" and r["retries"] == "3", (r, err)
    assert r["bodies"] == "240" and int(r["points"]) == 240 * 4, r
    # what the stub answered 2xx is what the loader counted, body for body
    ok_bodies = [b for _, st, b in log if 200 <= st < 300]
    assert len(ok_bodies) == 240 and len(set(ok_bodies)) == 240, len(ok_bodies)
    assert sum(lp_records(b) for b in ok_bodies) * 4 == int(r["points"])
    assert sum(len(b) for b in ok_bodies) == int(r["bytes"]), r
    # every refused body came again, and was then accepted
    for k in (3, 7, 11):
        body = log[k - 1][2]
        again = [j for j, st, b in log if b == body and j > k]
        assert again and 200 <= log[again[0] - 1][1] < 300, (k, again)
    # the retry waits were timers: on one event-loop thread, the other 3
    # connections kept completing requests while the 429'd body waited its
    # 2 s (~60 a second here, the stub's Nagle + delayed-ACK pace); a sleep
    # would have stalled them (at most the 3 requests already on their way
    # would arrive in between)
    again3 = stub.again(3)[0]
    between = again3 - 3 - 1
    assert between > 4 * 4, "only %d requests between the 429 and its resend" % between
    assert stub.times[again3 - 1] - stub.times[2] >= 2.0, "resent before Retry-After: 2"
    # the two Connection: close answers were followed by two reopenings
    assert r["reconnects"] == "2", r
    assert r["resends"] == "0", r


def test_loader_counts_a_refused_body_as_error():
    def plan(k, _nth):
        if k == 5:
            return (400, [], b'{"error":"bad line 1"}', False)
        return (204, [], b"", False)

    stub = Stub(plan)
    try:
        r, err = run_load(["--ranks", "2", "--steps", "20", "--metrics", "2", "--format", "lp",
                           "--batch-records", "1", "--connections", "3", "--port",
                           str(stub.port), "--path", "/write"], expect_rc=1)
    finally:
        stub.stop()
    assert r["errors"] == "1" and r["bodies"] == "39" and r["retries"] == "0", r
    assert int(r["points"]) == 39 * 2, r
    assert "HTTP 400" in err and "bad line 1" in err, err
    assert len(stub.log) == 40  # not retried


LP_WL = ["--ranks", "4", "--steps", "60", "--metrics", "4", "--format", "lp", "--batch-records",
         "1", "--connections", "4", "--threads", "1", "--path", "/write"]


def ok_bodies(stub):
    return [b for _, st, b in stub.log if 200 <= st < 300]


def test_loader_resends_after_a_close_without_answer_and_counts_written_bodies():
    # The server closes a keep-alive connection that had answered before:
    # after reading a request whole without answering it (it may have
    # stored it: counted as a resend that may duplicate), or right after an
    # answer, so that the next request meets a closed socket (counted only
    # if the loader could write it whole before the reset came back: which
    # one is up to the kernel's timing). Every body is resent and delivered.
    drops, closes = [], []

    def plan(k, nth):
        if nth == 3 and len(drops) < 3:
            drops.append(k)
            return ("drop",)
        if nth == 6 and len(closes) < 2:
            closes.append(k)
            return ("idle-close",)
        return (204, [], b"", False)

    stub = Stub(plan)
    try:
        r, err = run_load(LP_WL + ["--port", str(stub.port)])
    finally:
        stub.stop()
    assert len(drops) == 3 and len(closes) == 2, (drops, closes)
    assert r["errors"] == "0" and r["retries"] == "0", (r, err)
    assert 3 <= int(r["resends"]) <= 5, r
    assert r["reconnects"] == "5", r
    oks = ok_bodies(stub)
    assert r["bodies"] == "240" and len(oks) == 240 and len(set(oks)) == 240, (r, len(oks))
    for k in drops:
        assert stub.again(k), "dropped request %d never came again" % k


def test_loader_counts_resends_that_may_duplicate():
    # Three failures after which the server may hold the body: the first
    # request on a fresh connection closed unanswered, an answer cut short
    # on a reused one, and no progress for --timeout-s. Each body is resent
    # (the run completes) and counted.
    bad = {}

    def plan(k, nth):
        if k == 10:
            return (204, [("Connection", "close")], b"", False)
        if k > 10 and nth == 1 and "drop" not in bad:
            bad["drop"] = k
            return ("drop",)
        if k >= 30 and nth > 1 and "cut" not in bad:
            bad["cut"] = k
            return ("cut",)
        if k >= 60 and nth > 1 and "stall" not in bad:
            bad["stall"] = k
            return ("stall", 8)
        return (204, [], b"", False)

    stub = Stub(plan)
    try:
        r, err = run_load(LP_WL + ["--port", str(stub.port), "--timeout-s", "3"])
    finally:
        stub.stop()
    assert sorted(bad) == ["cut", "drop", "stall"], bad
    assert r["errors"] == "0" and r["resends"] == "3", (r, err)
    oks = ok_bodies(stub)
    assert r["bodies"] == "240" and len(oks) == 240 and len(set(oks)) == 240, (r, len(oks))
    for what, k in bad.items():
        body = stub.log[k - 1][2]
        assert body and body in oks, "%s request %d was not resent" % (what, k)


# one body of ~19 MB (20000 records x 32 metrics): far more than the socket
# buffers take while the server does not read
BIG_WL = ["--ranks", "1", "--steps", "20000", "--metrics", "32", "--format", "lp",
          "--batch-records", "20000", "--connections", "1", "--path", "/write"]


def test_loader_takes_an_early_answer():
    # The server answers 503 + Retry-After before reading the body and
    # closes: the loader's write fails, yet the outcome is the 503, waited
    # for and retried, not a broken pipe.
    def plan(k, _nth):
        if k == 1:
            return ("early", 503, [("Retry-After", "1"), ("Connection", "close")], b"busy")
        return (204, [], b"", False)

    stub = Stub(plan)
    try:
        r, err = run_load(BIG_WL + ["--port", str(stub.port)])
    finally:
        stub.stop()
    assert r["errors"] == "0" and r["retries"] == "1" and r["resends"] == "0", (r, err)
    assert r["bodies"] == "1" and len(stub.log) == 2, (r, len(stub.log))
    assert len(stub.log[1][2]) == int(r["bytes"]) > 8 << 20, r
    assert stub.times[1] - stub.times[0] >= 1.0, "resent before Retry-After: 1"

    # a refusal that is final is reported with its status and body
    def refuse(k, _nth):
        return ("early", 413, [("Connection", "close")], b"body too large")

    stub = Stub(refuse)
    try:
        r, err = run_load(BIG_WL + ["--port", str(stub.port), "--max-retries", "0"],
                          expect_rc=1)
    finally:
        stub.stop()
    assert r["errors"] == "1" and r["bodies"] == "0", r
    assert "HTTP 413" in err and "body too large" in err, err
    assert len(stub.log) == 1, len(stub.log)


def test_loader_backs_off_a_refused_connect():
    # A port that refuses (bound, not listening): every connect fails at
    # once. The loader reports the failed start, waits 0.1 s after each
    # failed connect (3 waits per send before it gives the send up), and
    # counts every send as an error, instead of draining them in a blink.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    try:
        r, err = run_load(["--ranks", "1", "--steps", "4", "--metrics", "2", "--format", "lp",
                           "--batch-records", "1", "--connections", "1", "--port",
                           str(closed.getsockname()[1])], expect_rc=1)
    finally:
        closed.close()
    assert r["start_connect_failures"] == "1" and r["errors"] == "4", r
    assert r["bodies"] == "0" and r["resends"] == "0", r
    assert "refused" in err, err
    assert float(r["seconds"]) >= 4 * 3 * 0.1 - 0.05, r


def test_loader_refuses_threads_with_udp():
    # --threads sizes the HTTP event loop; with --udp it would do nothing, so
    # it is a usage error (exit 2, nothing sent), not an option that is
    # silently ignored. The same command without it sends.
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        rx.setblocking(False)
        args = [load_bin(), "--ranks", "2", "--steps", "5", "--metrics", "2", "--udp",
                "--connections", "2", "--host", "127.0.0.1", "--port", str(rx.getsockname()[1])]
        p = subprocess.run(args + ["--threads", "2"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=LOAD_TIMEOUT_S)
        err = p.stderr.decode()
        assert p.returncode == 2, "exit %d\n%s" % (p.returncode, err)
        assert "--threads" in err and "--udp" in err, err
        try:
            got = rx.recv(65536)
        except BlockingIOError:
            got = None
        assert got is None, "a refused run sent %r" % got[:80]
        r, _ = run_load(args[1:])
        assert r["udp"] == "1" and int(r["datagrams"]) > 0, r
        assert r["datagrams"] == r["planned"] and r["send_errors"] == "0", r
    finally:
        rx.close()
