"""Reliability (issue 10): what a torture run found. Each test reproduces one
finding against the real server: a request-supplied regex that would take
gigabytes, WAL damage in the middle of the log, verify being read-only, slow
and stalled clients, refusal logging, the smaller protocol items."""

import json
import os

import harness
from harness import T0, Server

SEC = 1_000_000_000


def _vm_kb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError("%s not in /proc/%d/status" % (key, pid))


def _grafana_query(targets, **extra):
    body = {"range": {"from": "2023-11-14T22:13:20.000Z", "to": "2023-11-14T23:13:20.000Z"},
            "intervalMs": 1000, "maxDataPoints": 100, "targets": targets}
    body.update(extra)
    return body


def test_regex_blowup_refused_with_400():
    s = Server().start()
    s.write_ok([{"job": "j1", "rank": r, "step": 1, "timestamp": T0 + r,
                 "metrics": {"loss": 1.0, "lr": 0.1}} for r in range(4)])
    bomb = "((a{255}){255}){255}"
    st, _, data = s.post("/grafana/query", json.dumps(_grafana_query(
        [{"refId": "A", "target": bomb, "payload": {"job": "j1"}}])))
    obj = json.loads(data)
    assert st == 400, (st, obj)
    assert "too complex" in obj["message"], obj
    # the same pattern as an ad hoc =~ filter, and a backreference
    for op, val in (("=~", bomb), ("!~", bomb), ("=~", "(a)\\1")):
        st, _, data = s.post("/grafana/query", json.dumps(_grafana_query(
            [{"refId": "A", "target": "loss"}],
            filters=[{"key": "metric", "operator": op, "value": val}])))
        obj = json.loads(data)
        assert st == 400, (op, val, st, obj)
        assert "regex" in obj["message"], obj
    # ordinary patterns still work
    st, _, data = s.post("/grafana/query", json.dumps(_grafana_query(
        [{"refId": "A", "target": "(loss|lr)", "payload": {"job": "j1"}}],
        filters=[{"key": "rank", "operator": "=~", "value": "[0-1]"}])))
    assert st == 200, (st, data[:300])
    assert len(json.loads(data)) == 4, data[:300]
    # memory: the high-water mark stayed far from the gigabytes it took before
    hwm_kb = _vm_kb(s.pid(), "VmHWM")
    assert hwm_kb < 256 * 1024, "rankdbd peak RSS %d KiB after the patterns" % hwm_kb
    s.stop()


def _rankctl(*args):
    import subprocess
    exe = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        os.environ.get("RDB_BIN") or "build/server/rankdbd"))), "tools", "rankctl")
    return subprocess.run([exe] + list(args), capture_output=True, text=True, timeout=120)


def _wal_files(data_dir):
    d = os.path.join(data_dir, "wal")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.startswith("wal-"))


def _wal_records(path):
    """(offset, length, type) of each record of a WAL file (header 32, record
    header 16: u32 payload length, u8 type)."""
    import struct
    with open(path, "rb") as f:
        data = f.read()
    out, off = [], 32
    while off + 16 <= len(data):
        (n,) = struct.unpack_from("<I", data, off)
        out.append((off, 16 + n, data[off + 4]))
        off += 16 + n
    return out


WAL_DEFS, WAL_CBATCH = 4, 5  # series definitions, compact batch (docs/FORMAT.md)


def _ten_acked_records(s, job="walj"):
    for b in range(10):
        s.write_ok([{"job": job, "rank": 0, "step": b * 100 + i, "timestamp": T0 + (b * 100 + i) * SEC,
                     "metrics": {"loss": float(b * 100 + i)}} for i in range(100)])


def _tree(d):
    """Every file under d with its size, mtime and content: what read-only means."""
    import hashlib
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            st = os.stat(p)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = (st.st_size, st.st_mtime_ns,
                                              hashlib.sha256(fh.read()).hexdigest())
    return out


def test_wal_damage_in_the_middle_keeps_the_intact_records():
    # detection off: its alert events would be WAL records of their own
    # (the rising loss below is a LossDivergence), and this test counts records
    s = Server(["--detect", "off"]).start()
    _ten_acked_records(s)
    s.kill9()
    wal = _wal_files(s.data_dir)[-1]
    recs = _wal_records(wal)
    # the series' definition, then the ten writes naming it by id
    assert [t for _, _, t in recs] == [WAL_DEFS] + [WAL_CBATCH] * 10, recs
    off, length, _ = recs[1]
    with open(wal, "r+b") as f:  # one bit in the payload of the first write
        f.seek(off + 16 + length // 2)
        b = f.read(1)
        f.seek(off + 16 + length // 2)
        f.write(bytes([b[0] ^ 0x10]))
    # verify sees the damage before any start, and changes nothing
    before = _tree(s.data_dir)
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "damaged record" in r.stdout + r.stderr, r.stdout + r.stderr
    assert _tree(s.data_dir) == before
    s.start()
    log = s.log_text()
    assert "this is damage, not a crash" in log, log[-3000:]
    obj = s.query_ok(job="walj", metric="loss", step_from=0, step_to=10_000)
    steps = obj["series"][0]["steps"] if obj["series"] else []
    assert steps == list(range(100, 1000)), "got %d points, expected the 900 of the 9 intact records" % len(steps)
    # the damaged bytes are kept aside, byte for byte
    qdir = os.path.join(s.data_dir, "quarantine")
    kept = [f for f in os.listdir(qdir) if f.endswith(".damaged")]
    assert len(kept) == 1, kept
    assert os.path.getsize(os.path.join(qdir, kept[0])) == length
    st, _, body = s.get("/metrics")
    text = body.decode()
    assert "rankdb_wal_damaged_ranges 1\n" in text, text
    assert "rankdb_wal_damage_kept_files 1\n" in text, text
    # restarts keep reporting it (the WAL file itself is gone after the checkpoint)
    s.stop()
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 3 and "WAL damage kept in" in r.stdout + r.stderr, r.stdout + r.stderr
    s.start()
    st, _, body = s.get("/metrics")
    assert "rankdb_wal_damage_kept_files 1\n" in body.decode()
    obj = s.query_ok(job="walj", metric="loss", step_from=0, step_to=10_000)
    assert obj["series"][0]["steps"] == list(range(100, 1000))
    s.stop()


def test_wal_damage_in_a_definitions_record_is_counted():
    """The writes after a damaged series definition name an id their file no
    longer defines: replay skips them (their points are lost with the
    definition), and says so: an ERROR per record, a gauge, and verify."""
    s = Server(["--detect", "off"]).start()
    _ten_acked_records(s)
    s.kill9()
    wal = _wal_files(s.data_dir)[-1]
    recs = _wal_records(wal)
    assert recs[0][2] == WAL_DEFS, recs
    off, length, _ = recs[0]
    with open(wal, "r+b") as f:
        f.seek(off + 16 + length // 2)
        b = f.read(1)
        f.seek(off + 16 + length // 2)
        f.write(bytes([b[0] ^ 0x10]))
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "10 record(s) name a series id that no earlier record" in r.stdout + r.stderr, r.stdout + r.stderr
    s.start()
    assert "which no earlier record of its file defines" in s.log_text()
    st, _, body = s.get("/metrics")
    text = body.decode()
    assert "rankdb_wal_undefined_records 10\n" in text, text
    assert "rankdb_wal_damaged_ranges 1\n" in text, text
    obj = s.query_ok(job="walj", metric="loss", step_from=0, step_to=10_000)
    assert not obj["series"], obj
    s.stop()


def test_torn_tail_is_not_damage():
    s = Server(["--detect", "off"]).start()  # counts WAL records, as above
    _ten_acked_records(s)
    s.kill9()
    wal = _wal_files(s.data_dir)[-1]
    off, length, _ = _wal_records(wal)[-1]
    with open(wal, "r+b") as f:  # a crash in the middle of appending one more record
        f.seek(0, 2)
        f.write(bytes(f.read(0)) + b"\x40\x00\x00\x00\x03\x00\x00\x00" + b"\x00" * 20)
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    s.start()
    obj = s.query_ok(job="walj", metric="loss", step_from=0, step_to=10_000)
    assert obj["series"][0]["steps"] == list(range(1000))
    assert not os.path.isdir(os.path.join(s.data_dir, "quarantine")) or not os.listdir(
        os.path.join(s.data_dir, "quarantine"))
    s.stop()


def test_verify_on_data_dir_is_read_only():
    s = Server().start()
    _ten_acked_records(s)
    s.kill9()
    before = _tree(s.data_dir)
    assert any(p.startswith("wal/") for p in before), before
    for _ in range(2):
        r = _rankctl("--data-dir", s.data_dir, "verify")
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        assert '"ok":true' in r.stdout, r.stdout
        assert _tree(s.data_dir) == before, "verify changed the data directory"
    s.start()  # and the data is all there
    obj = s.query_ok(job="walj", metric="loss", step_from=0, step_to=10_000)
    assert obj["series"][0]["steps"] == list(range(1000))
    s.stop()


# ---------------------------------------------------------------------------
# slow and greedy clients (items 4, 5, 9)

import socket
import threading
import time


def _connect(s, timeout=10):
    c = socket.create_connection(("127.0.0.1", s.port), timeout=timeout)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


def _closed_by_server(c, wait_s):
    """True once the server closed c (EOF or reset) within wait_s."""
    c.settimeout(wait_s)
    try:
        while True:
            b = c.recv(4096)
            if not b:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def _count_closed(conns, wait_s):
    """How many of conns the server closed within wait_s (all waited on together)."""
    import select
    open_ = set(conns)
    closed = 0
    deadline = time.monotonic() + wait_s
    while open_ and time.monotonic() < deadline:
        r, _, _ = select.select(list(open_), [], [], max(0.0, deadline - time.monotonic()))
        for c in r:
            try:
                b = c.recv(4096)
            except (ConnectionResetError, BrokenPipeError):
                b = b""
            if not b:
                open_.discard(c)
                closed += 1
    return closed


def _raw(s, data, timeout=10):
    c = _connect(s, timeout)
    try:
        c.sendall(data)
        out = b""
        while True:
            try:
                b = c.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not b:
                break
            out += b
        return out
    finally:
        c.close()


def _dribble(conns, payload, stop, period_s=0.3):
    """Sends payload one byte per period on every connection (a slowloris)."""
    i = 0
    while not stop.is_set() and i < len(payload):
        for c in conns:
            try:
                c.send(payload[i:i + 1])
            except OSError:
                pass
        i += 1
        stop.wait(period_s)


def test_slowloris_headers_are_cut_off_and_others_served():
    s = Server(["--http-timeout-s", "2", "--http-max-connections", "40"]).start()
    slow = [_connect(s) for _ in range(60)]  # more than the limit
    stop = threading.Event()
    hdr = b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 200
    t = threading.Thread(target=_dribble, args=(slow, hdr, stop), daemon=True)
    t.start()
    try:
        time.sleep(1.5)  # the attack is under way
        ok = 0
        for i in range(10):
            try:
                st, obj = s.write([{"job": "sl", "rank": 0, "step": i, "timestamp": T0 + i,
                                    "metrics": {"loss": 1.0}}])
                ok += st == 200
            except OSError:
                pass
        assert ok == 10, "only %d of 10 writes went through during the slowloris" % ok
        # every slow connection is closed (http_timeout_s bounds the time to send a request)
        closed = _count_closed(slow, 30)
        assert closed == len(slow), "%d of %d slow connections still open" % (len(slow) - closed, len(slow))
    finally:
        stop.set()
        t.join()
        for c in slow:
            c.close()
    # the counter says so (the server may still be closing the last slow
    # connections, at its connection limit: ask until it answers)
    def timed_out():
        try:
            st, _, body = s.get("/metrics")
        except OSError:
            return None
        if st != 200:
            return None
        for line in body.decode().splitlines():
            if line.startswith("rankdb_http_connections_timed_out_total "):
                return float(line.split()[1])
        return -1.0
    n = harness.wait_until(timed_out, what="/metrics answered")
    assert n >= 1, "rankdb_http_connections_timed_out_total is %r" % n
    s.stop()


def test_slow_body_is_cut_off():
    s = Server(["--http-timeout-s", "2"]).start()
    c = _connect(s)
    body = json.dumps([{"job": "sb", "rank": 0, "step": 1, "timestamp": T0, "metrics": {"x": 1}}]).encode()
    c.sendall(b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % (len(body) + 10000))
    stop = threading.Event()
    t = threading.Thread(target=_dribble, args=([c], body + b" " * 10000, stop, 0.2), daemon=True)
    t.start()
    try:
        assert _closed_by_server(c, 30), "a body sent at 5 bytes/s was never cut off"
    finally:
        stop.set()
        t.join()
        c.close()
    s.stop()


def test_connection_limit_sheds_idle_then_answers_503():
    s = Server(["--http-max-connections", "20"]).start()
    # the first connection is registered before the others are opened: with
    # several accepting threads the server's accept order of connections
    # opened at once is not the client's connect order
    idle = [_connect(s)]

    def registered():
        st, _, body = s.get("/metrics")
        for line in body.decode().splitlines():
            if line.startswith("rankdb_http_connections "):
                return float(line.split()[1]) >= 2  # idle[0] and this request
        return False
    harness.wait_until(registered, what="the first idle connection registered")
    idle += [_connect(s) for _ in range(19)]
    try:
        time.sleep(1.5)  # they have waited for a request long enough to be shed
        st, _, _ = s.get("/healthz", timeout=10)
        assert st == 200, st
        assert sum(_closed_by_server(c, 5) for c in idle[:1]) == 1  # the oldest went
        fresh = [_connect(s) for _ in range(25)]  # fill up with fresh connections
        idle += fresh
        out = _raw(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", timeout=10)
        status = out.split(b" ", 2)[1] if out else b""
        assert status in (b"200", b"503"), out[:200]  # served or refused, never a hang
        if status == b"503":
            assert b"Retry-After: 1" in out and b"Connection: close" in out, out[:400]
    finally:
        for c in idle:
            c.close()
    s.stop()


def _ndjson_body(job, nbytes):
    lines, n, i = [], 0, 0
    while n < nbytes:
        line = json.dumps({"job": job, "rank": 0, "step": i, "timestamp": T0 + i,
                           "metrics": {"loss": float(i)}}) + "\n"
        lines.append(line)
        n += len(line)
        i += 1
    return "".join(lines).encode(), i


def test_body_budget_refuses_with_503_before_reading():
    s = Server(["--max-body-bytes", "512K", "--max-body-bytes-in-flight", "1M"]).start()
    body, nrec = _ndjson_body("bb", 400 * 1024)
    conns = []
    try:
        for _ in range(2):  # two stalled uploads hold 800 KiB of the 1 MiB budget
            c = _connect(s)
            c.sendall(b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body[:1000])
            conns.append(c)
        time.sleep(0.3)
        out = _raw(s, b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
        assert out.startswith(b"HTTP/1.1 503"), out[:300]
        assert b"Retry-After: 1" in out and b"max_body_bytes_in_flight" in out, out[:400]
        for c in conns:  # the stalled ones finish and are stored
            c.sendall(body[1000:])
            c.settimeout(10)
            resp = c.recv(65536)
            assert resp.startswith(b"HTTP/1.1 200"), resp[:300]
    finally:
        for c in conns:
            c.close()
    st, _, m = s.get("/metrics")
    assert "rankdb_http_body_budget_refused_total 1\n" in m.decode(), m.decode()[-2000:]
    s.stop()


def test_kept_body_buffer_is_charged_to_the_request_that_fills_it():
    # one worker, so the buffer a finished write leaves behind is the one
    # the next request on that worker takes
    # libmicrohttpd's per-worker cache of request states (http.c): the
    # write loop keeps a small buffer per connection instead
    s = Server(["--http-threads", "1", "--http-write-loop", "off"]).start()
    body, _ = _ndjson_body("kb", 12 * 1024)
    for _ in range(3):
        out = _raw(s, b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      b"Content-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n"
                      % len(body) + body)
        assert out.startswith(b"HTTP/1.1 200"), out[:300]
    c = _connect(s)
    try:  # a write whose body's second byte never comes holds its request open
        c.sendall(b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/x-ndjson\r\nContent-Length: 2\r\n\r\n{")
        time.sleep(0.3)
        st, _, m = s.get("/metrics")
        held = [line for line in m.decode().splitlines()
                if line.startswith("rankdb_http_body_bytes ")]
        assert held and int(held[0].split()[1]) >= len(body), held
    finally:
        c.close()
    s.stop()


def test_conflicting_content_length_refused():
    s = Server().start()
    body = json.dumps([{"job": "cl", "rank": 0, "step": 1, "timestamp": T0, "metrics": {"x": 1}}]).encode()
    out = _raw(s, b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                  b"Content-Length: %d\r\n\r\n" % (len(body), len(body) + 5) + body + b"     ")
    assert out.startswith(b"HTTP/1.1 400") and b"disagree" in out, out[:300]
    assert out.count(b"HTTP/1.1") == 1, out
    # the same value twice is one length (RFC 9110 8.6)
    out = _raw(s, b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(body), len(body)) + body)
    assert out.startswith(b"HTTP/1.1 200"), out[:300]
    s.stop()


def test_refused_admin_requests_do_not_fill_the_disk():
    s = Server(["--admin-token", "t0ken"]).start()
    audit = os.path.join(s.data_dir, "audit.log")
    log_before = os.path.getsize(s.log_path)
    path = "/api/v1/admin/" + "x" * 4096
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    for i in range(2000):
        c.request("GET", path, headers={"Authorization": "Bearer wrong" if i % 2 else ""})
        r = c.getresponse()
        r.read()
        assert r.status in (401, 403), r.status
    c.close()
    audit_bytes = os.path.getsize(audit)
    log_bytes = os.path.getsize(s.log_path) - log_before
    assert audit_bytes < 64 * 1024, "audit.log grew %d bytes for 2000 refusals" % audit_bytes
    assert log_bytes < 64 * 1024, "server log grew %d bytes for 2000 refusals" % log_bytes
    with open(audit) as f:
        lines = [json.loads(x) for x in f]
    assert all(len(json.dumps(x)) < 1024 for x in lines)
    assert lines[0]["target_bytes"] == 4096 and lines[0]["result"] == "refused", lines[0]
    # a good request is always logged, with how many refusals were left out before it
    st, _, _ = s.get("/api/v1/admin/stats", headers={"Authorization": "Bearer t0ken"})
    assert st == 200
    with open(audit) as f:
        last = json.loads(f.read().splitlines()[-1])
    assert last["result"] == "ok" and last["action"] == "stats", last
    s.stop()


def test_sigterm_exits_nonzero_when_the_final_checkpoint_fails():
    s = Server().start()
    s.write_ok([{"job": "ft", "rank": 0, "step": i, "timestamp": T0 + i, "metrics": {"loss": float(i)}}
                for i in range(100)])
    chunks = os.path.join(s.data_dir, "chunks")
    os.rename(chunks, chunks + ".away")  # no segment file can be created now
    with open(chunks, "w") as f:
        f.write("not a directory")
    rc = s.signal_stop(expect_rc=None)
    assert rc != 0, "SIGTERM exited 0 although the final checkpoint failed"
    assert "final checkpoint failed" in s.log_text()
    os.unlink(chunks)
    os.rename(chunks + ".away", chunks)
    s.start()  # the WAL still had every acknowledged point
    obj = s.query_ok(job="ft", metric="loss", step_from=0, step_to=1000)
    assert obj["series"][0]["steps"] == list(range(100))
    s.stop()


def test_backup_into_the_data_dir_or_with_nul_is_refused():
    token = "t0ken"
    s = Server(["--admin-token", token]).start()
    s.write_ok([{"job": "bk", "rank": 0, "step": 1, "timestamp": T0, "metrics": {"loss": 1.0}}])
    auth = {"Authorization": "Bearer " + token}
    import urllib.parse
    for d in (os.path.join(s.data_dir, "wal", "wal-00000000000000ff.log"), s.data_dir,
              os.path.join(s.data_dir, "chunks", "..", "bk")):
        st, _, body = s.post("/api/v1/admin/backup?dir=" + urllib.parse.quote(d), "", headers=auth)
        assert st == 400 and b"inside the data directory" in body, (d, st, body)
    assert not os.path.exists(os.path.join(s.data_dir, "wal", "wal-00000000000000ff.log"))
    elsewhere = os.path.join(s.workdir, "backup")
    st, _, body = s.post("/api/v1/admin/backup?dir=" + urllib.parse.quote(elsewhere) + "%00zz", "",
                         headers=auth)
    assert st == 400 and b"NUL" in body, (st, body)
    assert not os.path.exists(elsewhere)
    st, _, body = s.post("/api/v1/admin/backup?dir=" + urllib.parse.quote(elsewhere), "", headers=auth)
    assert st == 200, body
    s.stop()
    s.start()  # and the server still starts
    s.stop()


def _rss_per_conn_kib(s, n):
    """Opens n keep-alive connections, one GET each, and returns the
    server's resident growth per connection in KiB (all held open)."""
    import socket
    before = _vm_kb(s.proc.pid, "VmRSS")
    socks = []
    try:
        for _ in range(n):
            c = socket.create_connection(("127.0.0.1", s.port))
            c.sendall(b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(c)
        for c in socks:
            c.settimeout(30)
            got = b""
            while b"\r\n\r\n" not in got:
                part = c.recv(65536)
                assert part, "connection closed before its answer"
                got += part
            assert got.startswith(b"HTTP/1.1 200"), got[:200]
        return (_vm_kb(s.proc.pid, "VmRSS") - before) / n
    finally:
        for c in socks:
            c.close()


def test_connection_memory_is_bounded_and_large_headers_answered():
    big = b"X-Big: " + b"a" * 12000 + b"\r\n"
    # default (16 KiB): a 12 KB header fits, and each open keep-alive
    # connection that served a request costs ~16 KiB less than with
    # libmicrohttpd's own default of 32 KiB (compared, not absolute: a
    # sanitizer build adds its own overhead per connection to both)
    s = Server().start()
    out = _raw(s, b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + big + b"\r\n")
    assert out.startswith(b"HTTP/1.1 200"), out[:300]
    per_conn = _rss_per_conn_kib(s, 600)
    s.stop()
    s = Server(flags=["--http-connection-memory-bytes", "32K"]).start()
    per_conn_32k = _rss_per_conn_kib(s, 600)
    s.stop()
    assert per_conn_32k - per_conn > 8, (
        "%.1f KiB resident per open connection by default, %.1f KiB with 32K" % (
            per_conn, per_conn_32k))
    # a smaller buffer: the same header is refused with 431 (never a hang or
    # a cut connection), and the server goes on serving
    s = Server(flags=["--http-connection-memory-bytes", "8K"]).start()
    out = _raw(s, b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + big + b"\r\n")
    assert out.startswith(b"HTTP/1.1 431"), out[:300]
    st, _, _ = s.get("/api/v1/jobs")
    assert st == 200
    s.stop()
