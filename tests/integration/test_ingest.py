"""Ingest paths: HTTP JSON, InfluxDB line protocol (/write, /api/v2/write,
plain and gzip), UDP (line protocol and JSON); partial writes, precision,
batch-id retries, overload backpressure and gzip bombs. Every write is read
back bit-exactly through /api/v1/query/range."""

import gzip
import json
import random
import socket
import struct
import threading
import time

from harness import (T0, Server, ServerError, assert_series_equal, expected_series, f32,
                     series_map, wait_until)

SEC = 1_000_000_000


# ---------------------------------------------------------------------------
# helpers


def lp_num(x):
    """A float as line protocol writes it, reading back to the same bits."""
    r = repr(float(x))
    assert r not in ("nan", "inf", "-inf"), "line protocol has no literal for %r" % x
    return r


def lp_lines(recs, meas="train", precision_ns=1):
    """Records (harness shape) -> line protocol; metric m becomes "meas.m"."""
    out = []
    for r in recs:
        tags = "%s,job=%s,rank=%s" % (meas, r["job"], r["rank"])
        fields = ["%s=%s" % (m, lp_num(v)) for m, v in r["metrics"].items()]
        if r.get("step") is not None:
            fields.append("step=%di" % r["step"])
        ts = r["timestamp"] // precision_ns
        out.append("%s %s %d" % (tags, ",".join(fields), ts))
    return "\n".join(out) + "\n"


def as_lp_metrics(recs, meas="train"):
    """The same records with the metric names line protocol gives them."""
    return [dict(r, metrics={"%s.%s" % (meas, m): v for m, v in r["metrics"].items()})
            for r in recs]


def records(job, ranks, steps, seed=1):
    rnd = random.Random(seed)
    specials = [-0.0, 0.0, 1e-300, 5e-324, 2.0 ** 60, -1.5e300, 1 / 3, 12.0]
    recs = []
    for step in steps:
        for rank in ranks:
            recs.append({
                "job": job, "rank": rank, "step": step,
                "timestamp": T0 + step * SEC + rank * 1000,
                "metrics": {
                    "loss": f32(2.5 / (step + 1) + rnd.random() * 0.01),
                    "lr": 3e-4 * rnd.random(),
                    "x": specials[(step + rank) % len(specials)],
                },
            })
    return recs


def read_back(s, job, metrics, **kw):
    return series_map(s.query_ok(job=job, metric=",".join(sorted(metrics)), **kw))


def check_stored(s, recs, what):
    job = recs[0]["job"]
    metrics = {m for r in recs for m in r["metrics"]}
    assert_series_equal(read_back(s, job, metrics), expected_series(recs), what)


def post_lp(s, path, body, headers=None, **kw):
    if isinstance(body, str):
        body = body.encode()
    hdrs = {"Content-Type": "text/plain; charset=utf-8"}
    hdrs.update(headers or {})
    return s.request("POST", path, body=body, headers=hdrs, **kw)


def post_lp_json(s, path, body, headers=None):
    st, h, data = post_lp(s, path, body, headers)
    return st, h, (json.loads(data) if data else None)


def metrics_text(s):
    st, _, body = s.get("/metrics")
    assert st == 200, st
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def free_udp_port():
    sk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sk.bind(("127.0.0.1", 0))
    port = sk.getsockname()[1]
    sk.close()
    return port


def udp_server(flags=()):
    """A server with the UDP listener on a free port (picked here; retried
    if another process takes it first). -> (server, udp port)"""
    last = None
    for _ in range(5):
        port = free_udp_port()
        s = Server(flags=list(flags) + ["--udp-port", str(port)])
        try:
            return s.start(), port
        except ServerError as e:
            last = e
    raise last


def udp_send(port, payloads):
    sk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for p in payloads:
            sk.sendto(p.encode() if isinstance(p, str) else p, ("127.0.0.1", port))
    finally:
        sk.close()


def wait_points(s, job, metrics, n, what):
    def have():
        st, obj = s.query(job=job, metric=",".join(sorted(metrics)))
        return st == 200 and obj["points"] >= n
    wait_until(have, timeout=60, what=what)


# ---------------------------------------------------------------------------
# HTTP line protocol


def test_lp_v1_roundtrip_204():
    s = Server().start()
    recs = records("lp1", range(4), range(40))
    st, h, body = post_lp(s, "/write?db=telemetry&rp=autogen&u=me&p=secret&precision=n",
                          lp_lines(recs))
    assert st == 204 and body == b"", (st, body)
    check_stored(s, as_lp_metrics(recs), "/write")
    # integer, unsigned and boolean fields; measurement-only metric (field "value")
    st, _, body = post_lp(s, "/write", "gpu,job=lp1,rank=2 temp_c=71i,ecc=3u,ok=true,"
                          "value=5.5,note=\"hot\" %d\n" % T0)
    assert st == 204, (st, body)
    got = read_back(s, "lp1", ["gpu.temp_c", "gpu.ecc", "gpu.ok", "gpu"], rank="2")
    want = expected_series([{"job": "lp1", "rank": 2, "timestamp": T0, "metrics": {
        "gpu.temp_c": 71.0, "gpu.ecc": 3.0, "gpu.ok": 1.0, "gpu": 5.5}}])
    assert_series_equal(got, want, "typed fields")
    m = metrics_text(s)
    assert m['rankdb_lp_string_fields_skipped_total'] >= 1, m
    assert m['rankdb_lp_lines_total{result="ok"}'] == 161, m
    s.stop()


def test_lp_v2_plain_and_gzip():
    s = Server().start()
    recs = records("lp2", range(3), range(30), seed=2)
    a, b, c = recs[:30], recs[30:60], recs[60:]
    st, _, body = post_lp(s, "/api/v2/write?org=o&bucket=b&precision=ns", lp_lines(a))
    assert st == 204, (st, body)
    st, _, body = post_lp(s, "/api/v2/write?orgID=1&bucket=b", gzip.compress(lp_lines(b).encode()),
                          {"Content-Encoding": "gzip"})
    assert st == 204, (st, body)
    # two gzip members back to back (what concatenating .gz files gives), on v1
    text = lp_lines(c).encode()
    half = text.index(b"\n", len(text) // 2) + 1
    two = gzip.compress(text[:half]) + gzip.compress(text[half:])
    st, _, body = post_lp(s, "/write", two, {"Content-Encoding": "gzip"})
    assert st == 204, (st, body)
    check_stored(s, as_lp_metrics(recs), "v2 + gzip")

    # corrupt and truncated gzip, unknown encoding: nothing stored
    gz = gzip.compress(lp_lines(records("lp2bad", [0], [1])).encode())
    for bad, what in [(b"not gzip at all", "garbage"), (gz[:len(gz) // 2], "truncated"),
                      (gz[:20] + bytes(x ^ 0x55 for x in gz[20:]), "corrupt")]:
        st, _, obj = post_lp_json(s, "/api/v2/write", bad, {"Content-Encoding": "gzip"})
        assert st == 400 and obj["code"] == "invalid" and "gzip" in obj["message"], (what, st, obj)
        st, _, obj = post_lp_json(s, "/write", bad, {"Content-Encoding": "gzip"})
        assert st == 400 and "gzip" in obj["error"], (what, st, obj)
    st, _, obj = post_lp_json(s, "/write", b"x", {"Content-Encoding": "br"})
    assert st == 415 and "br" in obj["error"], (st, obj)
    st, obj = s.get_json("/api/v1/jobs")
    assert [j["job"] for j in obj["jobs"]] == ["lp2"], obj
    s.stop()


def test_lp_precision_and_params():
    s = Server().start()
    ts = T0 + 123_456_789_012  # ns
    cases = [("/write", "n", 1), ("/write", "u", 1000), ("/write", "ms", 10 ** 6),
             ("/write", "s", SEC), ("/api/v2/write", "ns", 1), ("/api/v2/write", "us", 1000),
             ("/api/v2/write", "ms", 10 ** 6), ("/api/v2/write", "s", SEC)]
    want = []
    for i, (path, prec, unit) in enumerate(cases):
        st, _, body = post_lp(s, "%s?precision=%s" % (path, prec),
                              "p,job=prec,rank=%d v=%d %d\n" % (i, i, ts // unit))
        assert st == 204, (path, prec, st, body)
        want.append({"job": "prec", "rank": i, "timestamp": ts // unit * unit,
                     "metrics": {"p.v": float(i)}})
    assert_series_equal(read_back(s, "prec", ["p.v"]), expected_series(want), "precision")
    # the other API's spellings and unknown parameters are refused
    for path, query, key in [("/api/v2/write", "precision=n", "message"),
                             ("/api/v2/write", "precision=h", "message"),
                             ("/write", "precision=xs", "error"),
                             ("/write", "bucket=b", "error"),
                             ("/api/v2/write", "db=x", "message"),
                             ("/write", "batch_id=has%20space", "error")]:
        st, _, obj = post_lp_json(s, "%s?%s" % (path, query), "p,job=prec v=1\n")
        assert st == 400 and obj[key], (path, query, st, obj)
    st, h, body = s.get("/write")
    assert st == 405 and h.get("allow") == "POST", (st, h, body)
    st, obj = s.get_json("/api/v1/query/range?job=prec&metric=p.v")
    assert obj["points"] == len(cases), obj
    s.stop()


def test_lp_partial_write():
    s = Server().start()
    body = ("m,job=pw,rank=0 v=1 %d\n"
            "this is not line protocol\n"
            "m,job=pw,rank=1 v=2 %d\n"
            "m,rank=2 v=3 %d\n"
            "m,job=pw,rank=3 v=4 %d\n") % (T0, T0, T0, T0)
    st, _, obj = post_lp_json(s, "/write", body)
    assert st == 400, (st, obj)
    assert obj["error"].startswith("partial write"), obj
    assert "line 2" in obj["error"] and "line 4" in obj["error"], obj
    assert obj["lines_ok"] == 3 and obj["lines_bad"] == 2, obj
    assert [e["line"] for e in obj["errors"]] == [2, 4], obj
    want = expected_series([{"job": "pw", "rank": r, "timestamp": T0, "metrics": {"m.v": v}}
                            for r, v in [(0, 1.0), (1, 2.0), (3, 4.0)]])
    assert_series_equal(read_back(s, "pw", ["m.v"]), want, "partial write kept the good lines")
    # v2 shape
    st, _, obj = post_lp_json(s, "/api/v2/write", "m,job=pw2 v=1 %d\nbad\n" % T0)
    assert st == 400 and obj["code"] == "invalid" and "partial write" in obj["message"], obj
    assert obj["lines_ok"] == 1 and obj["lines_bad"] == 1, obj
    # every line bad: nothing stored
    st, _, obj = post_lp_json(s, "/write", "bad one\nm,rank=1 v=1\n")
    assert st == 400 and obj["lines_ok"] == 0 and obj["lines_bad"] == 2, obj
    # blank and comment lines only: nothing to do
    st, _, body = post_lp(s, "/write", "\n# comment\n\n")
    assert st == 204, (st, body)
    m = metrics_text(s)
    assert m['rankdb_lp_lines_total{result="bad"}'] == 5, m
    s.stop()


def test_lp_default_job():
    s = Server(flags=["--lp-default-job", "telegraf-host1"]).start()
    st, _, body = post_lp(s, "/write?precision=s", "cpu,host=a usage=12.5 1700000000\n")
    assert st == 204, (st, body)
    got = read_back(s, "telegraf-host1", ["cpu.usage;host=a"])
    want = expected_series([{"job": "telegraf-host1", "rank": "job", "timestamp": T0,
                             "metrics": {"cpu.usage;host=a": 12.5}}])
    assert_series_equal(got, want, "default job")
    s.stop()
    rc, text = Server(flags=["--lp-default-job", "bad job!"]).start_expect_failure()
    assert "lp_default_job" in text, text[-2000:]


def test_lp_logs_and_spans_with_points():
    """Log and span lines go into the same write as the points (one WAL
    record): the answer is 204 and the points of the body are stored."""
    s = Server().start()
    body = ("rankdb_log,job=ev,rank=3,level=error message=\"NCCL timeout\",step=7i %d\n"
            "rankdb_span,job=ev,rank=3,name=forward step=7i,duration_ns=1500000i %d\n"
            "train,job=ev,rank=3 loss=1.25,step=7i %d\n") % (T0, T0, T0)
    st, _, out = post_lp(s, "/api/v2/write", body)
    assert st == 204, (st, out)
    want = expected_series([{"job": "ev", "rank": 3, "step": 7, "timestamp": T0,
                             "metrics": {"train.loss": 1.25}}])
    assert_series_equal(read_back(s, "ev", ["train.loss"]), want, "points beside events")
    s.stop()


# ---------------------------------------------------------------------------
# batch ids


def _count_points(s, job, metrics):
    st, obj = s.query(job=job, metric=",".join(metrics))
    assert st == 200, (st, obj)
    return obj["points"]


def test_batch_id_json_retry():
    s = Server().start()
    recs = records("bid", range(2), range(5))
    body = json.dumps(recs)
    hdr = {"X-Rankdb-Batch-Id": "client7-000042"}
    st, obj = s.post_json("/api/v1/write", body, headers=hdr)
    assert st == 200 and obj["accepted_points"] == 30 and not obj.get("duplicate"), (st, obj)
    st, obj = s.post_json("/api/v1/write", body, headers=hdr)
    assert st == 200 and obj.get("duplicate") is True, (st, obj)
    # the query-parameter form names the same batch
    st, obj = s.post_json("/api/v1/write?batch_id=client7-000042", body)
    assert st == 200 and obj.get("duplicate") is True, (st, obj)
    check_stored(s, recs, "stored once")
    s.restart()
    st, obj = s.post_json("/api/v1/write", body, headers=hdr)
    assert st == 200 and obj.get("duplicate") is True, (st, obj)
    check_stored(s, recs, "stored once after a restart")
    # a different id is a different batch; a bad id is refused
    st, obj = s.post_json("/api/v1/write?batch_id=other", json.dumps(records("bid2", [0], [1])))
    assert st == 200 and not obj.get("duplicate"), (st, obj)
    st, obj = s.post_json("/api/v1/write?batch_id=a", body, headers={"X-Rankdb-Batch-Id": "b"})
    assert st == 400 and "batch" in obj["error"], (st, obj)
    st, obj = s.post_json("/api/v1/write", body, headers={"X-Rankdb-Batch-Id": "x" * 129})
    assert st == 400, (st, obj)
    s.stop()


def test_batch_id_lp_retry():
    s = Server().start()
    recs = records("bidlp", range(2), range(5))
    body = lp_lines(recs)
    for path, hdr in [("/write", {"X-Rankdb-Batch-Id": "lp-1"}),
                      ("/api/v2/write?batch_id=lp-1", {}),
                      ("/write", {"X-Rankdb-Batch-Id": "lp-1", "Content-Encoding": "gzip"})]:
        data = gzip.compress(body.encode()) if hdr.get("Content-Encoding") else body
        st, _, out = post_lp(s, path, data, hdr)
        assert st == 204, (path, st, out)
    check_stored(s, as_lp_metrics(recs), "line protocol batch stored once")
    s.restart()
    st, _, out = post_lp(s, "/write", body, {"X-Rankdb-Batch-Id": "lp-1"})
    assert st == 204, (st, out)
    check_stored(s, as_lp_metrics(recs), "stored once after a restart")
    s.stop()


# ---------------------------------------------------------------------------
# UDP


def test_udp_line_protocol_and_json():
    s, port = udp_server()
    lp_recs = records("udp-lp", range(4), range(25), seed=3)
    # several lines per datagram, one datagram per step
    udp_send(port, [lp_lines([r for r in lp_recs if r["step"] == st]) for st in range(25)])
    js_recs = records("udp-js", range(3), range(20), seed=4)
    arrays = [json.dumps([r for r in js_recs if r["step"] == st]) for st in range(10)]
    ndjson = ["".join(json.dumps(r) + "\n" for r in js_recs if r["step"] == st)
              for st in range(10, 20)]
    udp_send(port, arrays + ndjson)
    wait_points(s, "udp-lp", ["train.loss", "train.lr", "train.x"], 300, "UDP line protocol")
    wait_points(s, "udp-js", ["loss", "lr", "x"], 180, "UDP JSON")
    check_stored(s, as_lp_metrics(lp_recs), "UDP line protocol")
    check_stored(s, js_recs, "UDP JSON")
    m = metrics_text(s)
    assert m["rankdb_udp_datagrams_received_total"] == 45, m
    assert m["rankdb_udp_points_total"] == 480, m
    assert m["rankdb_udp_queue_depth"] == 0, m
    s.stop()


def test_udp_drops_are_counted():
    s, port = udp_server(["--udp-max-datagram-bytes", "1024"])
    m0 = metrics_text(s)
    assert m0['rankdb_udp_dropped_total{reason="oversize"}'] == 0, m0
    big = "m,job=udpd,rank=0 " + ",".join("f%d=1" % i for i in range(400)) + "\n"
    assert len(big) > 1024
    udp_send(port, [big, "complete garbage\n", "{\"job\": broken json",
                    "m,job=udpd,rank=1 v=2 %d\nnot a line\n" % T0])
    wait_points(s, "udpd", ["m.v"], 1, "the good line of a partly bad datagram")

    def counted():
        m = metrics_text(s)
        return (m['rankdb_udp_dropped_total{reason="oversize"}'] == 1
                and m['rankdb_udp_dropped_total{reason="parse_error"}'] == 2
                and m["rankdb_udp_lines_dropped_total"] == 1
                and m["rankdb_udp_datagrams_received_total"] == 4)
    wait_until(counted, timeout=30, what="UDP drop counters")
    assert _count_points(s, "udpd", ["m.v"]) == 1
    st, obj = s.get_json("/api/v1/jobs")
    assert [j["job"] for j in obj["jobs"]] == ["udpd"], obj  # nothing of the oversize one
    s.stop()


def test_udp_queue_written_on_stop():
    s, port = udp_server()
    recs = records("udp-stop", range(2), range(200), seed=5)
    udp_send(port, [lp_lines([r]) for r in recs])
    s.stop()  # the datagrams sit in the socket buffer or the queue: written before exit
    s.start()
    check_stored(s, as_lp_metrics(recs), "datagrams received before SIGTERM")
    s.stop()


# ---------------------------------------------------------------------------
# overload and bombs


def _rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _is_asan(pid):
    with open("/proc/%d/maps" % pid) as f:
        return "asan" in f.read()


def test_overload_backpressure():
    s = Server(flags=["--head-max-bytes", "1M", "--checkpoint-interval-s", "3600",
                      "--wal-rotate-bytes", "16G", "--sync-policy", "none"]).start()
    rss_limit_kb = (900 if _is_asan(s.pid()) else 300) * 1024
    writers, stop = 24, threading.Event()
    acked = [[] for _ in range(writers)]
    seen = {"busy": 0, "healthz": 0, "rss_max": 0}
    errors = []
    lock = threading.Lock()

    def writer(w):
        step = 0
        try:
            while not stop.is_set():
                recs = [{"job": "ovl", "rank": w, "step": step + i,
                         "timestamp": T0 + (step + i) * SEC,
                         "metrics": {"a%d" % k: float(step + i + k) for k in range(8)}}
                        for i in range(500)]
                st, h, body = s.post("/api/v1/write", json.dumps(recs), keepalive=True)
                if st == 200:
                    acked[w].extend(recs)
                elif st == 503:
                    assert h.get("retry-after"), h
                    with lock:
                        seen["busy"] += 1
                else:
                    raise AssertionError("write: %d %r" % (st, body[:300]))
                step += 500
        except Exception as e:  # reported by the main thread
            errors.append(repr(e))
            stop.set()

    def watcher():
        while not stop.is_set():
            st, _, _ = s.get("/healthz", timeout=30)
            assert st == 200, st
            with lock:
                seen["healthz"] += 1
                seen["rss_max"] = max(seen["rss_max"], _rss_kb(s.pid()))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    threads.append(threading.Thread(target=watcher))
    for t in threads:
        t.start()
    try:
        wait_until(lambda: (seen["busy"] >= 20 and seen["healthz"] >= 5) or errors,
                   timeout=90, what="writers to see 503s while /healthz answers")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    print("overload: %d refused (503), %d acknowledged, /healthz answered %d times, max RSS %d kB"
          % (seen["busy"], sum(len(a) for a in acked) // 500, seen["healthz"], seen["rss_max"]))
    assert seen["rss_max"] < rss_limit_kb, "RSS %d kB over %d kB" % (seen["rss_max"], rss_limit_kb)
    m = metrics_text(s)
    assert m['rankdb_write_rejected_total{reason="busy"}'] >= 20, m
    every = [r for a in acked for r in a]
    assert every, "no write was acknowledged"
    metrics = ["a%d" % k for k in range(8)]
    for w in range(writers):  # acknowledged = stored, refused = not stored
        got = read_back(s, "ovl", metrics, rank=str(w))
        assert_series_equal(got, expected_series(acked[w]), "writer %d" % w)
    s.stop()


def test_gzip_bomb_413():
    s = Server(flags=["--max-body-bytes", "1M"]).start()
    line = b"m,job=bomb,rank=0 v=1\n"
    bomb = gzip.compress(line * (3 * 1024 * 1024 // len(line)), 9)
    assert len(bomb) < 1024 * 1024
    st, _, obj = post_lp_json(s, "/write", bomb, {"Content-Encoding": "gzip"})
    assert st == 413 and "max_body_bytes" in obj["error"], (st, obj)
    st, _, obj = post_lp_json(s, "/api/v2/write", bomb, {"Content-Encoding": "gzip"})
    assert st == 413 and obj["code"] == "request too large", (st, obj)
    # refused from Content-Length alone: the same shapes per endpoint
    big = b"m,job=big,rank=0 v=1\n" * (2 * 1024 * 1024 // 22)
    st, _, obj = post_lp_json(s, "/api/v2/write", big)
    assert st == 413 and obj["code"] == "request too large" and "max_body_bytes" in obj["message"], (st, obj)
    st, _, obj = post_lp_json(s, "/write", big)
    assert st == 413 and "max_body_bytes" in obj["error"], (st, obj)
    # just under the bound inflates fine
    ok = gzip.compress(line * (1000 * 1024 // len(line)))
    st, _, body = post_lp(s, "/write?precision=s", ok, {"Content-Encoding": "gzip"})
    assert st == 204, (st, body)
    st, obj = s.get_json("/api/v1/jobs")
    assert [j["job"] for j in obj["jobs"]] == ["bomb"], obj
    assert s.get("/healthz")[0] == 200
    s.stop()


def test_json_write_gzip_and_unknown_encoding():
    """The JSON write endpoint takes gzip bodies like the line-protocol ones
    (the SDKs compress), and refuses an encoding it cannot read with 415,
    storing nothing."""
    s = Server().start()
    recs = [{"job": "gz", "rank": r, "step": 1, "timestamp": 1700000000000000000 + r,
             "metrics": {"loss": 1.5 + r}} for r in range(4)]
    body = gzip.compress("".join(json.dumps(r) + "\n" for r in recs).encode())
    st, obj = s.post_json("/api/v1/write", body, content_type="application/x-ndjson",
                          headers={"Content-Encoding": "gzip"})
    assert st == 200 and obj["accepted_points"] == 4, (st, obj)
    st, obj = s.post_json("/api/v1/write", json.dumps(recs).encode(),
                          headers={"Content-Encoding": "br"})
    assert st == 415, (st, obj)
    assert "Content-Encoding" in obj["error"], obj
    st, obj = s.post_json("/api/v1/write", b"\x1f\x8b garbage",
                          headers={"Content-Encoding": "gzip"})
    assert st == 400, (st, obj)
    q = s.query_ok(job="gz", metric="loss")
    assert sum(len(x["values"]) for x in q["series"]) == 4, q
    s.stop()
