"""The benchmark loader (bench/rdb-load, event-driven: epoll threads over
keep-alive connections) tells the truth: what it says it sent is what the
real rankdbd stores, over several connections and threads, in line protocol
and JSON; against a stub server it retries 429/503 after Retry-After without
stalling its other connections, reopens connections the server closes,
reads chunked and Content-Length answers, and counts a non-retryable status
as an error (exit 1). No timings are asserted."""

import http.server
import json
import os
import subprocess
import threading
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
    in arrival order) as plan(k) says: (status, headers, body, chunked)."""

    def __init__(self, plan):
        self.plan = plan
        self.lock = threading.Lock()
        self.log = []  # (k, status, body bytes) in arrival order
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with stub.lock:
                    k = len(stub.log) + 1
                    status, hdrs, out, chunked = stub.plan(k)
                    stub.log.append((k, status, body))
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

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def lp_records(body):
    return sum(1 for ln in body.split(b"\n") if ln.strip())


def test_loader_retries_reconnects_and_framing():
    ok = (200, [], b'{"accepted_points":4}', False)

    def plan(k):
        if k == 3:
            return (429, [("Retry-After", "1")], b"slow down", False)  # a 1 s timer
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
    # the retry waits were timers: on one event-loop thread, the other
    # connections kept sending while the 429'd body waited
    again3 = [j for j, _, b in log if b == log[2][2] and j > 3][0]
    assert again3 > 3 + 1, "no request between the 429 and its resend (%d)" % again3
    # the two Connection: close answers were followed by two reopenings
    assert r["reconnects"] == "2", r


def test_loader_counts_a_refused_body_as_error():
    def plan(k):
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
