"""Bad input, query errors, limits, /metrics, signals and the data-dir lock."""

import json
import os
import re
import signal
import socket

from harness import (T0, Server, jobs_brief, jobs_stored, assert_error, assert_series_equal, expected_series, series_map,
                     wait_until)


def _rec(**kw):
    r = {"job": "bad", "rank": 0, "step": 1, "timestamp": T0, "metrics": {"a": 1.0}}
    r.update(kw)
    return r


def _without(key):
    r = _rec()
    del r[key]
    return r


# (description, body text, expected record index or None, expected field or None)
def _bad_bodies():
    ok = json.dumps(_rec())
    cases = [
        ("malformed JSON", "{not json", None, None),
        ("garbage", "hello world", None, None),
        ("truncated object", ok[:-5], None, None),
        ("truncated array", "[" + ok + "," + ok[:20], None, None),
        ("unclosed array", "[" + ok, None, None),
        ("top-level number", "42", None, None),
        ("top-level string", '"x"', None, None),
        ("array element not an object", "[" + ok + ",1]", 1, None),
        ("trailing comma in object", ok[:-1] + ",}", None, None),
    ]
    recs = [
        ("rank string", _rec(rank="x"), "rank"),
        ("rank numeric string", _rec(rank="0"), "rank"),
        ("rank -1", _rec(rank=-1), "rank"),
        ("rank 1.5", _rec(rank=1.5), "rank"),
        ("rank null", _rec(rank=None), "rank"),
        ("step -1", _rec(step=-1), "step"),
        ("step 1.5", _rec(step=1.5), "step"),
        ("step string", _rec(step="1"), "step"),
        ("timestamp string", _rec(timestamp="abc"), "timestamp"),
        ("timestamp 1.5", _rec(timestamp=1.5), "timestamp"),
        ("attempt -1", _rec(attempt=-1), "attempt"),
        ("attempt string", _rec(attempt="a"), "attempt"),
        ("metrics array", _rec(metrics=[1, 2]), "metrics"),
        ("metrics string", _rec(metrics="loss"), "metrics"),
        ("metrics empty", _rec(metrics={}), "metrics"),
        ("value true", _rec(metrics={"a": True}), None),
        ("value false", _rec(metrics={"a": 1.0, "b": False}), None),
        ("value object", _rec(metrics={"a": {"x": 1}}), None),
        ("value array", _rec(metrics={"a": [1]}), None),
        ("value bad string", _rec(metrics={"a": "hello"}), None),
        ("value empty string", _rec(metrics={"a": ""}), None),
        ("value short hex", _rec(metrics={"a": "0x7ff8"}), None),
        ("value bad hex digit", _rec(metrics={"a": "0x7ff800000000000g"}), None),
        ("value long hex", _rec(metrics={"a": "0x7ff80000000000000"}), None),
        ("value lower-case nan", _rec(metrics={"a": "nan"}), None),
        ("unknown top-level field", _rec(foo=1), "foo"),
        ("type not metrics", _rec(type="bogus"), "type"),
        ("job too long", _rec(job="j" * 129), "job"),
        ("job empty", _rec(job=""), "job"),
        ("job with space", _rec(job="a b"), "job"),
        ("job with slash", _rec(job="a/b"), "job"),
        ("job with non-ASCII", _rec(job="jöb"), "job"),
        ("job number", _rec(job=5), "job"),
        ("missing job", _without("job"), "job"),
        ("missing rank", _without("rank"), "rank"),
        ("missing metrics", _without("metrics"), "metrics"),
        ("metric name 257 bytes", _rec(metrics={"m" * 257: 1.0}), None),
        ("metric name empty", _rec(metrics={"": 1.0}), None),
    ]
    for ch in [" ", '"', "\\", "{", "}", ",", "\t", "\x7f", "é"]:
        recs.append(("metric name with %r" % ch, _rec(metrics={"a" + ch + "b": 1.0}), None))
    for desc, r, field in recs:
        cases.append((desc, json.dumps(r), 0, field))
        # the same record in the middle of an array of good ones
        arr = [_rec(step=10 + i) for i in range(2)] + [r] + [_rec(step=20 + i) for i in range(2)]
        cases.append((desc + " (array, record 2)", json.dumps(arr), 2, field))
    return cases


def test_bad_input_rejected():
    s = Server().start()
    failures = []
    for desc, body, record, field in _bad_bodies():
        st, h, raw = s.post("/api/v1/write", body)
        try:
            obj = json.loads(raw.decode("utf-8"))
        except Exception:
            failures.append("%s: status %d, body not JSON: %r" % (desc, st, raw[:200]))
            continue
        if st != 400 or not isinstance(obj, dict) or not obj.get("error"):
            failures.append("%s: expected 400 with an error, got %d %r" % (desc, st, obj))
            continue
        if "record" not in obj or not isinstance(obj["record"], int):
            failures.append("%s: error lacks the record index: %r" % (desc, obj))
        elif record is not None and obj["record"] != record:
            failures.append("%s: error names record %r, expected %d: %r" % (desc, obj["record"], record, obj))
        if field is not None and field not in str(obj.get("field", "")):
            failures.append("%s: error field %r, expected to name %r: %r" % (desc, obj.get("field"), field, obj))
    # nothing of any of those requests was stored
    st, obj = s.get_json("/api/v1/jobs")
    if st != 200 or obj != {"jobs": []}:
        failures.append("after only bad writes, jobs listing is %d %r" % (st, obj))
    assert not failures, "%d problems:\n%s" % (len(failures), "\n".join(failures))

    # limits that are still fine
    s.write_ok([_rec(job="j" * 128, metrics={"m" * 256: 1.0}),
                _rec(job="A.z-0_9", rank="job", metrics={"!#$%&'()*+-./:;<>?@[]^_`|~": 2.0})])
    st, obj = s.get_json("/api/v1/jobs/%s/metrics" % ("j" * 128))
    assert st == 200 and obj["metrics"] == ["m" * 256], (st, obj)
    st, obj = s.get_json("/api/v1/jobs/A.z-0_9/metrics")
    assert st == 200 and obj["metrics"] == ["!#$%&'()*+-./:;<>?@[]^_`|~"], (st, obj)
    s.stop()


def test_bad_record_in_batch_stores_nothing():
    s = Server().start()
    good = [{"job": "mix", "rank": r, "step": 5, "timestamp": T0 + r, "metrics": {"loss": 0.5 + r}}
            for r in range(5)]
    bad = list(good)
    bad[2] = dict(good[2], step=-1)
    st, obj = s.write(bad)
    assert_error(st, obj, 400, record=2, field="step", what="bad record in an array")

    # NDJSON: line numbers count every line, records skip blank ones
    lines = [json.dumps(r) for r in good]
    lines[3] = json.dumps(dict(good[3], metrics={"loss": True}))
    body = lines[0] + "\n\n" + "\n".join(lines[1:]) + "\n"
    st, obj = s.post_json("/api/v1/write", body, content_type="application/x-ndjson")
    assert_error(st, obj, 400, record=3, what="bad record in NDJSON")
    assert obj.get("line") == 5, "NDJSON error should name line 5: %r" % obj

    lines = [json.dumps(r) for r in good]
    lines[1] = lines[1][:-3]  # malformed JSON on line 2
    st, obj = s.post_json("/api/v1/write", "\n".join(lines) + "\n", content_type="application/x-ndjson")
    assert_error(st, obj, 400, what="malformed NDJSON line")
    assert obj.get("line") == 2, "NDJSON error should name line 2: %r" % obj

    st, obj = s.get_json("/api/v1/jobs")
    assert st == 200 and obj == {"jobs": []}, obj
    st, obj = s.get_json("/api/v1/jobs/mix/metrics")
    assert_error(st, obj, 404, what="metrics of a job only bad writes named")
    st, obj = s.query(job="mix", metric="loss")
    assert_error(st, obj, 404, what="query of a job only bad writes named")

    # a following good request works and stores exactly its own points
    s.write_ok(good)
    got = series_map(s.query_ok(job="mix", metric="loss"))
    assert_series_equal(got, expected_series(good), "after the good write")
    # and a bad batch for an existing job adds nothing to it
    more = [dict(r, step=6, timestamp=T0 + 100 + r["rank"]) for r in good]
    more[4] = dict(more[4], rank="zero")
    st, obj = s.write(more)
    assert_error(st, obj, 400, record=4, field="rank", what="bad record last")
    assert_series_equal(series_map(s.query_ok(job="mix", metric="loss")), expected_series(good),
                        "after a bad batch for an existing job")
    s.restart()
    assert_series_equal(series_map(s.query_ok(job="mix", metric="loss")), expected_series(good),
                        "after restart")
    s.stop()


def _raw_http(port, data, read_timeout=30):
    """Sends raw bytes, returns (status, body bytes) of the answer (None if
    the server closed without answering)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=read_timeout)
    try:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        buf = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            buf += chunk
            if b"\r\n\r\n" in buf:
                head, _, rest = buf.partition(b"\r\n\r\n")
                m = re.search(rb"(?i)content-length:\s*(\d+)", head)
                if m and len(rest) >= int(m.group(1)):
                    break
    finally:
        sock.close()
    if not buf.startswith(b"HTTP/1."):
        return None, buf
    status = int(buf.split(b" ", 2)[1])
    return status, buf.partition(b"\r\n\r\n")[2]


def test_body_too_large_413():
    s = Server(["--max-body-bytes", "1024"]).start()
    recs = [{"job": "big", "rank": i, "step": 1, "timestamp": T0, "metrics": {"loss": 0.25}} for i in range(40)]
    body = json.dumps(recs)
    assert len(body) > 1024
    st, obj = s.post_json("/api/v1/write", body)
    assert_error(st, obj, 413, what="body over --max-body-bytes")
    # chunked transfer encoding, no Content-Length
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 300]), body[i:i + 300].encode())
                       for i in range(0, len(body), 300)) + b"0\r\n\r\n"
    st, raw = _raw_http(s.port, b"POST /api/v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                        b"Connection: close\r\n\r\n" + chunked)
    assert st == 413, "chunked body over the limit: %r %r" % (st, raw[:300])
    st, obj = s.get_json("/api/v1/jobs")
    assert st == 200 and obj == {"jobs": []}, obj
    # a body under the limit is fine
    small = recs[:5]
    assert len(json.dumps(small)) < 1024
    s.write_ok(small)
    st, obj = s.get_json("/api/v1/jobs")
    assert jobs_brief(obj) == {"jobs": [{"job": "big", "series": 5}]}, obj
    st, obj = s.get_json("/healthz")
    assert st == 200
    s.stop()


def test_size_suffixes_accepted():
    s = Server(["--max-body-bytes", "1K", "--wal-rotate-bytes", "1M"]).start()
    body = json.dumps([{"job": "k", "rank": i, "step": 1, "timestamp": T0, "metrics": {"x": 1}} for i in range(40)])
    assert 1024 < len(body) < 4000
    st, obj = s.post_json("/api/v1/write", body)
    assert_error(st, obj, 413, what="body over 1K")
    s.stop()


def test_unknown_path_and_wrong_method():
    s = Server().start()
    for method, path, want in [("GET", "/nope", 404), ("GET", "/api/v1/nope", 404),
                               ("GET", "/api/v1/write", 405), ("PUT", "/api/v1/write", 405),
                               ("POST", "/api/v1/jobs", 405), ("DELETE", "/healthz", 405),
                               ("POST", "/api/v1/query/range?job=x&metric=y", 405)]:
        st, h, raw = s.request(method, path, body=b"" if method != "GET" else None)
        obj = json.loads(raw.decode()) if raw else None
        assert_error(st, obj, want, what="%s %s" % (method, path))
        assert h.get("content-type", "").startswith("application/json"), (method, path, h)
    s.stop()


def test_query_errors():
    s = Server(["--max-query-points", "100"]).start()
    recs = [{"job": "q", "rank": i % 4, "step": i // 4, "timestamp": T0 + i, "metrics": {"m": float(i)}}
            for i in range(1000)]
    s.write_ok(recs)
    for params, want, desc in [
        ({"metric": "m"}, 400, "missing job"),
        ({"job": "q"}, 400, "missing metric"),
        ({"job": "q", "metric": ""}, 400, "empty metric"),
        ({"job": "q", "metric": "m", "from": "abc"}, 400, "from not a number"),
        ({"job": "q", "metric": "m", "to": "1.5x"}, 400, "to not a number"),
        ({"job": "q", "metric": "m", "step_from": "x"}, 400, "step_from not a number"),
        ({"job": "q", "metric": "m", "step_to": "--1"}, 400, "step_to not a number"),
        ({"job": "q", "metric": "m", "rank": "x"}, 400, "rank not a number"),
        ({"job": "nosuch", "metric": "m"}, 404, "unknown job"),
        ({"job": "q", "metric": "m"}, 422, "1000 points over a 100 limit"),
        ({"job": "q", "metric": "m", "rank": "0"}, 422, "250 points over a 100 limit"),
        ({"job": "q", "metric": "m", "step_from": 0, "step_to": 25}, 422, "104 points"),
        ({"job": "q", "metric": "m", "from": T0, "to": T0 + 100}, 422, "101 points"),
    ]:
        st, obj = s.query(**params)
        assert_error(st, obj, want, what=desc)
        if want == 422:
            msg = obj["error"].lower()
            assert any(w in msg for w in ("from", "to", "step", "rank", "narrow", "max_query_points",
                                          "limit")), "422 should tell how to narrow the query: %r" % msg
    # exactly at the limit is fine
    obj = s.query_ok(job="q", metric="m", **{"from": T0, "to": T0 + 99})
    assert obj["points"] == 100, obj["points"]
    obj = s.query_ok(job="q", metric="m", step_from=0, step_to=24)
    assert obj["points"] == 100, obj["points"]
    obj = s.query_ok(job="q", metric="m", rank="1", step_from=100, step_to=199)
    assert obj["points"] == 100
    assert_series_equal(series_map(obj), expected_series(recs, ranks={1}, step_from=100, step_to=199))
    s.stop()


def _prom_value(text, name):
    total = None
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m and m.group(1) == name:
            total = (total or 0.0) + float(m.group(3))
    return total


def test_prometheus_metrics():
    s = Server().start()
    st, h, raw = s.get("/metrics")
    assert st == 200, st
    ct = h.get("content-type", "")
    assert ct.startswith("text/plain") and "version=0.0.4" in ct, ct
    text = raw.decode()
    before = _prom_value(text, "rankdb_points_written_total")
    assert before is not None, "rankdb_points_written_total missing:\n%s" % text[:2000]
    assert "# TYPE rankdb_points_written_total counter" in text, text[:2000]
    s.write_ok([{"job": "pm", "rank": r, "step": 1, "timestamp": T0, "metrics": {"a": 1, "b": 2, "c": 3}}
                for r in range(10)])

    def grown():
        v = _prom_value(s.get("/metrics")[2].decode(), "rankdb_points_written_total")
        return v if v is not None and v >= before + 30 else None
    wait_until(grown, timeout=30, what="rankdb_points_written_total to grow by 30")
    s.stop()


def test_sigterm_and_sigint_exit_zero():
    s = Server().start()
    s.write_ok([{"job": "sig", "rank": 0, "step": 1, "timestamp": T0, "metrics": {"a": 1}}])
    assert s.signal_stop(signal.SIGTERM) == 0
    s.start()
    s.query_ok(job="sig", metric="a")
    s.write_ok([{"job": "sig", "rank": 0, "step": 2, "timestamp": T0 + 1, "metrics": {"a": 2}}])
    assert s.signal_stop(signal.SIGINT) == 0
    s.start()
    obj = s.query_ok(job="sig", metric="a")
    assert obj["points"] == 2, obj
    s.stop()


def test_second_server_on_same_data_dir_fails():
    s1 = Server().start()
    s1.write_ok([{"job": "lk", "rank": 0, "step": 1, "timestamp": T0, "metrics": {"a": 1}}])
    s2 = Server(data_dir=s1.data_dir, name="second")
    rc, text = s2.start_expect_failure()
    assert rc != 0
    assert "lock" in text.lower(), "second server's message does not mention the lock:\n%s" % text[-2000:]
    # the first one is unharmed
    st, obj = s1.get_json("/healthz")
    assert st == 200, (st, obj)
    assert s1.query_ok(job="lk", metric="a")["points"] == 1
    s1.stop()
    # once the first has exited, the lock is free
    s2.start()
    assert s2.query_ok(job="lk", metric="a")["points"] == 1
    s2.stop()


def test_unknown_format_version_refused():
    s = Server()
    os.makedirs(s.data_dir)
    with open(os.path.join(s.data_dir, "FORMAT"), "w") as f:
        f.write("rankdb data directory\nformat 999\n")
    rc, text = s.start_expect_failure()
    assert "format" in text.lower() or "version" in text.lower(), text[-2000:]


def test_format1_directory_is_upgraded():
    """A directory of format 1 (before group and supersede records, and
    before checksums in index values) opens, keeps its data, and says the
    current format (5) from then on, so that an older build refuses it
    instead of misreading the new records."""
    s = Server().start()
    s.write_ok([{"job": "up", "rank": 0, "step": 1, "timestamp": T0, "metrics": {"a": 1.5}}])
    s.stop()
    fmt = os.path.join(s.data_dir, "FORMAT")
    with open(fmt) as f:
        assert f.read() == "rankdb data directory\nformat 5\n"
    with open(fmt, "w") as f:
        f.write("rankdb data directory\nformat 1\n")
    s.start()
    assert s.query_ok(job="up", metric="a")["points"] == 1
    s.stop()
    with open(fmt) as f:
        assert f.read() == "rankdb data directory\nformat 5\n"
    assert not os.path.exists(fmt + ".tmp")
    with open(fmt, "w") as f:
        f.write("rankdb data directory\nformat 6\n")
    rc, text = s.start_expect_failure()
    assert "reads formats 1 to 5" in text, text[-2000:]
