"""What a new user trips over (issue 15): timestamp units on JSON writes,
RFC 3339 and relative query times, InfluxDB compatibility (/ping, /query,
the real Python client), Grafana M4 spikes, rollups through every
downsample path, spans-only straggler reports, metric aliases, the job
listing, and the consistency fixes."""

import json
import time
import urllib.parse

from harness import T0, Server

SEC = 1_000_000_000


def _get(s, path, **params):
    items = [(k, str(v)) for k, v in params.items() if v is not None]
    return s.get_json(path + "?" + urllib.parse.urlencode(items))


def _iso(ts_ns):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts_ns // SEC)) + \
        ".%03dZ" % (ts_ns % SEC // 1000000)


def test_json_write_seconds_is_refused_with_unit_and_precision_works():
    s = Server().start()
    secs = T0 // SEC
    for val, unit in ((secs, "s"), (secs * 1000, "ms"), (secs * 1000000, "us")):
        st, body = s.write([{"job": "u", "rank": 0, "step": 1, "timestamp": val,
                             "metrics": {"loss": 1.0}}])
        assert st == 400, (st, body)
        assert "looks like %s" % unit in body["error"], body
    st, body = s.write([{"job": "u", "rank": 0, "step": 1, "timestamp": 5,
                         "metrics": {"loss": 1.0}}])
    assert st == 400 and "2001" in body["error"], body
    # the same seconds with ?precision=s are stored at the right time
    for prec, val in (("s", secs), ("ms", secs * 1000), ("us", secs * 1000000), ("ns", T0)):
        st, _, data = s.post("/api/v1/write?precision=" + prec, json.dumps(
            [{"job": "u" + prec, "rank": 0, "step": 1, "timestamp": val,
              "metrics": {"loss": 2.0}}]))
        assert st == 200, (prec, st, data)
        st, r = _get(s, "/api/v1/query/range", job="u" + prec, metric="loss")
        assert st == 200, r
        got = [t for sr in r["series"] for t in sr["timestamps"]]
        assert got == [T0], (prec, r)
    st, _, data = s.post("/api/v1/write?precision=h", "[]")
    assert st == 400 and b"precision" in data, data
    s.stop()


def test_query_times_rfc3339_and_relative():
    s = Server().start()
    now = time.time_ns()
    recs = [{"job": "t", "rank": 0, "step": i, "timestamp": now - (100 - i) * 60 * SEC,
             "metrics": {"loss": float(i)}} for i in range(100)]
    s.write_ok(recs)
    # the last 30 minutes: steps 70..99 (+ maybe one at the edge of the clock)
    st, r = _get(s, "/api/v1/query/range", job="t", metric="loss", **{"from": "now-30m",
                                                                      "to": "now"})
    assert st == 200, r
    steps = [st for sr in r["series"] for st in sr["steps"]]
    assert 29 <= len(steps) <= 30 and steps[-1] == 99, steps
    frm, to = recs[10]["timestamp"], recs[19]["timestamp"]
    st, r = _get(s, "/api/v1/query/range", job="t", metric="loss",
                 **{"from": _iso(frm - frm % 1000000), "to": _iso(to + 1000000)})
    assert st == 200, r
    steps = [st for sr in r["series"] for st in sr["steps"]]
    assert steps == list(range(10, 20)), steps
    st, r = _get(s, "/api/v1/query/downsample", job="t", metric="loss", points=10,
                 **{"from": "now-30m", "to": "now"})
    assert st == 200, r
    cnt = sum(c for sr in r["series"] for c in sr["count"])
    assert 29 <= cnt <= 30, r
    st, r = _get(s, "/api/v1/query/range", job="t", metric="loss", **{"from": "yesterday"})
    assert st == 400 and "RFC 3339" in r["error"], r
    st, _, _ = s.post("/api/v1/write", json.dumps(
        [{"type": "log", "job": "t", "rank": 0, "step": 5, "timestamp": now - 7200 * SEC,
          "message": "old"},
         {"type": "log", "job": "t", "rank": 0, "step": 6, "timestamp": now - 10 * SEC,
          "message": "new"}]))
    assert st == 200
    st, r = _get(s, "/api/v1/logs", job="t", **{"from": "now-1h"})
    assert st == 200, r
    msgs = [e["message"] for e in r["logs"] if not e["fields"].get("rankdb")]
    assert msgs == ["new"], r
    s.stop()


INFLUX_CLIENT = r'''
import json, sys
from influxdb import InfluxDBClient
port, t0 = int(sys.argv[1]), int(sys.argv[2])
c = InfluxDBClient(host="127.0.0.1", port=port, database="pyjob")
out = {"ping": c.ping()}
c.create_database("pyjob")
pts = [{"measurement": "train", "tags": {"job": "pyjob", "rank": str(r)},
        "time": t0 + i * 10**9, "fields": {"loss": float(i + r), "step": i}}
       for i in range(60) for r in range(2)]
out["write"] = c.write_points(pts, time_precision="n")
out["dbs"] = [d["name"] for d in c.get_list_database()]
out["meas"] = [m["name"] for m in c.get_list_measurements()]
rs = c.query("SELECT mean(loss) FROM train WHERE time >= %d AND time < %d GROUP BY time(10s)"
             % (t0, t0 + 60 * 10**9), epoch="ns")
out["points"] = list(rs.get_points())
try:
    c.query("DROP MEASUREMENT train")
    out["drop"] = "no error"
except Exception as e:
    out["drop"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(out))
'''


def test_influxdb_python_client():
    import subprocess
    s = Server().start()
    st, h, body = s.request("GET", "/ping")
    assert st == 204 and h.get("x-influxdb-version"), (st, h)
    st, h, body = s.request("HEAD", "/ping")
    assert st == 204 and h.get("x-influxdb-build"), (st, h)
    t0 = T0 - T0 % (10 * SEC)
    p = subprocess.run(["/usr/bin/python3", "-c", INFLUX_CLIENT, str(s.port), str(t0)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["ping"], out
    assert out["write"] is True, out
    assert "pyjob" in out["dbs"], out
    assert out["meas"] == ["train"], out
    got = [(pt["time"], pt["mean"]) for pt in out["points"]]
    # bucket k holds steps 10k..10k+9 of ranks 0 and 1: mean = 10k + 4.5 + 0.5
    assert got == [(t0 + k * 10 * SEC, 10 * k + 5.0) for k in range(6)], got
    assert "not supported" in out["drop"], out
    # Telegraf: CREATE DATABASE as a form body; errors in InfluxDB's shape
    st, _, body = s.post("/query", "q=CREATE+DATABASE+%22telegraf%22",
                         content_type="application/x-www-form-urlencoded")
    assert st == 200 and json.loads(body) == {"results": [{"statement_id": 0}]}, body
    st, r = _get(s, "/query", q="SHOW DATABASES; SELECT * FROM train", db="pyjob")
    assert st == 200 and len(r["results"]) == 2, r
    assert r["results"][1]["statement_id"] == 1 and "error" in r["results"][1], r
    st, r = _get(s, "/query", db="pyjob")
    assert st == 400 and "q" in r["error"], r
    s.stop()


def _grafana(s, target, payload, from_ns, to_ns, mdp):
    body = {"range": {"from": _iso(from_ns), "to": _iso(to_ns)}, "maxDataPoints": mdp,
            "intervalMs": 1, "targets": [{"refId": "A", "target": target, "payload": payload}]}
    st, _, data = s.post("/grafana/query", json.dumps(body))
    assert st == 200, data
    return json.loads(data)


def test_grafana_default_m4_keeps_a_spike():
    s = Server().start()
    n = 10000
    recs = [{"job": "sp", "rank": 0, "step": i, "timestamp": T0 + i * 10_000_000,
             "metrics": {"loss": 1000.0 if i == 6543 else 2.0 + (i % 7) * 0.01}}
            for i in range(n)]
    for i in range(0, n, 2000):
        s.write_ok(recs[i:i + 2000])
    to_ns = T0 + n * 10_000_000
    obj = _grafana(s, "loss", {"job": "sp"}, T0, to_ns, 500)
    assert len(obj) == 1, obj
    pts = obj[0]["datapoints"]
    vals = [v for v, _ in pts]
    assert 1000.0 in vals, max(vals)
    assert len(pts) <= 4 * 500, len(pts)
    # the spike at its own time, the series' first and last points kept
    assert [1000.0, (T0 + 6543 * 10_000_000) // 1_000_000] in pts
    assert pts[0][1] == T0 // 1_000_000 and pts[-1][1] == (T0 + (n - 1) * 10_000_000) // 1_000_000
    # an explicit aggregate is still available: avg hides the spike
    obj = _grafana(s, "loss", {"job": "sp", "agg": "avg"}, T0, to_ns, 500)
    assert max(v for v, _ in obj[0]["datapoints"]) < 100, obj[0]["datapoints"][:3]
    s.stop()


ADMIN_TOKEN = "tok-newuser"


def test_points_and_grafana_read_rollups_where_raw_is_gone():
    s = Server(["--admin-token", ADMIN_TOKEN, "--chunk-max-points", "100"]).start()
    hdr = {"Authorization": "Bearer " + ADMIN_TOKEN}
    now = time.time_ns()
    t0 = (now - 6 * 3600 * SEC) // (600 * SEC) * (600 * SEC)
    n = 1200  # one point per 10 s over 3 h 20 min, all older than the 2 h retention
    recs = [{"job": "ro", "rank": 0, "step": i, "timestamp": t0 + i * 10 * SEC,
             "metrics": {"loss": 5.0 if i == 777 else 1.0}} for i in range(n)]
    s.write_ok(recs)
    assert s.request("PUT", "/api/v1/admin/retention/ro?seconds=7200", headers=hdr)[0] == 200
    st, _, body = s.request("POST", "/api/v1/admin/retention/run", headers=hdr)
    assert st == 200 and json.loads(body)["points"] == n, body
    # points=: the whole series (no from/to) and an explicit range
    for extra in ({}, {"from": t0, "to": now}):
        st, r = _get(s, "/api/v1/query/downsample", job="ro", metric="loss", points=50,
                     agg="count,max", **extra)
        assert st == 200 and r["series"], (extra, r)
        assert sum(r["series"][0]["count"]) == n and max(r["series"][0]["max"]) == 5.0, r
        assert r["from_rollups"] > 0, r
    # quantiles over rollups: the error names the parameters that ask for them
    st, r = _get(s, "/api/v1/query/downsample", job="ro", metric="loss", points=50, agg="p50")
    assert st == 422 and "agg=p50" in r["error"] and "q=" not in r["error"].replace(
        "quantiles=", ""), r
    # Grafana (default M4 and avg)
    for payload in ({"job": "ro"}, {"job": "ro", "agg": "max"}):
        obj = _grafana(s, "loss", payload, t0 - 60 * SEC, now, 100)
        assert len(obj) == 1, (payload, obj)
        vals = [v for v, _ in obj[0]["datapoints"]]
        assert 5.0 in vals and len(vals) <= 400, (payload, vals)
    s.stop()


def test_straggler_report_from_spans_and_aliases_in_queries():
    s = Server().start()
    spans = []
    for step in range(20):
        for rank in range(8):
            t = T0 + step * SEC
            fwd = 0.3 + (0.2 if rank == 5 else 0.0) + rank * 0.001
            for name, start, dur in (("dataloader", 0.0, 0.02), ("forward", 0.02, fwd),
                                     ("backward", 0.02 + fwd, 0.6),
                                     ("collective", 0.62 + fwd, 0.9 - fwd)):
                spans.append({"type": "span", "job": "sj", "rank": rank, "step": step,
                              "name": name, "start": t + int(start * SEC),
                              "duration_ns": int(dur * SEC)})
    st, _, data = s.post("/api/v1/write", json.dumps(spans))
    assert st == 200, data
    st, r = _get(s, "/api/v1/query/outliers", job="sj", metric="step_time", mode="phases",
                 last_steps=10, limit=1)
    assert st == 200, r
    assert r["phase_source"] == "spans", r
    assert sorted(r["wait_phases"]) == ["collective", "dataloader"], r
    assert r["window"] == {"step_from": 10, "step_to": 19}, r
    assert r["outliers"][0]["rank"] == 5, r
    assert abs(r["outliers"][0]["phases"]["forward"] - 0.505) < 1e-6, r
    # metric aliases: line protocol's train.loss answers metric=loss, and the other way
    st, _, data = s.post("/write", "train,job=lp,rank=0 loss=2.5,step=1i %d\n" % T0,
                         content_type="text/plain")
    assert st == 204, data
    s.write_ok([{"job": "js", "rank": 0, "step": 1, "timestamp": T0, "metrics": {"loss": 1.5}}])
    for job, asked, stored, val in (("lp", "loss", "train.loss", 2.5),
                                    ("js", "train.loss", "loss", 1.5)):
        st, r = _get(s, "/api/v1/query/range", job=job, metric=asked)
        assert st == 200 and r["series"][0]["metric"] == stored, r
        assert r["series"][0]["values"] == [val], r
        st, r = _get(s, "/api/v1/query/downsample", job=job, metric=asked, step_width=10)
        assert st == 200 and r["series"][0]["metric"] == stored, r
    s.stop()


def test_range_attempts_and_unknown_metric_match_the_aggregates():
    s = Server().start()
    recs = [{"job": "ra", "rank": 0, "step": st, "attempt": att,
             "timestamp": T0 + (att * 100 + st) * SEC, "metrics": {"loss": float(att * 10 + st)}}
            for att, steps in ((0, range(0, 6)), (1, range(4, 8))) for st in steps]
    s.write_ok(recs)
    st, r = _get(s, "/api/v1/query/range", job="ra", metric="loss")
    assert st == 200, r
    ser = r["series"][0]
    # latest attempt per step by default, as the aggregates: steps 0-3 of attempt 0, 4-7 of 1
    assert list(zip(ser["steps"], ser["attempts"])) == \
        [(0, 0), (1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (6, 1), (7, 1)], ser
    st, d = _get(s, "/api/v1/query/downsample", job="ra", metric="loss", step_width=100,
                 agg="count")
    assert st == 200 and d["series"][0]["count"] == [len(ser["steps"])], d
    st, r = _get(s, "/api/v1/query/range", job="ra", metric="loss", attempt="all")
    assert st == 200 and len(r["series"][0]["steps"]) == 10, r
    st, r = _get(s, "/api/v1/query/range", job="ra", metric="loss", attempt=0)
    assert st == 200 and r["series"][0]["attempts"] == [0] * 6, r
    # an unknown metric is a 404 on range as on downsample
    st, r = _get(s, "/api/v1/query/range", job="ra", metric="nope")
    assert st == 404 and "nope" in r["error"], r
    st, r = _get(s, "/api/v1/query/downsample", job="ra", metric="nope", step_width=10)
    assert st == 404, r
    s.stop()


def test_job_listing_tells_about_the_run():
    from harness import wait_until
    s = Server().start()
    now = time.time_ns()
    # 80 steps: LossDivergence judges from 8 blocks of 8 points on (each step
    # counts once, however often the detector is fed it)
    recs = [{"job": "lj", "rank": r, "step": i, "timestamp": now - (80 - i) * SEC + r,
             "metrics": {"loss": 1.0 + i * i * 0.5}} for i in range(80) for r in range(3)]
    s.write_ok(recs)
    s.write_ok([{"job": "lj", "rank": "job", "step": 80, "timestamp": now,
                 "metrics": {"tokens_per_sec": 5.0}}])
    st, r = s.get_json("/api/v1/jobs")
    assert st == 200, r
    e = [j for j in r["jobs"] if j["job"] == "lj"][0]
    assert e["first_ts"] == now - 80 * SEC and e["last_ts"] == now, e
    assert e["last_step"] == 80 and e["ranks"] == 3, e
    # detection: the job's state and its firing alerts (loss diverging)
    def firing():
        e2 = [j for j in s.get_json("/api/v1/jobs")[1]["jobs"] if j["job"] == "lj"][0]
        return e2 if e2.get("firing_alerts") else None
    e2 = wait_until(firing, what="a firing alert in the job listing")
    assert e2["state"] in ("ok", "degraded", "hung", "down", "finished", "failed"), e2
    a = e2["firing_alerts"][0]
    assert a["state"] == "firing" and a["job"] == "lj" and a["alertname"], a
    s.stop()


def _rejected_too_large(s):
    st, _, body = s.get("/metrics")
    for line in body.decode().splitlines():
        if line.startswith('rankdb_write_rejected_total{reason="too_large"}'):
            return int(line.split()[-1])
    raise AssertionError("no too_large counter")


def test_413s_are_counted_and_subnormals_print_short():
    s = Server(["--max-body-bytes", "65536"]).start()
    before = _rejected_too_large(s)
    big = "[" + ",".join('{"job":"b","rank":0,"step":%d,"metrics":{"x":1}}' % i
                         for i in range(3000)) + "]"
    st, _, _ = s.post("/api/v1/write", big)
    assert st == 413
    st, _, _ = s.post("/write", ("m,job=b x=1 %d\n" % T0) * 4000, content_type="text/plain")
    assert st == 413
    assert _rejected_too_large(s) == before + 2
    # 1e-310 (subnormal) prints as the shortest text that reads back
    st, _, data = s.post("/api/v1/write", '[{"job":"v","rank":0,"step":1,"timestamp":%d,'
                         '"metrics":{"x":1e-310,"y":5e-324,"z":2.2250738585072014e-308}}]' % T0)
    assert st == 200, data
    st, _, body = s.get("/api/v1/query/range?job=v&metric=x,y,z")
    text = body.decode()
    assert '"values":[1e-310]' in text and '"values":[5e-324]' in text, text
    assert '"values":[2.2250738585072014e-308]' in text, text
    s.stop()


def test_shutdown_with_fewer_connections_than_threads():
    """http_max_connections below http_threads: SIGTERM still stops the
    server (libmicrohttpd splits its connection limit across the thread
    pool; a worker left with none never woke for the stop), and a
    connection past the limit is answered, not left hanging."""
    import socket
    for conns, threads in ((2, 8), (4, 8), (1, 4), (2, 200)):
        s = Server(name="conns%d" % conns, flags=["--http-max-connections", str(conns),
                                                   "--http-threads", str(threads)]).start()
        held = []
        for _ in range(conns):
            k = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            held.append(k)
        st, _, body = s.get("/healthz", timeout=20)  # past the limit: an answer, never a hang
        assert st in (200, 503), (st, body)
        for k in held:
            k.close()
        s.stop(timeout=30)  # SIGTERM and exit 0 within the bound
