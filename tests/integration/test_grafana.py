"""The Grafana JSON datasource under /grafana (simpod-json-datasource 0.6.x and
the legacy SimpleJSON calls), end to end: every endpoint and response shape of
grafana-json.md, checked against what Grafana's toDataFrame needs."""

import datetime
import json
import math

from harness import T0, Server

SEC = 1_000_000_000
MS = 1_000_000
STEPS = 200
RANKS = 4


def _strict(data, what):
    """Parses a response, refusing NaN/Infinity (invalid JSON for Grafana)."""
    def bad(tok):
        raise AssertionError("%s: response holds %s: %r" % (what, tok, data[:300]))
    return json.loads(data.decode("utf-8"), parse_constant=bad)


def _post(s, path, body):
    raw = body if isinstance(body, str) else json.dumps(body)
    st, _, data = s.post("/grafana" + path, raw)
    return st, _strict(data, path)


def _ok(s, path, body):
    st, obj = _post(s, path, body)
    assert st == 200, "%s %r: %d %r" % (path, body, st, obj)
    return obj


def _err(s, path, body, want=400):
    st, obj = _post(s, path, body)
    assert st == want, "%s %r: %d %r (expected %d)" % (path, body, st, obj, want)
    assert isinstance(obj.get("message"), str) and obj["message"], obj
    return obj["message"]


def _iso(ns):
    d = datetime.datetime.fromtimestamp(ns // MS / 1000, tz=datetime.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (ns // MS % 1000)


def _rng(from_ns, to_ns):
    return {"from": _iso(from_ns), "to": _iso(to_ns), "raw": {"from": "now-6h", "to": "now"}}


def _loss(step, rank):
    return 1.0 / (step + 1) + rank * 0.125


def _step_time(rank):
    return 1.5 if rank == 3 else 1.0


def _records():
    recs = []
    for step in range(STEPS):
        for rank in range(RANKS):
            recs.append({"job": "j1", "rank": rank, "step": step,
                         "timestamp": T0 + step * SEC + rank * 1000,
                         "metrics": {"loss": _loss(step, rank), "train.loss": float(step),
                                     "trainXloss": 7.0, "step_time": _step_time(rank)}})
    for step in range(10):
        v = "NaN" if step == 3 else "Infinity" if step == 4 else float(step)
        for rank in range(2):
            recs.append({"job": "j2", "rank": rank, "step": step, "timestamp": T0 + step * SEC,
                         "metrics": {"loss": v}})
    return recs


LOGS = [
    {"type": "log", "job": "j1", "rank": 1, "level": "warn", "message": "slow rank",
     "timestamp": T0 + 5 * SEC, "step": 5},
    {"type": "log", "job": "j1", "rank": 0, "level": "info", "message": "hello",
     "timestamp": T0 + 6 * SEC},
    {"type": "log", "job": "j1", "rank": 2, "level": "error", "message": "NCCL timeout",
     "timestamp": T0 + 150 * SEC, "step": 150, "fields": {"host": "h2"}},
]


def _server(logs=False):
    s = Server().start()
    s.write_ok(_records())
    if not logs:
        return s, True
    st, obj = s.write(LOGS)
    if st != 200:
        print("SKIP log assertions: log records are not accepted yet (%d %r)" % (st, obj))
        return s, False
    return s, True


def _query(targets, from_ns=T0, to_ns=T0 + STEPS * SEC - MS, mdp=1000, interval_ms=1000,
           **extra):
    body = {"app": "dashboard", "requestId": "SQR1", "timezone": "browser",
            "range": _rng(from_ns, to_ns), "rangeRaw": {"from": "now-6h", "to": "now"},
            "interval": "1s", "intervalMs": interval_ms, "maxDataPoints": mdp,
            "targets": targets, "scopedVars": {}, "startTime": 1, "panelId": 2,
            "dashboardUID": "x", "futureField": {"a": [1]}}
    if interval_ms is None:
        del body["intervalMs"], body["interval"]
    body.update(extra)
    return body


def _check_series(obj, ref_id, max_points, from_ms, to_ms, width_ms=None):
    """Shape rules of grafana-json.md section 6/12 for timeseries elements."""
    assert isinstance(obj, list), obj
    for ser in obj:
        assert set(ser) >= {"target", "datapoints", "tags"}, ser
        assert ser.get("refId") == ref_id, ser
        assert all(isinstance(v, str) for v in ser["tags"].values()), ser["tags"]
        pts = ser["datapoints"]
        assert 0 < len(pts) <= max_points, (ser["target"], len(pts), max_points)
        times = [p[1] for p in pts]
        assert all(isinstance(t, int) for t in times), times[:5]
        assert times == sorted(times) and len(set(times)) == len(times), ser["target"]
        slack = width_ms or 0
        assert times[0] >= from_ms - slack and times[-1] <= to_ms + slack, (times, from_ms)
        for v, _ in pts:
            assert v is None or (isinstance(v, (int, float)) and math.isfinite(v)), v


def _by_target(obj):
    return {x["target"]: x for x in obj}


# ---------------------------------------------------------------------------


def test_health_and_routing():
    s = Server().start()
    for path in ("/grafana", "/grafana/"):
        st, h, body = s.get(path)
        assert st == 200, (path, st, body)
        assert "location" not in h
        json.loads(body)
    st, _, _ = s.request("HEAD", "/grafana")
    assert st == 200
    st, obj = s.get_json("/grafana/nonsense")
    assert st == 404 and obj.get("error"), obj
    st, _, _ = s.request("PUT", "/grafana/query", body="{}")
    assert st == 405
    # /metrics at the root stays the Prometheus page
    st, h, body = s.get("/metrics")
    assert st == 200 and b"rankdb_" in body
    s.stop()


def test_metrics_code_and_builder_mode():
    s, _ = _server()
    obj = _ok(s, "/metrics", {})
    names = [m["value"] for m in obj]
    assert {"loss", "train.loss", "step_time"} <= set(names), names
    for m in obj:
        assert m["label"]
        pl = {p["name"]: p for p in m["payloads"]}
        assert pl["job"]["type"] == "select" and pl["rank"]["type"] == "multi-select", pl
        if m["value"] == "logs":
            continue
        assert {o["value"] for o in pl["job"]["options"]} == {"j1", "j2"}
        aggs = {o["value"] for o in pl["agg"]["options"]}
        assert {"raw", "avg", "min", "max", "last", "p50", "p90", "p99", "crossrank-mean",
                "crossrank-min", "crossrank-max", "crossrank-median"} <= aggs, aggs
    # builder mode: the payload's job narrows the list
    obj = _ok(s, "/metrics", {"metric": "loss", "payload": {"job": "j2"}})
    assert [m["value"] for m in obj if m["value"] != "logs"] == ["loss"], obj
    # payload options
    obj = _ok(s, "/metric-payload-options",
              {"metric": "loss", "payload": {"job": "j1"}, "name": "rank"})
    assert [o["value"] for o in obj] == ["0", "1", "2", "3"] and obj[0]["label"], obj
    obj = _ok(s, "/metric-payload-options", {"metric": "step_time", "payload": {}, "name": "job"})
    assert [o["value"] for o in obj] == ["j1"], obj
    obj = _ok(s, "/metric-payload-options", {"metric": "loss", "payload": {}, "name": "agg"})
    assert "crossrank-median" in [o["value"] for o in obj]
    assert _ok(s, "/metric-payload-options", {"metric": "loss", "name": "nope"}) == []
    s.stop()


def test_query_timeseries_honours_max_data_points():
    s, _ = _server()
    to_ns = T0 + STEPS * SEC - MS
    span_ms = (to_ns - T0) // MS
    # code mode, payload {}: every series of the metric, all jobs
    for mdp, interval in ((20, 1000), (7, 1000), (1000, 1000), (13, None), (50, 30000)):
        body = _query([{"refId": "A", "target": "loss", "payload": {}, "editorMode": "code",
                        "datasource": {"type": "simpod-json-datasource", "uid": "x"}}],
                      mdp=mdp, interval_ms=interval)
        obj = _ok(s, "/query", body)
        assert len(obj) == RANKS + 2, [x["target"] for x in obj]
        bound = max(mdp, span_ms // interval) if interval else mdp
        # the default aggregate is M4: up to 4 points (first, min, max, last) per bucket
        _check_series(obj, "A", 4 * bound, T0 // MS, to_ns // MS, width_ms=span_ms)
    # unaligned range, no intervalMs: never more than maxDataPoints
    obj = _ok(s, "/query", _query([{"refId": "B", "target": "loss", "payload": {"job": "j1"}}],
                                  from_ns=T0 + 333 * MS, mdp=9, interval_ms=None))
    _check_series(obj, "B", 4 * 9, (T0 + 333 * MS) // MS, to_ns // MS, width_ms=span_ms)
    obj = _ok(s, "/query", _query([{"refId": "B", "target": "loss",
                                    "payload": {"job": "j1", "agg": "avg"}}],
                                  from_ns=T0 + 333 * MS, mdp=9, interval_ms=None))
    _check_series(obj, "B", 9, (T0 + 333 * MS) // MS, to_ns // MS, width_ms=span_ms)
    # naming, tags and the per-bucket average
    obj = _ok(s, "/query", _query([{"refId": "A", "target": "loss",
                                    "payload": {"job": "j1", "agg": "avg"}}], mdp=20))
    ser = _by_target(obj)["loss{job=j1,rank=0}"]
    assert ser["tags"] == {"job": "j1", "rank": "0"}, ser
    pts = ser["datapoints"]
    width = pts[1][1] - pts[0][1]
    assert width == 10000, width  # max(intervalMs, ceil(span / maxDataPoints))
    for v, t in pts:
        steps = [st for st in range(STEPS) if t <= (T0 + st * SEC) // MS < t + width]
        want = sum(_loss(st, 0) for st in steps) / len(steps)
        assert abs(v - want) < 1e-12, (t, v, want)
    s.stop()


def test_query_time_range_and_raw():
    s, _ = _server()
    lo, hi = T0 + 50 * SEC, T0 + 100 * SEC - MS
    body = _query([{"refId": "R", "target": "train.loss", "payload": {"job": "j1", "rank": "1",
                                                                      "agg": "raw"}}],
                  from_ns=lo, to_ns=hi)
    obj = _ok(s, "/query", body)
    assert [x["target"] for x in obj] == ["train.loss{job=j1,rank=1,agg=raw}"], obj
    pts = obj[0]["datapoints"]
    assert pts == [[float(st), (T0 + st * SEC + 1000) // MS] for st in range(50, 100)], pts[:3]
    # avg buckets of 1 s over the same range: the same values, one per step
    body["targets"][0]["payload"]["agg"] = "avg"
    obj = _ok(s, "/query", body)
    assert [p[0] for p in obj[0]["datapoints"]] == [float(st) for st in range(50, 100)]
    # a range without data: no series
    obj = _ok(s, "/query", _query([{"refId": "A", "target": "loss"}], from_ns=T0 - 100 * SEC,
                                  to_ns=T0 - SEC))
    assert obj == [], obj
    # the same range written as ISO with an offset, without ms, and as ms numbers
    for rng in ({"from": "2023-11-14T23:13:20+01:00", "to": "2023-11-14T22:14:59Z"},
                {"from": T0 // MS, "to": str((T0 + 99 * SEC) // MS)}):
        body2 = dict(body, range=rng)
        assert _ok(s, "/query", body2) == _ok(s, "/query", dict(body, range=_rng(
            T0, T0 + 99 * SEC))), rng
    s.stop()


def test_query_regex_and_multi_value_targets():
    s, _ = _server()

    def targets(target, payload=None):
        obj = _ok(s, "/query", _query([{"refId": "A", "target": target,
                                        "payload": payload or {"job": "j1", "rank": "0"}}]))
        return sorted(x["target"] for x in obj)

    # exact name first: "train.loss" is a metric, so its regex reading is not used
    assert targets("train.loss") == ["train.loss{job=j1,rank=0}"]
    # Grafana's regex-escaped variable value
    assert targets("train\\.loss") == ["train.loss{job=j1,rank=0}"]
    # an anchored regex
    assert targets("train.loss|step_.*") == ["step_time{job=j1,rank=0}",
                                             "train.loss{job=j1,rank=0}",
                                             "trainXloss{job=j1,rank=0}"]
    # multi-value (a|b) in the target, and in payload values
    assert targets("(loss|step_time)") == ["loss{job=j1,rank=0}", "step_time{job=j1,rank=0}"]
    assert targets("loss", {"job": "(j1|j2)", "rank": "(0|1)"}) == [
        "loss{job=j1,rank=0}", "loss{job=j1,rank=1}", "loss{job=j2,rank=0}",
        "loss{job=j2,rank=1}"]
    assert targets("loss", {"job": "j1", "rank": ["1", "3"]}) == [
        "loss{job=j1,rank=1}", "loss{job=j1,rank=3}"]
    assert targets("loss", {"job": "j1", "rank": "2,3"}) == [
        "loss{job=j1,rank=2}", "loss{job=j1,rank=3}"]
    assert targets("loss", {"job": "{j2}", "rank": 1}) == ["loss{job=j2,rank=1}"]
    s.stop()


def test_query_filters_and_legacy_adhoc_filters():
    s, _ = _server()

    def targets(**extra):
        obj = _ok(s, "/query", _query([{"refId": "A", "target": "loss", "payload": {}}], **extra))
        return sorted(x["target"] for x in obj)

    assert targets(filters=[{"key": "job", "operator": "=", "value": "j1"},
                            {"key": "rank", "operator": "!=", "value": "0"}]) == [
        "loss{job=j1,rank=1}", "loss{job=j1,rank=2}", "loss{job=j1,rank=3}"]
    assert targets(adhocFilters=[{"key": "job", "operator": "=~", "value": "j[2-9]"}]) == [
        "loss{job=j2,rank=0}", "loss{job=j2,rank=1}"]
    assert targets(filters=[{"key": "job", "operator": "!~", "value": "j2"},
                            {"key": "rank", "operator": "<", "value": "2"}]) == [
        "loss{job=j1,rank=0}", "loss{job=j1,rank=1}"]
    assert targets(filters=[{"key": "metric", "operator": "=", "value": "nope"}]) == []
    msg = _err(s, "/query", _query([{"refId": "A", "target": "loss"}],
                                   filters=[{"key": "rank", "operator": "~~", "value": "1"}]))
    assert "~~" in msg, msg
    msg = _err(s, "/query", _query([{"refId": "A", "target": "loss"}],
                                   filters=[{"key": "rank", "operator": "=~", "value": "(1"}]))
    assert "regex" in msg, msg
    s.stop()


def test_query_table_format_and_simplejson_bodies():
    s, _ = _server()
    body = _query([{"refId": "T", "target": "train.loss", "type": "table",
                    "payload": {"job": "j1", "rank": "0"}}], from_ns=T0, to_ns=T0 + 3 * SEC - MS)
    obj = _ok(s, "/query", body)
    assert len(obj) == 1 and obj[0]["type"] == "table" and obj[0]["refId"] == "T", obj
    cols = [(c["text"], c["type"]) for c in obj[0]["columns"]]
    assert cols[0] == ("time", "time") and ("value", "number") in cols, cols
    assert obj[0]["rows"] == [[(T0 + st * SEC) // MS, "j1", "0", "train.loss", "m4", float(st)]
                              for st in range(3)], obj[0]["rows"]
    # SimpleJSON: type timeserie, no editorMode, no payload, adhocFilters
    body = {"range": _rng(T0, T0 + 3 * SEC - MS), "intervalMs": 1000, "maxDataPoints": 100,
            "format": "json", "targets": [{"target": "train.loss", "refId": "A",
                                           "type": "timeserie", "hide": False},
                                          {"target": "loss", "refId": "B", "hide": True}],
            "adhocFilters": [{"key": "rank", "operator": "=", "value": "2"}]}
    obj = _ok(s, "/query", body)
    assert [x["target"] for x in obj] == ["train.loss{job=j1,rank=2}"], obj
    assert obj[0]["datapoints"] == [[float(st), (T0 + st * SEC + 2000) // MS // 1000 * 1000]
                                    for st in range(3)], obj
    s.stop()


def test_query_nan_and_inf_become_null():
    s, _ = _server()
    for agg in ("avg", "raw", "last", "max"):
        obj = _ok(s, "/query", _query([{"refId": "A", "target": "loss",
                                        "payload": {"job": "j2", "rank": "0", "agg": agg}}],
                                      to_ns=T0 + 10 * SEC - MS))
        vals = [p[0] for p in obj[0]["datapoints"]]
        assert vals[3] is None and vals[4] is None, (agg, vals)
        assert vals[5] == 5.0, (agg, vals)
    s.stop()


def test_query_crossrank_series():
    s, _ = _server()
    obj = _ok(s, "/query", _query([{"refId": "X", "target": "step_time",
                                    "payload": {"job": "j1", "agg": "crossrank-mean"}}], mdp=10))
    assert [x["target"] for x in obj] == ["step_time{job=j1,agg=mean}"], obj
    assert obj[0]["tags"] == {"job": "j1", "agg": "mean"} and obj[0]["refId"] == "X"
    assert all(v == 1.125 for v, _ in obj[0]["datapoints"]), obj[0]["datapoints"]
    obj = _ok(s, "/query", _query([{"refId": "X", "target": "step_time",
                                    "payload": {"job": "j1",
                                                "agg": ["avg", "crossrank-max",
                                                        "crossrank-median"]}}], mdp=10))
    got = _by_target(obj)
    assert len(got) == RANKS + 2, list(got)
    assert all(v == 1.5 for v, _ in got["step_time{job=j1,agg=max}"]["datapoints"])
    assert all(v == 1.0 for v, _ in got["step_time{job=j1,agg=median}"]["datapoints"])
    assert "step_time{job=j1,rank=3}" in got
    _check_series(obj, "X", 10, T0 // MS, (T0 + STEPS * SEC) // MS, width_ms=20000)
    s.stop()


def test_annotations_and_logs():
    s, ok = _server(logs=True)
    if not ok:
        s.stop()
        return
    anno = {"refId": "Anno", "target": "", "payload": {"job": "j1"}}
    obj = _ok(s, "/query", _query([anno], scopedVars={"__annotation": {"text": "x", "value": {}}}))
    assert len(obj) == 1 and obj[0]["refId"] == "Anno", obj
    cols = {c["text"]: (i, c["type"]) for i, c in enumerate(obj[0]["columns"])}
    assert cols["time"][1] == "time" and cols["text"][1] == "string", cols
    assert {"timeEnd", "title", "tags"} <= set(cols)
    rows = obj[0]["rows"]
    texts = [r[cols["text"][0]] for r in rows]
    assert texts == ["NCCL timeout", "slow rank"], texts  # warn and above, newest first
    assert rows[1][cols["time"][0]] == (T0 + 5 * SEC) // MS
    # level and filters; a target named "annotations" works like refId Anno
    anno2 = {"refId": "B", "target": "annotations", "payload": {"job": "j1", "level": "error"}}
    obj = _ok(s, "/query", _query([anno2]))
    assert [r[cols["text"][0]] for r in obj[0]["rows"]] == ["NCCL timeout"], obj
    # logs panel frame
    obj = _ok(s, "/query", _query([{"refId": "L", "target": "logs", "payload": {"job": "j1"}}]))
    fr = obj[0]
    assert fr["meta"]["preferredVisualisationType"] == "logs" and fr["refId"] == "L", fr
    fields = {f["name"]: f for f in fr["fields"]}
    assert fields["time"]["type"] == "time" and fr["fields"][1]["type"] == "string"
    assert fr["fields"][1]["values"] == ["NCCL timeout", "hello", "slow rank"], fr
    obj = _ok(s, "/query", _query([{"refId": "L", "target": "logs", "payload": {}}],
                                  filters=[{"key": "host", "operator": "=", "value": "h2"}]))
    assert obj[0]["fields"][1]["values"] == ["NCCL timeout"], obj
    # legacy /annotations
    obj = _ok(s, "/annotations", {"range": _rng(T0, T0 + STEPS * SEC),
                                  "annotation": {"name": "a", "enable": True, "query": "j1"}})
    assert [a["text"] for a in obj] == ["NCCL timeout", "slow rank"], obj
    assert all(isinstance(a["time"], int) and a["title"] and a["tags"] for a in obj)
    s.stop()


def test_variable_and_tag_endpoints():
    s, _ = _server()

    def var(payload):
        obj = _ok(s, "/variable", {"payload": payload, "range": _rng(T0, T0 + SEC)})
        assert all(set(x) == {"__text", "__value"} for x in obj), obj
        return [(x["__text"], x["__value"]) for x in obj]

    assert var({"target": ""}) == [("j1", "j1"), ("j2", "j2")]
    assert var({"target": "jobs"}) == [("j1", "j1"), ("j2", "j2")]
    assert var({"target": "ranks(j2)"}) == [("rank 0", "0"), ("rank 1", "1")]
    assert var({"target": "ranks", "job": "j2"}) == [("rank 0", "0"), ("rank 1", "1")]
    assert [v for _, v in var({"target": "metrics(j1)"})] == ["loss", "step_time", "train.loss",
                                                              "trainXloss"]
    assert [v for _, v in var({"target": "metrics", "job": "j2"})] == ["loss"]
    assert "ranks" in _err(s, "/variable", {"payload": {"target": "ranks"}})
    assert "unknown" in _err(s, "/variable", {"payload": {"target": "bogus"}})
    want = [{"type": "string", "text": k} for k in ("job", "rank", "metric", "level")]
    for body in ("", "{}", json.dumps({"filters": [], "timeRange": {"from": "x"}})):
        st, _, data = s.post("/grafana/tag-keys", body)
        assert st == 200 and json.loads(data) == want, data
    assert _ok(s, "/tag-values", {"key": "job"}) == [{"text": "j1"}, {"text": "j2"}]
    assert _ok(s, "/tag-values", {"key": "rank", "filters": [
        {"key": "job", "operator": "=", "value": "j2"}]}) == [{"text": "0"}, {"text": "1"}]
    assert {"text": "train.loss"} in _ok(s, "/tag-values", {"key": "metric"})
    assert _ok(s, "/tag-values", {"key": "level"})[0] == {"text": "debug"}
    assert _ok(s, "/tag-values", {"key": "nope"}) == []
    s.stop()


def test_legacy_search():
    s, _ = _server()
    assert _ok(s, "/search", {"target": ""}) == ["loss", "step_time", "train.loss", "trainXloss"]
    assert _ok(s, "/search", {"target": "loss"}) == ["loss", "train.loss", "trainXloss"]
    assert _ok(s, "/search", {"target": "jobs"}) == ["j1", "j2"]
    assert _ok(s, "/search", {"target": "metrics"}) == ["loss", "step_time", "train.loss",
                                                     "trainXloss"]
    assert _ok(s, "/search", {"target": "ranks(j2)"}) == ["0", "1"]
    assert _ok(s, "/search", {}) == ["loss", "step_time", "train.loss", "trainXloss"]
    s.stop()


def test_client_mistakes_get_4xx_with_message():
    s, _ = _server()
    assert "JSON" in _err(s, "/query", "{not json")
    assert "JSON" in _err(s, "/metrics", "[1,")
    _err(s, "/query", "[]")
    _err(s, "/query", {"targets": [{"refId": "A", "target": "loss"}]})  # no range
    _err(s, "/query", _query([{"refId": "A", "target": "loss"}], range={"from": "yesterday",
                                                                       "to": "now"}))
    assert "crossrank-mean" in _err(s, "/query", _query([{"refId": "A", "target": "loss",
                                                          "payload": {"agg": "mode"}}]))
    # an unknown target: 200 [] or 4xx with a message, never 5xx
    st, obj = _post(s, "/query", _query([{"refId": "A", "target": "no_such_metric"}]))
    assert (st == 200 and obj == []) or (400 <= st < 500 and obj["message"]), (st, obj)
    # payload of any JSON type is tolerated; unknown fields are ignored
    for payload in ("text", [1, 2], None, 3, {"unknown": {"x": 1}}):
        obj = _ok(s, "/query", _query([{"refId": "A", "target": "loss", "payload": payload,
                                        "newField": True}]))
        assert len(obj) == RANKS + 2, (payload, len(obj))
    # a JSON object sent as a string is read as the payload
    obj = _ok(s, "/query", _query([{"refId": "A", "target": "loss",
                                    "payload": "{\"job\":\"j2\"}"}]))
    assert len(obj) == 2, obj
    # empty targets: an empty answer
    assert _ok(s, "/query", _query([])) == []
    s.stop()


def test_series_count_is_bounded():
    s = Server().start()
    n = 1100
    s.write_ok([{"job": "wide", "rank": r, "step": 1, "timestamp": T0 + r,
                 "metrics": {"loss": float(r)}} for r in range(n)])
    msg = _err(s, "/query", _query([{"refId": "A", "target": "loss", "payload": {}}]))
    assert "rank" in msg and "crossrank" in msg, msg
    obj = _ok(s, "/query", _query([{"refId": "A", "target": "loss",
                                    "payload": {"agg": "crossrank-mean"}}]))
    assert len(obj) == 1 and obj[0]["datapoints"][0][0] == (n - 1) / 2, obj
    obj = _ok(s, "/query", _query([{"refId": "A", "target": "loss", "payload": {}}],
                                  filters=[{"key": "rank", "operator": "<", "value": "10"}]))
    assert len(obj) == 10
    s.stop()
