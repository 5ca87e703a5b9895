"""Log and span queries end to end: write logs and spans as JSON records,
then /api/v1/logs (filters, pagination), /api/v1/logs/around,
/api/v1/spans, errors, and a restart that keeps them."""

import json
import time
import urllib.parse

from harness import T0, Server, assert_error

LEVELS = ["debug", "info", "warn", "error", "fatal"]


def _logs(job, n):
    recs = []
    for i in range(n):
        rec = {"type": "log", "job": job, "rank": i % 4, "timestamp": T0 + (i // 5) * 1000,
               "attempt": 0, "level": LEVELS[i % 5],
               "message": "msg %d%s" % (i, " NCCL watchdog timeout" if i % 7 == 0 else ""),
               "fields": {"host": "h%d" % (i % 2), "i": i}}
        if i % 11:
            rec["step"] = i // 10
        recs.append(rec)
    return recs


def _spans(job, steps, ranks):
    recs = []
    for step in steps:
        for rank in ranks:
            t = T0 + step * 10**9 + rank * 1000
            for k, (name, dur) in enumerate([("data_wait", 10), ("forward", 100),
                                             ("backward", 200 + rank), ("optimizer", 30)]):
                recs.append({"type": "span", "job": job, "rank": rank, "step": step,
                             "name": name, "start": t + k * 1000, "duration_ns": dur,
                             "attempt": 0})
    return recs


def _write(s, recs):
    """Writes event records; retries while the log/span parser is not live."""
    deadline = time.monotonic() + 30
    while True:
        st, obj = s.write(recs)
        if st == 200 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert st == 200, (st, obj)
    assert obj["records"] == len(recs), obj


def _get(s, path, **params):
    items = []
    for k, v in params.items():
        for x in (v if isinstance(v, list) else [v]):
            items.append((k, str(x)))
    return s.get_json(path + "?" + urllib.parse.urlencode(items))


def _ok(s, path, **params):
    st, obj = _get(s, path, **params)
    assert st == 200, (path, params, st, obj)
    return obj


def _key(log):
    return (log["message"], json.dumps(log["fields"], sort_keys=True))


def _want(recs, pred):
    return sorted(_key({"message": r["message"], "fields": r["fields"]})
                  for r in recs if r["type"] == "log" and pred(r))


def _check_order(logs):
    for a, b in zip(logs, logs[1:]):
        assert (a["ts"], -_rank(a["rank"])) >= (b["ts"], -_rank(b["rank"])), (a, b)


def _rank(r):
    return 2**32 if r == "job" else r


def test_logs_filters():
    s = Server().start()
    recs = _logs("lj", 200)
    _write(s, recs)
    everything = _ok(s, "/api/v1/logs", job="lj", limit=10000)
    assert everything["job"] == "lj" and everything["next_cursor"] is None
    assert sorted(_key(x) for x in everything["logs"]) == _want(recs, lambda r: True)
    _check_order(everything["logs"])
    first = everything["logs"][0]
    assert set(first) == {"ts", "rank", "level", "step", "attempt", "message", "fields"}, first
    assert any(x["step"] is None for x in everything["logs"])

    cases = [
        ({"rank": "1,3"}, lambda r: r["rank"] in (1, 3)),
        ({"level": "warn"}, lambda r: LEVELS.index(r["level"]) >= 2),
        ({"level": "ERROR"}, lambda r: LEVELS.index(r["level"]) >= 3),
        ({"from": T0 + 5000, "to": T0 + 20000}, lambda r: T0 + 5000 <= r["timestamp"] <= T0 + 20000),
        ({"step_from": 3, "step_to": 6}, lambda r: "step" in r and 3 <= r["step"] <= 6),
        ({"q": "nccl TIMEOUT"}, lambda r: "NCCL" in r["message"]),
        ({"q": "watchdog"}, lambda r: "NCCL" in r["message"]),
        ({"q": "watch"}, lambda r: False),  # whole words only
        ({"field.host": "h1"}, lambda r: r["fields"]["host"] == "h1"),
        ({"field.host": "h1", "field.i": "21"}, lambda r: r["fields"]["i"] == 21),
        ({"attempt": 1}, lambda r: False),
    ]
    for params, pred in cases:
        got = _ok(s, "/api/v1/logs", job="lj", limit=10000, **params)
        assert sorted(_key(x) for x in got["logs"]) == _want(recs, pred), params
        _check_order(got["logs"])
    s.stop()


def test_logs_pagination():
    s = Server().start()
    recs = _logs("pj", 157)
    # three identical records at one timestamp must all come back, once each
    recs += [{"type": "log", "job": "pj", "rank": 2, "timestamp": T0 + 3000, "level": "info",
              "message": "same"} for _ in range(3)]
    _write(s, recs[:80])
    _write(s, recs[80:])
    big = _ok(s, "/api/v1/logs", job="pj", limit=10000)["logs"]
    assert len(big) == len(recs)
    assert _ok(s, "/api/v1/logs", job="pj")["next_cursor"] is not None  # default limit 100
    assert len(_ok(s, "/api/v1/logs", job="pj")["logs"]) == 100
    for limit in (1, 4, 7, 100):
        pages, cursor = [], None
        while True:
            params = {"job": "pj", "limit": limit}
            if cursor:
                params["cursor"] = cursor
            page = _ok(s, "/api/v1/logs", **params)
            assert len(page["logs"]) <= limit
            pages += page["logs"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert pages == big, limit

    # a filtered pagination keeps its filter
    page = _ok(s, "/api/v1/logs", job="pj", level="warn", limit=5)
    nxt = _ok(s, "/api/v1/logs", job="pj", level="warn", limit=5, cursor=page["next_cursor"])
    assert all(LEVELS.index(x["level"]) >= 2 for x in nxt["logs"])

    # tampered cursor, or one from another query: 400 naming cursor
    c = page["next_cursor"]
    bad = c[:10] + ("0" if c[10] != "0" else "1") + c[11:]
    st, obj = _get(s, "/api/v1/logs", job="pj", level="warn", limit=5, cursor=bad)
    assert_error(st, obj, 400)
    assert "cursor" in obj["error"]
    st, obj = _get(s, "/api/v1/logs", job="pj", level="error", limit=5, cursor=c)
    assert_error(st, obj, 400)
    st, obj = _get(s, "/api/v1/logs", job="pj", cursor="nonsense")
    assert_error(st, obj, 400)
    s.stop()


def test_logs_errors():
    s = Server().start()
    _write(s, _logs("ej", 10))
    for params, word in [({"job": "ej", "level": "loud"}, "level"),
                         ({"job": "ej", "limit": 0}, "limit"),
                         ({"job": "ej", "limit": 10001}, "limit"),
                         ({"job": "ej", "from": "x"}, "from"),
                         ({"job": "ej", "rank": "-1"}, "rank"),
                         ({"job": "ej", "bogus": 1}, "bogus"),
                         ({"job": "ej", "from": 5, "to": 1}, "from"),
                         ({"job": "ej", "q": " ".join("w%d" % i for i in range(40))}, "q"),
                         ({}, "job")]:
        st, obj = _get(s, "/api/v1/logs", **params)
        assert_error(st, obj, 400, what=str(params))
        assert word in obj["error"], (params, obj)
    st, obj = _get(s, "/api/v1/logs", job="nosuch")
    assert_error(st, obj, 404)
    st, obj = _get(s, "/api/v1/spans", job="nosuch", step=1)
    assert_error(st, obj, 404)
    st, obj = _get(s, "/api/v1/spans", job="ej")
    assert_error(st, obj, 400)
    assert "step" in obj["error"]
    st, obj = _get(s, "/api/v1/logs/around", job="ej", step=1)
    assert_error(st, obj, 400)
    assert "rank" in obj["error"]
    st, obj = _get(s, "/api/v1/logs/around", job="ej", rank=0, step=1, window_steps=1,
                   before=3)
    assert_error(st, obj, 400)
    st, _, _ = s.request("POST", "/api/v1/logs?job=ej", body="")
    assert st == 405
    # a job with only logs is known: an empty selection is 200
    got = _ok(s, "/api/v1/logs", job="ej", to=1)
    assert got["logs"] == [] and got["next_cursor"] is None
    s.stop()


def test_logs_around():
    s = Server().start()
    recs = []
    for step in range(20):
        for rank in range(2):
            recs.append({"type": "log", "job": "aj", "rank": rank, "step": step,
                         "timestamp": T0 + step * 1000 + rank, "level": "info",
                         "message": "rank %d step %d" % (rank, step)})
    recs.append({"type": "log", "job": "aj", "rank": 1, "timestamp": T0 + 10500,
                 "level": "error", "message": "no step here"})
    _write(s, recs)
    got = _ok(s, "/api/v1/logs/around", job="aj", rank=1, step=10, window_steps=2)
    assert got["mode"] == "steps"
    assert [x["message"] for x in got["logs"]] == ["rank 1 step %d" % k for k in range(8, 13)]
    assert [x["at_step"] for x in got["logs"]] == [False, False, True, False, False]

    got = _ok(s, "/api/v1/logs/around", job="aj", rank=1, step=10, before=2, after=3)
    assert got["mode"] == "time" and got["anchor_ts"] == T0 + 10001, got
    assert [x["message"] for x in got["logs"]] == [
        "rank 1 step 8", "rank 1 step 9", "rank 1 step 10", "no step here", "rank 1 step 11"]
    assert [x["at_step"] for x in got["logs"]] == [False, False, True, False, False]

    # no log at the step, but a metric point: the point's time anchors
    st, obj = s.write([{"job": "aj", "rank": 1, "step": 100, "timestamp": T0 + 15500,
                        "metrics": {"loss": 1.0}}])
    assert st == 200, obj
    got = _ok(s, "/api/v1/logs/around", job="aj", rank=1, step=100, before=1, after=1)
    assert got["anchor_ts"] == T0 + 15500
    assert [x["message"] for x in got["logs"]] == ["rank 1 step 15", "rank 1 step 16"]
    st, obj = _get(s, "/api/v1/logs/around", job="aj", rank=1, step=5000)
    assert_error(st, obj, 404)
    s.stop()


def test_spans_timeline():
    s = Server().start()
    _write(s, _spans("sj", range(6), range(3)))
    got = _ok(s, "/api/v1/spans", job="sj", step_from=2, step_to=3)
    assert got["job"] == "sj"
    assert [x["step"] for x in got["steps"]] == [2, 3]
    ranks = got["steps"][0]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1, 2]
    r1 = ranks[1]
    assert [sp["name"] for sp in r1["spans"]] == ["data_wait", "forward", "backward", "optimizer"]
    assert r1["total_ns"] == 10 + 100 + 201 + 30
    sp = r1["spans"][2]
    assert sp["end"] == sp["start"] + sp["duration_ns"] == T0 + 2 * 10**9 + 1000 + 2000 + 201
    one = _ok(s, "/api/v1/spans", job="sj", step=4, rank="0,2")
    assert [r["rank"] for r in one["steps"][0]["ranks"]] == [0, 2]
    assert _ok(s, "/api/v1/spans", job="sj", step=99)["steps"] == []

    # a resumed attempt re-logs step 4 on rank 0: the latest attempt wins
    _write(s, [{"type": "span", "job": "sj", "rank": 0, "step": 4, "name": "forward",
                "start": T0 + 50 * 10**9, "duration_ns": 7, "attempt": 1}])
    r0 = _ok(s, "/api/v1/spans", job="sj", step=4)["steps"][0]["ranks"][0]
    assert r0["attempt"] == 1 and [x["name"] for x in r0["spans"]] == ["forward"], r0
    r0 = _ok(s, "/api/v1/spans", job="sj", step=4, attempt=0)["steps"][0]["ranks"][0]
    assert r0["attempt"] == 0 and len(r0["spans"]) == 4
    s.stop()


def test_events_survive_restart():
    s = Server().start()
    recs = _logs("rj", 60) + _spans("rj", range(3), range(2))
    _write(s, recs)
    logs = _ok(s, "/api/v1/logs", job="rj", limit=1000)
    spans = _ok(s, "/api/v1/spans", job="rj", step_from=0, step_to=10)
    s.restart()
    assert _ok(s, "/api/v1/logs", job="rj", limit=1000) == logs
    assert _ok(s, "/api/v1/spans", job="rj", step_from=0, step_to=10) == spans
    s.kill9()  # and after a crash (WAL replay)
    s.start()
    _write(s, _logs("rj2", 5))
    s.kill9()
    s.start()
    assert _ok(s, "/api/v1/logs", job="rj", limit=1000) == logs
    assert len(_ok(s, "/api/v1/logs", job="rj2")["logs"]) == 5
    s.stop()
