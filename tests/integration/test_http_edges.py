"""The HTTP edge of the write routes, as a client sees it: keep-alive,
pipelining, requests split into small pieces, HTTP/1.0 and Connection
headers, Expect: 100-continue, chunked bodies, header case, query strings,
clients that close early, extra bytes after a body, empty bodies, the exact
shape of an accepted and a refused write, and tokens on one connection.

These pin what the server does today so that any front end of the write
routes (libmicrohttpd, or the write loop of http_write_loop) must answer the
same. Rerun the file against another configuration with
RDB_TEST_SERVER_FLAGS, e.g. RDB_TEST_SERVER_FLAGS="--http-write-loop on".

Every write is read back: a test checks what was stored, not only the
status. Raw sockets throughout, so that nothing in a client library hides
what the server sent."""
import json
import os
import socket
import time
import urllib.parse

from harness import T0, Server, wait_until

LP_CT = "text/plain; charset=utf-8"


# ---------------------------------------------------------------------------
# a raw HTTP/1.x client that reads answers one by one off one connection


class Conn:
    def __init__(self, s, timeout=5):
        self.sock = socket.create_connection(("127.0.0.1", s.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def close(self):
        self.sock.close()

    def _fill(self):
        b = self.sock.recv(65536)
        if not b:
            raise EOFError("server closed the connection")
        self.buf += b

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self, head_only=False):
        """One answer: (status, version, headers with lower-case names, body).
        A 1xx interim answer is returned as such (its own call)."""
        status_line = self._line().decode("latin1")
        version, code = status_line.split(" ", 2)[:2]
        code = int(code)
        hdrs = {}
        raw = []
        while True:
            line = self._line()
            if not line:
                break
            k, v = line.decode("latin1").split(":", 1)
            raw.append(k)
            assert k.lower() not in hdrs, "header %s twice: %r" % (k, line)
            hdrs[k.lower()] = v.strip()
        self.last_status_line = status_line
        if code < 200 or code in (204, 304) or head_only:
            return code, version, hdrs, b""
        if hdrs.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                n = int(self._line().split(b";")[0], 16)
                if n == 0:
                    while self._line():
                        pass
                    return code, version, hdrs, body
                body += self._take(n)
                assert self._take(2) == b"\r\n"
        if "content-length" in hdrs:
            return code, version, hdrs, self._take(int(hdrs["content-length"]))
        # read to close
        try:
            while True:
                self._fill()
        except EOFError:
            pass
        body, self.buf = self.buf, b""
        return code, version, hdrs, body

    def drained_to_close(self, wait_s=2.0):
        """Reads whatever else comes; True when the server closes within
        wait_s. (libmicrohttpd 0.9.75 sends some of its 400 pages with the
        head twice, so what follows such an answer is not parsed.)"""
        self.sock.settimeout(wait_s)
        end = time.monotonic() + wait_s
        try:
            while time.monotonic() < end:
                if not self.sock.recv(65536):
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
        return False

    def closed_by_server(self, wait_s=2.0):
        """True when the server closes the connection within wait_s (with
        nothing more sent); False when it is still open."""
        if self.buf:
            return False
        self.sock.settimeout(wait_s)
        try:
            b = self.sock.recv(1)
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
        if b:
            self.buf += b
            return False
        return True


def request(method, path, body=b"", headers=(), version="HTTP/1.1", length=True):
    if isinstance(body, str):
        body = body.encode()
    head = "%s %s %s\r\nHost: 127.0.0.1\r\n" % (method, path, version)
    for k, v in headers:
        head += "%s: %s\r\n" % (k, v)
    if length and (body or method == "POST"):
        head += "Content-Length: %d\r\n" % len(body)
    return head.encode() + b"\r\n" + body


def lp(job, step, value=1.0, rank=0):
    """One line-protocol line with a nanosecond timestamp."""
    return "train,job=%s,rank=%d loss=%r %d\n" % (job, rank, value, T0 + step * 1_000_000_000)


def lp_post(job, steps, route="/write", extra="", headers=(), version="HTTP/1.1"):
    key = "db" if route == "/write" else "bucket"
    body = "".join(lp(job, st) for st in steps)
    return request("POST", "%s?%s=%s%s" % (route, key, job, extra), body,
                   [("Content-Type", LP_CT)] + list(headers), version)


def json_post(job, steps, headers=(), version="HTTP/1.1", extra=""):
    recs = [{"job": job, "rank": 0, "step": st, "timestamp": T0 + st * 1_000_000_000,
             "metrics": {"loss": 1.0}} for st in steps]
    return request("POST", "/api/v1/write" + extra, json.dumps(recs),
                   [("Content-Type", "application/json")] + list(headers), version)


def query_req(job, metric="train.loss", headers=()):
    q = urllib.parse.urlencode({"job": job, "metric": metric})
    return request("GET", "/api/v1/query/range?" + q, headers=list(headers))


def stored_steps(s, job, metric="train.loss", headers=None):
    """The steps (seconds after T0) stored for job's metric, sorted, with
    repeats: the store keeps a point written twice twice, so a request
    applied twice shows here."""
    q = urllib.parse.urlencode({"job": job, "metric": metric})
    st, obj = s.get_json("/api/v1/query/range?" + q, headers=headers)
    assert st == 200, (st, obj)
    out = []
    for ser in obj["series"]:
        out += [(t - T0) // 1_000_000_000 for t in ser["timestamps"]]
    return sorted(out)


def points(body):
    obj = json.loads(body)
    return sorted((t - T0) // 1_000_000_000 for ser in obj["series"] for t in ser["timestamps"])


def start(flags=(), name="edges"):
    return Server(flags=list(flags), name=name).start()


def ok_write(code, route):
    return code == (200 if route == "/api/v1/write" else 204)


ROUTES = ("/write", "/api/v2/write", "/api/v1/write")


def post_for(route, job, steps, **kw):
    if route == "/api/v1/write":
        return json_post(job, steps, **kw)
    return lp_post(job, steps, route=route, **kw)


def metric_for(route):
    return "loss" if route == "/api/v1/write" else "train.loss"


# ---------------------------------------------------------------------------
# keep-alive and pipelining


def test_keepalive_many_writes_then_query_then_write():
    s = start()
    c = Conn(s)
    for i in range(30):
        route = ROUTES[i % 3]
        c.send(post_for(route, "ka-" + route.strip("/").replace("/", "-"), [i]))
        code, _, h, body = c.response()
        assert ok_write(code, route), (route, code, body)
    for route in ROUTES:
        job = "ka-" + route.strip("/").replace("/", "-")
        assert stored_steps(s, job, metric_for(route)) == [i for i in range(30) if ROUTES[i % 3] == route]
    # write, query, write: the query answers from the write just made
    c.send(lp_post("wqw", [1, 2]))
    assert c.response()[0] == 204
    c.send(query_req("wqw"))
    code, _, h, body = c.response()
    assert code == 200 and points(body) == [1, 2], (code, body)
    c.send(json_post("wqw", [3]))
    code, _, h, body = c.response()
    assert code == 200 and json.loads(body)["accepted_points"] == 1, body
    c.send(query_req("wqw", metric="loss"))
    code, _, h, body = c.response()
    assert code == 200 and points(body) == [3], body
    assert not c.closed_by_server(0.2)
    c.close()
    s.stop()


def test_pipelined_requests_are_answered_in_order():
    s = start()
    for route in ROUTES:
        tag = route.strip("/").replace("/", "-")
        m = metric_for(route)
        # write + write + write in one send
        c = Conn(s)
        c.send(post_for(route, "pw-" + tag, [1]) + post_for(route, "pw-" + tag, [2])
               + post_for(route, "pw-" + tag, [3]))
        for _ in range(3):
            code, _, _, body = c.response()
            assert ok_write(code, route), (route, code, body)
        # write + query: the query sees the write before it
        c.send(post_for(route, "pq-" + tag, [7]) + query_req("pq-" + tag, m))
        code, _, _, body = c.response()
        assert ok_write(code, route), (route, code, body)
        code, _, _, body = c.response()
        assert code == 200 and points(body) == [7], (route, code, body)
        # write + bad write + write: the bad one refused in its place
        bad = request("POST", route, b"this is not a record",
                      [("Content-Type", "application/json" if route == "/api/v1/write" else LP_CT)])
        c.send(post_for(route, "pb-" + tag, [1]) + bad + post_for(route, "pb-" + tag, [2]))
        code, _, _, body = c.response()
        assert ok_write(code, route), (route, code, body)
        code, _, h, body = c.response()
        assert code == 400 and h["content-type"] == "application/json", (route, code, h, body)
        code, _, _, body = c.response()
        assert ok_write(code, route), (route, code, body)
        c.close()
        assert stored_steps(s, "pw-" + tag, m) == [1, 2, 3], route
        assert stored_steps(s, "pq-" + tag, m) == [7], route
        assert stored_steps(s, "pb-" + tag, m) == [1, 2], route
    s.stop()


def test_request_split_into_small_pieces():
    s = start()
    for route in ROUTES:
        tag = route.strip("/").replace("/", "-")
        data = post_for(route, "split-" + tag, [1, 2, 3, 4, 5])
        head, body = data.split(b"\r\n\r\n", 1)
        head += b"\r\n\r\n"
        c = Conn(s)
        for i in range(len(head)):  # the head one byte per segment
            c.send(head[i:i + 1])
            if i % 16 == 0:
                time.sleep(0.002)
        n = (len(body) + 4) // 5
        for i in range(0, len(body), n):  # the body in five pieces with pauses
            time.sleep(0.03)
            c.send(body[i:i + n])
        code, _, _, rbody = c.response()
        assert ok_write(code, route), (route, code, rbody)
        # answered once: nothing more comes, the connection stays usable
        assert not c.closed_by_server(0.3)
        c.send(query_req("split-" + tag, metric_for(route)))
        code, _, _, rbody = c.response()
        assert code == 200 and points(rbody) == [1, 2, 3, 4, 5], (route, rbody)
        c.close()
    s.stop()


# ---------------------------------------------------------------------------
# HTTP/1.0, Connection headers, Expect, chunked


def test_http10_and_connection_close():
    s = start()
    for route in ROUTES:
        tag = route.strip("/").replace("/", "-")
        m = metric_for(route)
        # HTTP/1.0 without keep-alive: answered, then closed by the server
        c = Conn(s)
        c.send(post_for(route, "h10-" + tag, [1], version="HTTP/1.0"))
        code, ver, h, body = c.response()
        assert ok_write(code, route), (route, code, body)
        assert c.closed_by_server(2.0), route
        c.close()
        # HTTP/1.0 with Connection: keep-alive: answered, the connection stays
        c = Conn(s)
        c.send(post_for(route, "h10ka-" + tag, [1], version="HTTP/1.0",
                        headers=[("Connection", "keep-alive")]))
        code, ver, h, body = c.response()
        assert ok_write(code, route), (route, code, body)
        assert h.get("connection", "").lower() == "keep-alive", (route, h)
        assert not c.closed_by_server(0.3), route
        c.send(post_for(route, "h10ka-" + tag, [2], version="HTTP/1.0",
                        headers=[("Connection", "keep-alive")]))
        code, ver, h, body = c.response()
        assert ok_write(code, route), (route, code, body)
        c.close()
        # HTTP/1.1 with Connection: close: answered, then closed
        c = Conn(s)
        c.send(post_for(route, "h11c-" + tag, [1], headers=[("Connection", "close")]))
        code, ver, h, body = c.response()
        assert ok_write(code, route), (route, code, body)
        assert h.get("connection", "").lower() == "close", (route, h)
        assert c.closed_by_server(2.0), route
        c.close()
        for job in ("h10-", "h10ka-", "h11c-"):
            assert stored_steps(s, job + tag, m) == ([1, 2] if job == "h10ka-" else [1]), (route, job)
    s.stop()


def test_expect_100_continue():
    s = start()
    for route in ROUTES:
        tag = route.strip("/").replace("/", "-")
        # as curl does for a large body: the head, wait for 100, then the body
        data = post_for(route, "ex-" + tag, [1, 2], headers=[("Expect", "100-continue")])
        head, body = data.split(b"\r\n\r\n", 1)
        c = Conn(s)
        c.send(head + b"\r\n\r\n")
        code, ver, h, _ = c.response()
        assert code == 100 and ver == "HTTP/1.1", (route, code)
        c.send(body)
        code, _, _, rbody = c.response()
        assert ok_write(code, route), (route, code, rbody)
        # a client that does not wait sends head and body at once: the
        # interim answer comes first, then the final one, each once
        c.send(post_for(route, "ex-" + tag, [3], headers=[("Expect", "100-continue")]))
        assert c.response()[0] == 100, route
        code, _, _, rbody = c.response()
        assert ok_write(code, route), (route, code, rbody)
        c.send(query_req("ex-" + tag, metric_for(route)))
        code, _, _, rbody = c.response()
        assert code == 200 and points(rbody) == [1, 2, 3], (route, rbody)
        c.close()
    s.stop()


def chunked(data, sizes):
    out, i, k = b"", 0, 0
    while i < len(data):
        n = sizes[k % len(sizes)]
        out += b"%x\r\n" % len(data[i:i + n]) + data[i:i + n] + b"\r\n"
        i += n
        k += 1
    return out + b"0\r\n\r\n"


def test_chunked_transfer_encoding():
    s = start()
    for route in ROUTES:
        tag = route.strip("/").replace("/", "-")
        data = post_for(route, "ch-" + tag, [1, 2, 3])
        head, body = data.split(b"\r\n\r\n", 1)
        head = b"\r\n".join(l for l in head.split(b"\r\n") if not l.lower().startswith(b"content-length"))
        c = Conn(s)
        # one chunk; chunks of 1, 7 and 30 bytes; chunks sent apart with pauses
        c.send(head + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body, [len(body)]))
        code, _, _, rbody = c.response()
        assert ok_write(code, route), (route, code, rbody)
        data = post_for(route, "ch-" + tag, [4, 5])
        head, body = data.split(b"\r\n\r\n", 1)
        head = b"\r\n".join(l for l in head.split(b"\r\n") if not l.lower().startswith(b"content-length"))
        c.send(head + b"\r\ntransfer-encoding: chunked\r\n\r\n" + chunked(body, [1, 7, 30]))
        code, _, _, rbody = c.response()
        assert ok_write(code, route), (route, code, rbody)
        data = post_for(route, "ch-" + tag, [6])
        head, body = data.split(b"\r\n\r\n", 1)
        head = b"\r\n".join(l for l in head.split(b"\r\n") if not l.lower().startswith(b"content-length"))
        c.send(head + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        enc = chunked(body, [10])
        for i in range(0, len(enc), 9):
            time.sleep(0.02)
            c.send(enc[i:i + 9])
        code, _, _, rbody = c.response()
        assert ok_write(code, route), (route, code, rbody)
        c.send(query_req("ch-" + tag, metric_for(route)))
        code, _, _, rbody = c.response()
        assert code == 200 and points(rbody) == [1, 2, 3, 4, 5, 6], (route, rbody)
        c.close()
    s.stop()


def test_header_name_case_and_spaces():
    s = start()
    for route in ROUTES:
        tag = route.strip("/").replace("/", "-")
        m = metric_for(route)
        ct = "application/json" if route == "/api/v1/write" else "text/plain"
        c = Conn(s)
        forms = ["content-length: %d", "CONTENT-LENGTH: %d", "Content-Length:    %d",
                 "Content-Length:\t%d", "cOnTeNt-LeNgTh:%d"]
        for i, form in enumerate(forms):
            data = post_for(route, "hc-" + tag, [i])
            head, body = data.split(b"\r\n\r\n", 1)
            lines = [l for l in head.split(b"\r\n")
                     if not l.lower().startswith((b"content-length", b"content-type", b"host"))]
            lines += [b"hOsT:   127.0.0.1  ", (form % len(body)).encode(),
                      ("CONTENT-TYPE:   %s   " % ct).encode()]
            c.send(b"\r\n".join(lines) + b"\r\n\r\n" + body)
            code, _, _, rbody = c.response()
            assert ok_write(code, route), (route, form, code, rbody)
        c.close()
        assert stored_steps(s, "hc-" + tag, m) == list(range(len(forms))), route
        # trailing spaces after the Content-Length value: libmicrohttpd
        # 0.9.75 refuses them with 400 and closes (RFC 9110 would strip them);
        # whichever a front end does, it stores the write iff it accepts it
        data = post_for(route, "hct-" + tag, [1])
        head, body = data.split(b"\r\n\r\n", 1)
        head = head.replace(b"Content-Length: %d" % len(body), b"Content-Length: %d   " % len(body))
        c = Conn(s)
        c.send(head + b"\r\n\r\n" + body)
        code, _, _, rbody = c.response()
        if code == 400:
            assert c.drained_to_close(2.0), route
            assert stored_steps_or_none(s, "hct-" + tag, m) == [], route
        else:
            assert ok_write(code, route), (route, code, rbody)
            assert stored_steps(s, "hct-" + tag, m) == [1], route
        c.close()
    s.stop()


def stored_steps_or_none(s, job, metric):
    """stored_steps, or [] when the job does not exist at all."""
    st, obj = s.get_json("/api/v1/jobs")
    assert st == 200, obj
    if job not in [j["job"] for j in obj["jobs"]]:
        return []
    return stored_steps(s, job, metric)


def test_query_strings_on_writes():
    s = start()
    c = Conn(s)

    def post(path, body, ct=LP_CT):
        c.send(request("POST", path, body, [("Content-Type", ct)]))
        return c.response()

    line = "train,job=%s,rank=0 loss=1 %d\n"
    # percent-encoded key and value: precision=s spelled %73 / %70recision
    code, _, _, b = post("/write?db=q%31&%70recision=%73", line % ("qs1", T0 // 10**9 + 1))
    assert code == 204, b
    code, _, _, b = post("/api/v2/write?bucket=q%32&precision=%6d%73", line % ("qs2", T0 // 10**6 + 2000))
    assert code == 204, b
    assert stored_steps(s, "qs1") == [1] and stored_steps(s, "qs2") == [2]
    # the batch id percent-encoded and plain are the same id: stored once
    for path in ("/write?db=b&batch_id=run%2F7", "/write?db=b&batch_id=run/7",
                 "/write?db=b&batch%5Fid=run%2f7"):
        code, _, _, b = post(path, lp("bid", 1))
        assert code == 204, (path, b)
    code, _, _, b = post("/api/v1/write?batch_id=j%2F1", json.dumps(
        [{"job": "bidj", "rank": 0, "step": 1, "timestamp": T0 + 10**9, "metrics": {"loss": 1}}]),
        "application/json")
    assert code == 200, b
    code, _, _, b = post("/api/v1/write?batch_id=j/1", json.dumps(
        [{"job": "bidj", "rank": 0, "step": 1, "timestamp": T0 + 10**9, "metrics": {"loss": 1}}]),
        "application/json")
    assert code == 200, b
    assert stored_steps(s, "bid") == [1] and stored_steps(s, "bidj", "loss") == [1]
    # %00 anywhere in the query string: 400, nothing stored, connection kept
    for path, ct, body in (("/write?db=a%00b", LP_CT, lp("nul1", 1)),
                           ("/api/v2/write?bucket=x&precision=n%00s", LP_CT, lp("nul2", 1)),
                           ("/api/v1/write?batch_id=a%00", "application/json",
                            json.dumps([{"job": "nul3", "rank": 0, "step": 1, "timestamp": T0,
                                         "metrics": {"loss": 1}}]))):
        code, _, h, b = post(path, body, ct)
        assert code == 400 and h["content-type"] == "application/json", (path, code, b)
        assert b"NUL" in b and "error" in json.loads(b), b
    for job in ("nul1", "nul2", "nul3"):
        assert stored_steps_or_none(s, job, "train.loss") == [], job
    # a repeated parameter: the last one counts (precision=ms here)
    code, _, _, b = post("/write?db=r&precision=s&precision=ms", line % ("rep", T0 // 10**6 + 3000))
    assert code == 204, b
    assert stored_steps(s, "rep") == [3]
    # repeated batch ids that differ: the last one counts as well
    code, _, _, b = post("/write?db=r&batch_id=x1&batch_id=x2", lp("rep2", 1))
    assert code == 204, b
    code, _, _, b = post("/write?db=r&batch_id=x2", lp("rep2", 1))
    assert code == 204, b
    assert stored_steps(s, "rep2") == [1]
    # an unknown parameter is refused with the list of known ones
    code, _, h, b = post("/write?db=x&bogus=1", lp("unk", 1))
    assert code == 400 and b"unknown parameter 'bogus'" in b, b
    # a very long query string (8000 bytes) is served
    code, _, _, b = post("/write?db=" + "d" * 8000, lp("longq", 1))
    assert code == 204, b
    code, _, _, b = post("/api/v2/write?org=" + "o%41" * 2000 + "&bucket=b", lp("longq", 2))
    assert code == 204, b
    assert stored_steps(s, "longq") == [1, 2]
    assert not c.closed_by_server(0.2)
    c.close()
    # one longer than the connection memory (16 KiB): 414 (libmicrohttpd's
    # HTML page) or a closed connection, never a write; the server goes on
    c = Conn(s)
    try:
        c.send(request("POST", "/write?db=" + "d" * 20000, lp("longq", 3), [("Content-Type", LP_CT)]))
        code = c.response()[0]
        assert code == 414, code
    except (EOFError, ConnectionResetError, BrokenPipeError):
        pass
    c.close()
    assert stored_steps(s, "longq") == [1, 2]
    s.stop()


# ---------------------------------------------------------------------------
# clients that close early, bytes past the body, empty bodies


def test_client_closes_before_the_body_or_before_the_answer():
    s = start()
    for route in ROUTES:
        tag = route.strip("/").replace("/", "-")
        m = metric_for(route)
        # a head announcing 400 bytes, part of the body, then close
        data = post_for(route, "cb-" + tag, [1])
        head, body = data.split(b"\r\n\r\n", 1)
        head = head.replace(b"Content-Length: %d" % len(body), b"Content-Length: %d" % (len(body) + 400))
        c = Conn(s)
        c.send(head + b"\r\n\r\n" + body)
        c.close()
        # a head only, then close
        c = Conn(s)
        c.send(head + b"\r\n\r\n")
        c.close()
        # others are served meanwhile
        c = Conn(s)
        c.send(post_for(route, "other-" + tag, [1]))
        code, _, _, b = c.response()
        assert ok_write(code, route), (route, code, b)
        c.close()
        # a whole write, then close before reading the answer: it is stored
        c = Conn(s)
        c.send(post_for(route, "ca-" + tag, [1, 2]))
        c.close()
        wait_until(lambda: stored_steps_or_none(s, "ca-" + tag, m) == [1, 2], timeout=10,
                   what="the write of a client that left is stored")
        assert stored_steps_or_none(s, "cb-" + tag, m) == [], route
        assert stored_steps(s, "other-" + tag, m) == [1], route
    time.sleep(0.3)
    for route in ROUTES:
        tag = route.strip("/").replace("/", "-")
        assert stored_steps_or_none(s, "ca-" + tag, metric_for(route)) == [1, 2], route
        assert stored_steps_or_none(s, "cb-" + tag, metric_for(route)) == [], route
    assert s.get("/healthz")[0] == 200
    s.stop()


def test_bytes_past_the_body_are_the_next_request():
    s = start()
    for route in ROUTES:
        tag = route.strip("/").replace("/", "-")
        m = metric_for(route)
        for extra in (b"GARBAGE garbage\r\n\r\n", b"\x01\x02\xff\r\n\r\n", b"AB\x00CD\r\n\r\n",
                      b"\x00\x01\x02\xff\r\n\r\n", lp("xb-" + tag, 9).encode() + b"\r\n\r\n"):
            c = Conn(s)
            c.send(post_for(route, "xb-" + tag, [1]) + extra)
            code, _, _, b = c.response()
            assert ok_write(code, route), (route, extra, code, b)
            # the extra bytes: 400 then close, or a close without an answer;
            # libmicrohttpd reads a line that starts with NUL as an empty line
            # and skips it (so no answer, the connection waits for a request)
            c.sock.settimeout(0.5)
            try:
                code = c.response(head_only=True)[0]
                assert code == 400, (route, extra, code)
                assert c.drained_to_close(2.0), (route, extra)
            except (EOFError, ConnectionResetError):
                pass
            except socket.timeout:
                assert extra.startswith(b"\x00"), (route, extra, "no answer, not closed")
            c.close()
        # extra bytes that are not yet a whole head: the server waits for more
        c = Conn(s)
        c.send(post_for(route, "xb-" + tag, [1]) + lp("xb-" + tag, 8).encode())
        code, _, _, b = c.response()
        assert ok_write(code, route), (route, code, b)
        assert not c.closed_by_server(0.2), route
        c.close()
        # each first write stored once, the extra line never
        assert stored_steps(s, "xb-" + tag, m) == [1] * 6, route
    assert s.get("/healthz")[0] == 200
    s.stop()


def test_empty_body():
    s = start()
    c = Conn(s)
    for route in ROUTES:
        for hdrs, length in (([("Content-Length", "0")], False), ([], False)):
            path = {"/write": "/write?db=e", "/api/v2/write": "/api/v2/write?bucket=e"}.get(route, route)
            c.send(request("POST", path, b"", hdrs, length=length))
            code, _, h, b = c.response()
            if route == "/api/v1/write":
                # the JSON route refuses an empty body
                assert code == 400 and h["content-type"] == "application/json", (code, h, b)
                assert json.loads(b)["error"] == "no records: the body is empty", b
            else:
                # the line-protocol routes accept it as InfluxDB does: 204
                assert code == 204 and b == b"", (route, hdrs, code, b)
    c.send(request("POST", "/api/v1/write", b"[]", [("Content-Type", "application/json")]))
    code, _, _, b = c.response()
    assert code == 400 and json.loads(b)["error"] == "no records: the array is empty", b
    assert not c.closed_by_server(0.2)
    c.close()
    st, obj = s.get_json("/api/v1/jobs")
    assert st == 200 and obj["jobs"] == [], obj
    s.stop()


# ---------------------------------------------------------------------------
# the exact answers a second front end must reproduce


def test_exact_answers_of_accepted_and_refused_writes():
    s = start()
    c = Conn(s)
    for route in ROUTES:
        v2 = route == "/api/v2/write"
        c.send(post_for(route, "shape", [1]))
        code, ver, h, body = c.response()
        if route == "/api/v1/write":
            assert c.last_status_line == "HTTP/1.1 200 OK", c.last_status_line
            assert set(h) == {"date", "content-type", "content-length"}, h
            assert h["content-type"] == "application/json"
            assert json.loads(body) == {"accepted_points": 1, "accepted_events": 0, "records": 1}, body
        else:
            # 204: Date and Content-Type, no Content-Length (RFC 9110 forbids
            # it on a 204), no body, no Transfer-Encoding
            assert c.last_status_line == "HTTP/1.1 204 No Content", c.last_status_line
            assert set(h) == {"date", "content-type"}, h
            assert h["content-type"] == "application/json"
        assert h["date"].endswith(" GMT") and len(h["date"]) == 29, h["date"]
        # a refused write: 400, JSON error in the route's shape
        ct = "application/json" if route == "/api/v1/write" else LP_CT
        path = route + ("?bucket=shape" if v2 else "?db=shape" if route == "/write" else "")
        c.send(request("POST", path, "bad line", [("Content-Type", ct)]))
        code, ver, h, body = c.response()
        assert c.last_status_line == "HTTP/1.1 400 Bad Request", c.last_status_line
        assert set(h) == {"date", "content-type", "content-length"}, h
        assert h["content-type"] == "application/json" and int(h["content-length"]) == len(body)
        obj = json.loads(body)
        if v2:
            assert obj["code"] == "invalid" and "unable to parse" in obj["message"], obj
        elif route == "/write":
            assert "unable to parse" in obj["error"], obj
            assert obj["lines_ok"] == 0 and obj["lines_bad"] == 1 and obj["errors"][0]["line"] == 1, obj
        else:
            assert obj == {"error": "expected '[' (a JSON array of records) or '{' (NDJSON), got 'b'",
                           "record": -1, "line": 1, "field": ""}, obj
        # a partial line-protocol write: 400, the good lines stored
        if route != "/api/v1/write":
            c.send(request("POST", path, lp(("part2" if v2 else "part1"), 1) + "garbage\n" + lp(("part2" if v2 else "part1"), 2),
                           [("Content-Type", LP_CT)]))
            code, ver, h, body = c.response()
            obj = json.loads(body)
            assert code == 400 and "partial write: 1 of 3 lines bad" in (obj.get("message") or obj["error"]), obj
            assert obj["lines_ok"] == 2 and obj["lines_bad"] == 1, obj
            assert stored_steps(s, ("part2" if v2 else "part1")) == [1, 2]
        # a wrong method: 405 with Allow
        c.send(request("GET", route))
        code, ver, h, body = c.response()
        assert c.last_status_line == "HTTP/1.1 405 Method Not Allowed", c.last_status_line
        assert set(h) == {"date", "content-type", "content-length", "allow"} and h["allow"] == "POST", h
        obj = json.loads(body)
        want = "GET %s is not supported; use POST" % route
        assert obj == ({"code": "method not allowed", "message": want} if v2 else {"error": want}), obj
    # too large: 413 in the route's shape (test_errors.py covers the limit)
    assert not c.closed_by_server(0.2)
    c.close()
    s.stop()


def test_tokens_on_one_keepalive_connection():
    from test_security import token_add
    s = Server(name="edges-auth")
    tf = os.path.join(s.workdir, "tokens")
    ing = token_add(tf, "ing", "ingest")
    qry = token_add(tf, "qry", "query")
    team = token_add(tf, "team", "ingest", "team-a-*")
    s.flags += ["--tokens-file", tf]
    s.start()
    c = Conn(s)
    for route in ROUTES:
        tag = route.strip("/").replace("/", "-")
        v2 = route == "/api/v2/write"
        job = "au-" + tag
        for auth, want in (([], 401), ([("Authorization", "Bearer ing.wrongsecret")], 403),
                           ([("Authorization", "Bearer " + qry)], 403),
                           ([("Authorization", "Bearer " + ing)], 200 if route == "/api/v1/write" else 204),
                           ([("Authorization", "Token " + ing)], 200 if route == "/api/v1/write" else 204),
                           ([("Authorization", "Bearer")], 403)):
            c.send(post_for(route, job, [len(auth[0][1]) if auth else 0], headers=auth))
            code, ver, h, body = c.response()
            assert code == want, (route, auth, code, body)
            if code in (401, 403):
                obj = json.loads(body)
                assert h["content-type"] == "application/json", h
                assert ("www-authenticate" in h) == (code == 401), h
                if v2:
                    assert obj["code"] == ("unauthorized" if code == 401 else "forbidden"), obj
                    msg = obj["message"]
                else:
                    msg = obj["error"]
                assert (msg == "forbidden") if code == 403 else msg.startswith("authentication required"), obj
        # a job-limited token writing another job: refused by the handler,
        # in the same shape
        c.send(post_for(route, job, [99], headers=[("Authorization", "Bearer " + team)]))
        code, ver, h, body = c.response()
        obj = json.loads(body)
        assert code == 403 and obj == ({"code": "forbidden", "message": "forbidden"} if v2
                                       else {"error": "forbidden"}), (route, code, body)
        # the query on the same connection, with the query token
        c.send(query_req(job, metric_for(route), headers=[("Authorization", "Bearer " + qry)]))
        code, _, _, body = c.response()
        assert code == 200, body
        steps = points(body)
        assert len(steps) == 2, (route, steps)  # only the two accepted writes
    assert not c.closed_by_server(0.2)
    c.close()
    s.stop()
