"""The write loop (http_write_loop, server/wloop.c): rankdb's own front end
for plain write POSTs, libmicrohttpd for the rest. Writes read back, the
hand-off to libmicrohttpd on the same keep-alive connection, pipelining,
the defences (deadlines, connection limit and shedding, 413 / 503, bad
heads, auth), the same answers as with the loop off, and the loop off."""

import http.client
import json
import os
import re
import socket
import subprocess
import time

from harness import T0, Server, wait_until


def _lp(rank, step, job="wl"):
    return "train,job=%s,rank=%d loss=%d.5,step=%di %d\n" % (job, rank, step, step, T0 + step * 1000 + rank)


def _req(path, body, extra=""):
    if isinstance(body, str):
        body = body.encode()
    return ("POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n" % (path, extra, len(body))).encode() + body


def _metric(s, name):
    st, _, body = s.request("GET", "/metrics")
    assert st == 200
    m = re.search(r"^%s ([0-9.e+]+)$" % re.escape(name), body.decode(), re.M)
    assert m, name
    return float(m.group(1))


def _read_responses(sock, n, timeout=10):
    """Reads n HTTP responses from sock: [(status, headers dict lower-case, body)]."""
    sock.settimeout(timeout)
    buf = b""
    out = []
    while len(out) < n:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            assert chunk, "closed after %d responses: %r" % (len(out), buf)
            buf += chunk
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for l in lines[1:]:
            k, v = l.split(":", 1)
            hdrs[k.strip().lower()] = v.strip()
        clen = int(hdrs.get("content-length", "0"))
        while len(buf) < clen:
            chunk = sock.recv(65536)
            assert chunk, "closed in a body"
            buf += chunk
        out.append((status, hdrs, buf[:clen]))
        buf = buf[clen:]
    return out


def _closed(sock, timeout):
    """True when the server closes sock within timeout (reads and drops data)."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def _steps(s, job, rank=0):
    obj = s.query_ok(job=job, metric="train.loss", rank=rank)
    out = []
    for ser in obj["series"]:
        out += ser["steps"]
    return out


def test_loop_writes_read_back_and_query_on_same_connection():
    """Line protocol and JSON writes through the loop are stored; a query on
    the same keep-alive connection (handed to libmicrohttpd) answers, and
    that connection still takes writes after."""
    s = Server().start()
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    for step in range(5):
        conn.request("POST", "/write?precision=ns", _lp(0, step))
        r = conn.getresponse()
        assert r.status == 204, (r.status, r.read())
        r.read()
    conn.request("POST", "/api/v1/write", json.dumps([{"job": "wlj", "rank": 1, "step": 1, "timestamp": T0,
                                                      "metrics": {"loss": 2.5}}]),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status in (200, 204), (r.status, r.read())
    r.read()
    conn.request("GET", "/api/v1/query/range?job=wl&metric=train.loss&rank=0")
    r = conn.getresponse()
    body = r.read()
    assert r.status == 200, (r.status, body)
    steps = []
    for ser in json.loads(body)["series"]:
        steps += ser["steps"]
    assert steps == [0, 1, 2, 3, 4], steps
    conn.request("POST", "/write?precision=ns", _lp(0, 5))
    r = conn.getresponse()
    assert r.status == 204
    r.read()
    conn.close()
    assert _steps(s, "wl") == [0, 1, 2, 3, 4, 5]
    obj = s.query_ok(job="wlj", metric="loss", rank=1)
    assert obj["series"] and obj["series"][0]["steps"] == [1], obj


def test_pipelined_write_write_and_write_query():
    s = Server().start()
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(_req("/write?precision=ns", _lp(0, 1)) + _req("/write?precision=ns", _lp(0, 2)))
    res = _read_responses(sock, 2)
    assert [r[0] for r in res] == [204, 204], res
    sock.sendall(_req("/write?precision=ns", _lp(0, 3)) +
                 b"GET /api/v1/query/range?job=wl&metric=train.loss&rank=0 HTTP/1.1\r\nHost: x\r\n\r\n")
    res = _read_responses(sock, 2)
    assert res[0][0] == 204 and res[1][0] == 200, res
    steps = []
    for ser in json.loads(res[1][2])["series"]:
        steps += ser["steps"]
    assert steps == [1, 2, 3], steps
    sock.close()


def test_expect_100_continue_and_bodies_in_pieces():
    s = Server().start()
    sock = socket.create_connection(("127.0.0.1", s.port))
    body = _lp(0, 7).encode()
    sock.sendall(("POST /write?precision=ns HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                  "Content-Length: %d\r\n\r\n" % len(body)).encode())
    sock.settimeout(10)
    got = sock.recv(100)
    assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), got
    for i in range(0, len(body), 7):  # the body in pieces
        sock.sendall(body[i:i + 7])
        time.sleep(0.02)
    assert _read_responses(sock, 1)[0][0] == 204
    sock.close()
    assert _steps(s, "wl") == [7]


def test_slowloris_head_and_body_are_cut_by_the_deadline():
    s = Server(["--http-timeout-s", "2"]).start()
    head = socket.create_connection(("127.0.0.1", s.port))
    head.sendall(b"POST /write HTTP/1.1\r\n")
    body = socket.create_connection(("127.0.0.1", s.port))
    body.sendall(b"POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
    t0 = time.monotonic()
    cut = {"head": False, "body": False}
    for _ in range(30):  # a byte every 0.3 s on each
        for name, sock in (("head", head), ("body", body)):
            if cut[name]:
                continue
            try:
                sock.sendall(b"a")
            except OSError:
                cut[name] = True
                continue
            if _closed(sock, 0.15):
                cut[name] = True
        if all(cut.values()):
            break
    assert all(cut.values()), cut
    assert time.monotonic() - t0 < 8
    assert _metric(s, "rankdb_http_connections_timed_out_total") >= 2


def test_connection_limit_503_and_shedding():
    s = Server(["--http-max-connections", "4"]).start()
    time.sleep(0.2)  # the start-up health check's connection is gone
    socks = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(4)]
    for k in socks:  # each is registered once the server took it
        k.sendall(_req("/write?precision=ns", _lp(0, 1)))
        assert _read_responses(k, 1)[0][0] == 204
    extra = socket.create_connection(("127.0.0.1", s.port))
    extra.sendall(_req("/write?precision=ns", _lp(0, 2)))
    st, hdrs, _ = _read_responses(extra, 1)[0]
    assert st == 503 and hdrs.get("retry-after") == "1", (st, hdrs)
    assert _closed(extra, 5)
    extra.close()
    time.sleep(1.3)  # now the four have waited long enough to be shed
    new = socket.create_connection(("127.0.0.1", s.port))
    new.sendall(_req("/write?precision=ns", _lp(0, 3)))
    assert _read_responses(new, 1)[0][0] == 204
    assert sum(1 for k in socks if _closed(k, 0.5)) >= 1
    assert _metric(s, "rankdb_http_connections_shed_total") >= 1
    assert _metric(s, "rankdb_http_connections_refused_total") >= 1


def test_too_large_and_body_budget():
    s = Server(["--max-body-bytes", "1K", "--max-body-bytes-in-flight", "1K"]).start()
    st, _, body = s.request("POST", "/write?precision=ns", "x" * 2000)
    assert st == 413 and b"max_body_bytes" in body, (st, body)
    st, _, body = s.request("POST", "/api/v2/write?bucket=b", "x" * 2000)
    assert st == 413 and json.loads(body)["code"] == "request too large", body
    # one body reserves the whole budget; the next is refused before it is read
    a = socket.create_connection(("127.0.0.1", s.port))
    lp = _lp(0, 1).encode()
    pad = b"#" * (1000 - len(lp) - 1) + b"\n"
    a.sendall(b"POST /write?precision=ns HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
    time.sleep(0.3)
    b = socket.create_connection(("127.0.0.1", s.port))
    b.sendall(_req("/write?precision=ns", _lp(0, 2)))
    st, hdrs, _ = _read_responses(b, 1)[0]
    assert st == 503 and hdrs.get("retry-after") == "1", (st, hdrs)
    a.sendall(lp + pad)
    assert _read_responses(a, 1)[0][0] == 204
    assert _metric(s, "rankdb_http_body_budget_refused_total") >= 1
    assert _steps(s, "wl") == [1]


def test_bad_heads_are_answered_by_libmicrohttpd():
    s = Server().start()
    for raw, want in [
        (b"POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", 400),
        (b"HELLO THERE\r\n\r\n", 400),
        (b"POST /write?db=a%00b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", 400),
    ]:
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(raw)
        assert _read_responses(sock, 1)[0][0] == want, raw
        sock.close()
    # chunked writes are libmicrohttpd's and work
    sock = socket.create_connection(("127.0.0.1", s.port))
    body = _lp(0, 9).encode()
    sock.sendall(b"POST /write?precision=ns HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                 b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
    assert _read_responses(sock, 1)[0][0] == 204
    sock.close()
    assert _steps(s, "wl") == [9]
    # a peer that leaves mid-request does not hurt the server
    for raw in (b"POST /wri", b"POST /write HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc"):
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(raw)
        sock.close()
    assert s.request("GET", "/healthz")[0] == 200


def test_auth_on_the_loop():
    s = Server(name="auth")
    rankctl = os.path.join(os.path.dirname(os.path.dirname(s.binary)), "tools", "rankctl")
    tf = os.path.join(s.workdir, "tokens")
    toks = {}
    for tid, scope in (("ing", "ingest"), ("qry", "query")):
        p = subprocess.run([rankctl, "token", "add", tf, tid, scope], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        toks[tid] = p.stdout.strip()
    s.flags += ["--tokens-file", tf]
    s.start()
    st, hdrs, _ = s.request("POST", "/write?precision=ns", _lp(0, 1))
    assert st == 401 and "www-authenticate" in hdrs, (st, hdrs)
    st, _, _ = s.request("POST", "/write?precision=ns", _lp(0, 1), headers={"Authorization": "Bearer " + toks["qry"]})
    assert st == 403
    st, _, _ = s.request("POST", "/write?precision=ns", _lp(0, 1), headers={"Authorization": "Bearer " + toks["ing"]})
    assert st == 204
    st, _, body = s.request("GET", "/api/v1/query/range?job=wl&metric=train.loss&rank=0",
                            headers={"Authorization": "Bearer " + toks["qry"]})
    assert st == 200 and json.loads(body)["series"][0]["steps"] == [1], body


def test_loop_off_still_works():
    s = Server(["--http-write-loop", "off"]).start()
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    for step in range(3):
        conn.request("POST", "/write?precision=ns", _lp(0, step))
        r = conn.getresponse()
        assert r.status == 204
        r.read()
    conn.close()
    assert _steps(s, "wl") == [0, 1, 2]
    assert "write loop" not in s.log_text()


CASES = [
    _req("/write?precision=ns", _lp(0, 1)),
    _req("/write?precision=ns", _lp(0, 2), "Connection: close\r\n"),
    _req("/write?precision=xx", "hello"),
    _req("/write", "hello"),
    _req("/api/v2/write?bucket=b&org=o", "hello"),
    _req("/api/v1/write", "hello"),
    _req("/api/v1/write", "[]"),
    _req("/api/v1/write", json.dumps([{"job": "c", "rank": 0, "step": 1, "timestamp": T0, "metrics": {"a": 1}}]),
         "Content-Type: application/json\r\n"),
    _req("/write?db=a%00b", "hello"),
    _req("/write?precision=ns&batch_id=b1", _lp(0, 3)),
    _req("/write?precision=ns&batch_id=b1", _lp(0, 3)),
    _req("/write?precision=ns", _lp(0, 4), "Content-Encoding: br\r\n"),
    # trailing blanks stay in libmicrohttpd's values: another batch id (400),
    # an unknown encoding (415); the loop must not trim them into a 204
    _req("/write?precision=ns", _lp(0, 5), "X-Rankdb-Batch-Id: abc\t\r\n"),
    _req("/write?precision=ns", _lp(0, 6), "Content-Encoding: identity\t\r\n"),
]


def _answers(flag):
    s = Server(["--http-write-loop", flag], name="cmp-" + flag).start()
    out = []
    for raw in CASES:
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(raw)
        st, hdrs, body = _read_responses(sock, 1)[0]
        hdrs.pop("date", None)
        out.append((st, sorted(hdrs.items()), body))
        sock.close()
    s.stop()
    return out


def test_same_answers_with_the_loop_on_and_off():
    """Status, headers (but Date) and bodies of write requests are the same
    whichever front end serves them."""
    on, off = _answers("on"), _answers("off")
    for raw, a, b in zip(CASES, on, off):
        assert a == b, (raw[:80], a, b)


def test_clients_leaving_mid_head_free_their_connections():
    """A peer that closes (or is cut) with a partial head in the socket: the
    loop must not peek at those bytes for ever; the registry empties."""
    s = Server(["--http-max-connections", "8"]).start()
    for _ in range(3):
        socks = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(8)]
        for k in socks:
            k.sendall(b"POST /write HTTP/1.1\r\nHost: x\r\nX-Pad: aaa")
        time.sleep(0.2)
        for k in socks:
            k.close()
    def drained():
        # While the closed connections still count, /metrics itself is over
        # the limit of 8 and answered 503: not yet.
        st, _, body = s.request("GET", "/metrics")
        if st != 200:
            return False
        m = re.search(r"^rankdb_http_connections ([0-9.e+]+)$", body.decode(), re.M)
        return m is not None and float(m.group(1)) <= 1

    wait_until(drained, timeout=10,
               what="the connection count back to the /metrics connection")
    assert s.request("POST", "/write?precision=ns", _lp(0, 1))[0] == 204


def test_out_of_descriptors_keeps_serving_and_accepts_again():
    """Past the open-files limit accept fails (EMFILE): the connections
    already open are still answered, and once descriptors are free the loop
    accepts again (it pauses its listener rather than spin on it)."""
    from harness import bin_path, ctx
    wrapper = os.path.join(ctx().mkdir("nofile"), "rankdbd-nofile")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nulimit -Sn 110 && ulimit -Hn 110 && exec '%s' \"$@\"\n" % bin_path())
    os.chmod(wrapper, 0o755)
    s = Server(["--sync-policy", "none"], binary=wrapper).start()
    keep = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)

    def write(conn, step):
        conn.request("POST", "/write?precision=ns", _lp(0, step))
        r = conn.getresponse()
        r.read()
        return r.status

    assert write(keep, 1) == 204
    flood = []
    try:
        for _ in range(150):
            flood.append(socket.create_connection(("127.0.0.1", s.port), timeout=5))
        wait_until(lambda: "cannot accept a connection" in open(s.log_path).read(), timeout=10,
                   what="the server to log that accept fails")
        for step in range(2, 12):
            assert write(keep, step) == 204  # an open connection is still served
    finally:
        for k in flood:
            k.close()
    keep.close()

    def fresh_write():
        try:
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=2)
            ok = write(c, 20) == 204
            c.close()
            return ok
        except OSError:
            return False

    wait_until(fresh_write, timeout=15, what="a new connection accepted and answered")
    st, _, body = s.request("GET", "/api/v1/query/range?job=wl&metric=train.loss&rank=0")
    assert st == 200 and json.loads(body)["series"][0]["steps"] == list(range(1, 12)) + [20], body


def test_max_parked_zero_turns_the_loop_off():
    """http_max_parked = 0 means writes are never parked: the loop, whose
    threads must not wait for the WAL, stays off and says so; libmicrohttpd
    serves the writes on its workers."""
    s = Server(["--http-max-parked", "0"]).start()
    for step in range(3):
        assert s.request("POST", "/write?precision=ns", _lp(0, step))[0] == 204
    assert "write loop off: http_max_parked = 0" in open(s.log_path).read()
    assert _metric(s, "rankdb_http_parked_total") == 0
    st, _, body = s.request("GET", "/api/v1/query/range?job=wl&metric=train.loss&rank=0")
    assert st == 200 and json.loads(body)["series"][0]["steps"] == [0, 1, 2], body


def test_long_heads_answer_alike_with_small_connection_memory():
    """With http_connection_memory_bytes = 8K libmicrohttpd refuses heads of
    ~7.9 KB with 431; the loop must not accept what libmicrohttpd refuses
    (nor refuse what it accepts): every head length answers the same with the
    loop on and off."""
    # (header lines of padding, bytes of padding): libmicrohttpd also spends
    # ~65 bytes of that memory per header line
    cases = [(1, 6000), (1, 7000), (1, 7600), (1, 7900), (1, 8100), (1, 9000),
             (16, 6100), (16, 6800), (30, 5600), (30, 6000), (30, 6400)]

    def answers(flag):
        s = Server(["--http-write-loop", flag, "--http-connection-memory-bytes", "8K"],
                   name="mem-" + flag).start()
        out = []
        for i, (lines, n) in enumerate(cases):
            pad = "".join("X-Pad%d: %s\r\n" % (j, "a" * (n // lines)) for j in range(lines))
            sock = socket.create_connection(("127.0.0.1", s.port))
            sock.sendall(_req("/write?precision=ns", _lp(0, 10 + i), pad))
            try:
                out.append(_read_responses(sock, 1)[0][0])
            except (AssertionError, OSError):
                out.append(None)  # closed without an answer (libmicrohttpd does, at times)
            sock.close()
        s.stop()
        return out

    on, off = answers("on"), answers("off")
    assert on == off, (cases, on, off)
    assert on[0] == 204 and on[5] == 431, on
