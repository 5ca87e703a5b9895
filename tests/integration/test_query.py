"""Downsample, cross-rank, outlier and job-metadata endpoints, end to end."""

import json
import math
import statistics
import urllib.parse

from harness import T0, Server, assert_error

SEC = 1_000_000_000


def _get(s, path, **params):
    items = [(k, str(v)) for k, v in params.items() if v is not None]
    return s.get_json(path + "?" + urllib.parse.urlencode(items))


def _ok(s, path, **params):
    st, obj = _get(s, path, **params)
    assert st == 200, "%s %r: %d %r" % (path, params, st, obj)
    return obj


def _loss(step, rank):
    return ((step * 7 + rank * 13) % 40) * 0.25


def _training(job, ranks, steps, attempt=0, t_off=0):
    recs = []
    for step in steps:
        for rank in ranks:
            recs.append({"job": job, "rank": rank, "step": step, "attempt": attempt,
                         "timestamp": T0 + t_off + step * SEC + rank * 1000,
                         "metrics": {"loss": _loss(step, rank) + attempt}})
    return recs


def test_downsample_buckets_match_reference():
    s = Server(["--chunk-max-points", "16"]).start()
    s.write_ok(_training("ds", range(3), range(100)))
    s.write_ok([{"job": "ds", "rank": 0, "step": 100, "timestamp": T0 + 100 * SEC,
                 "metrics": {"loss": "NaN"}}])
    for restart in (False, True):  # head, then everything in chunks
        if restart:
            s.restart()
        obj = _ok(s, "/api/v1/query/downsample", job="ds", metric="loss", rank="0,2",
                  step_width=10, agg="avg,min,max,count,first,last,p50")
        assert obj["axis"] == "step" and obj["width"] == 10, obj
        assert [x["rank"] for x in obj["series"]] == [0, 2]
        for ser in obj["series"]:
            r = ser["rank"]
            want_start = list(range(0, 110, 10)) if r == 0 else list(range(0, 100, 10))
            assert ser["start"] == want_start, ser["start"]
            assert ser["end"] == [x + 9 for x in want_start]
            for i, b in enumerate(want_start[:10]):
                vals = [_loss(st, r) for st in range(b, b + 10)]
                assert ser["count"][i] == 10 and ser["nan_count"][i] == 0
                assert ser["min"][i] == min(vals) and ser["max"][i] == max(vals)
                assert ser["avg"][i] == sum(vals) / 10, (ser["avg"][i], vals)
                assert ser["first"][i] == vals[0] and ser["last"][i] == vals[-1]
                assert ser["p50"][i] == statistics.median(vals)
            if r == 0:  # the NaN bucket: no value, counted apart, aggregates null
                assert ser["count"][10] == 0 and ser["nan_count"][10] == 1
                assert ser["min"][10] is None and ser["avg"][10] is None
                assert ser["first"][10] == "NaN"
        # default aggregate is minmax; points=N picks the width
        obj = _ok(s, "/api/v1/query/downsample", job="ds", metric="loss", rank=1, points=5,
                  step_from=0, step_to=99)
        ser = obj["series"][0]
        assert obj["width"] == 20 and len(ser["start"]) == 5, obj
        assert set(ser) == {"job", "rank", "metric", "start", "end", "count", "nan_count",
                            "min", "max"}
    # whole chunks inside one bucket come from chunk statistics
    obj = _ok(s, "/api/v1/query/downsample", job="ds", metric="loss", time_width_ns=1000 * SEC)
    assert obj["axis"] == "time" and obj["chunks_from_stats"] > 0, obj
    assert sum(sum(x["count"]) for x in obj["series"]) == 300
    s.stop()


def test_downsample_latest_attempt_wins():
    s = Server().start()
    s.write_ok(_training("att", [0], range(20)))
    s.write_ok(_training("att", [0], range(10, 15), attempt=1, t_off=100 * SEC))
    obj = _ok(s, "/api/v1/query/downsample", job="att", metric="loss", step_width=1,
              agg="avg")
    ser = obj["series"][0]
    assert ser["start"] == list(range(20))
    for st in range(20):
        want = _loss(st, 0) + (1 if 10 <= st < 15 else 0)
        assert ser["avg"][st] == want, (st, ser["avg"][st], want)
    obj = _ok(s, "/api/v1/query/downsample", job="att", metric="loss", step_width=1,
              agg="count", attempt="all")
    assert obj["series"][0]["count"][10] == 2
    obj = _ok(s, "/api/v1/query/downsample", job="att", metric="loss", step_width=1,
              agg="avg", attempt=0)
    assert obj["series"][0]["avg"][12] == _loss(12, 0)
    s.stop()


def test_query_errors():
    s = Server(["--max-query-points", "50"]).start()
    s.write_ok(_training("er", range(2), range(40)))
    ds = "/api/v1/query/downsample"
    for params, word in [
        ({"metric": "loss"}, "job"),
        ({"job": "er"}, "metric"),
        ({"job": "er", "metric": "loss", "bogus": 1}, "bogus"),
        ({"job": "er", "metric": "loss", "step_width": 0}, "step_width"),
        ({"job": "er", "metric": "loss", "step_width": 2, "time_width_ns": 5}, "time_width_ns"),
        ({"job": "er", "metric": "loss", "agg": "median2"}, "agg"),
        ({"job": "er", "metric": "loss", "attempt": "x"}, "attempt"),
        ({"job": "er", "metric": "loss", "rank": "-1"}, "rank"),
    ]:
        st, obj = _get(s, ds, **params)
        assert_error(st, obj, 400, what=repr(params))
        assert word in obj["error"], (word, obj)
    st, obj = _get(s, "/api/v1/query/outliers", job="er", metric="loss", direction="up")
    assert_error(st, obj, 400)
    assert "direction" in obj["error"]
    st, obj = _get(s, "/api/v1/query/crossrank", job="er", metric="loss,lr")
    assert_error(st, obj, 400)
    st, obj = _get(s, ds, job="nope", metric="loss")
    assert_error(st, obj, 404)
    st, obj = _get(s, ds, job="er", metric="nope")
    assert_error(st, obj, 404)
    assert "nope" in obj["error"]
    st, obj = _get(s, ds, job="er", metric="loss", step_width=1)  # 80 points > 50
    assert_error(st, obj, 422)
    assert "max_query_points" in obj["error"]
    st, _, _ = s.request("POST", ds + "?job=er&metric=loss")
    assert st == 405
    # a known metric but a rank that never wrote it: an empty answer, not a
    # crash (the empty match was sorted as qsort(NULL, 0), undefined
    # behaviour that UBSan aborts on: the sanitizer CI build runs this)
    for path in (ds, "/api/v1/query/range", "/api/v1/query/crossrank"):
        obj = _ok(s, path, job="er", metric="loss", rank=7)
        assert not any(x.get("points") or x.get("buckets") or x.get("steps")
                       for x in obj.get("series", [])), (path, obj)
    assert s.get_json("/healthz")[0] == 200
    s.stop()


def test_crossrank_per_step():
    s = Server().start()
    recs = _training("xr", range(5), range(30))
    recs = [r for r in recs if not (r["rank"] == 4 and r["step"] % 3 == 0)]  # missing rank
    s.write_ok(recs)
    obj = _ok(s, "/api/v1/query/crossrank", job="xr", metric="loss", step_from=0, step_to=29)
    assert obj["axis"] == "step" and obj["width"] == 1 and obj["ranks"] == [0, 1, 2, 3, 4]
    assert obj["start"] == list(range(30))
    for st in range(30):
        ranks = [r for r in range(5) if not (r == 4 and st % 3 == 0)]
        vals = [_loss(st, r) for r in ranks]
        mean = sum(vals) / len(vals)
        assert obj["count"][st] == len(vals)
        assert math.isclose(obj["mean"][st], mean, rel_tol=1e-12, abs_tol=1e-12)
        assert obj["min"][st] == min(vals) and obj["max"][st] == max(vals)
        assert obj["median"][st] == statistics.median(vals)
        assert math.isclose(obj["stddev"][st], statistics.pstdev(vals), rel_tol=1e-9,
                            abs_tol=1e-12)
        assert obj["argmin"][st] == ranks[vals.index(min(vals))]
        assert obj["argmax"][st] == ranks[vals.index(max(vals))]
    # downsampled: per bucket each rank's mean first, then across ranks
    obj = _ok(s, "/api/v1/query/crossrank", job="xr", metric="loss", step_width=10,
              quantiles="0.5,p90", ranks="0,1")
    assert obj["ranks"] == [0, 1] and len(obj["start"]) == 3 and "p90" in obj and "p50" in obj
    m0 = sum(_loss(st, 0) for st in range(10)) / 10
    m1 = sum(_loss(st, 1) for st in range(10)) / 10
    assert math.isclose(obj["mean"][0], (m0 + m1) / 2)
    s.stop()


def test_crossrank_agg_selects_columns():
    """agg= computes and returns only the columns asked for, with the same
    values as the full answer; 12 ranks are read by two threads."""
    s = Server(["--chunk-max-points", "16"]).start()
    s.write_ok(_training("xa", range(12), range(60)))
    full = _ok(s, "/api/v1/query/crossrank", job="xa", metric="loss", points=20)
    sub = _ok(s, "/api/v1/query/crossrank", job="xa", metric="loss", points=20, agg="mean,max")
    for k in ("start", "end", "mean", "max", "buckets", "points_read", "ranks"):
        assert sub[k] == full[k], k
    for k in ("count", "min", "median", "p10", "p90", "stddev", "argmin", "argmax"):
        assert k not in sub, k
    q = _ok(s, "/api/v1/query/crossrank", job="xa", metric="loss", points=20,
            agg="median,p90,argmax")
    assert q["median"] == full["median"] and q["p90"] == full["p90"]
    assert q["argmax"] == full["argmax"] and "p10" not in q and "mean" not in q
    st, obj = _get(s, "/api/v1/query/crossrank", job="xa", metric="loss", agg="mean,bogus")
    assert st == 400 and "bogus" in obj["error"]
    s.stop()


def test_outliers_phase_mode_finds_straggler():
    """Rank 5 computes slowly (forward/backward); the other ranks wait for it in
    all-reduce, so every rank's step time is the same: only phase mode tells."""
    s = Server().start()
    recs = []
    for step in range(50):
        for rank in range(8):
            jitter = 0.001 * ((rank * 7 + step) % 5)
            fwd = (0.30 if rank == 5 else 0.10) + jitter
            bwd = (0.60 if rank == 5 else 0.20) + jitter
            opt = 0.05
            data = 0.02
            allreduce = 1.0 - fwd - bwd - opt - data
            recs.append({"job": "st", "rank": rank, "step": step,
                         "timestamp": T0 + step * SEC + rank,
                         "metrics": {"step_time": 1.0, "step_time.forward": fwd,
                                     "step_time.backward": bwd, "step_time.optimizer": opt,
                                     "step_time.data": data, "step_time.allreduce": allreduce}})
    s.write_ok(recs)
    obj = _ok(s, "/api/v1/query/outliers", job="st", metric="step_time", mode="phases",
              last_steps=20, limit=3)
    assert obj["mode"] == "phases" and obj["window"] == {"step_from": 30, "step_to": 49}, obj
    assert obj["phases"] == ["backward", "forward", "optimizer"], obj["phases"]
    assert obj["wait_phases"] == ["allreduce", "data"], obj["wait_phases"]
    top = obj["outliers"][0]
    assert top["rank"] == 5 and top["score"] > 10, obj["outliers"]
    assert math.isclose(top["total"], 1.0) and set(top["phases"]) == set(
        ["forward", "backward", "optimizer", "data", "allreduce"])
    assert len(obj["outliers"]) == 3
    # raw step time is equal on every rank: value mode sees no straggler
    obj = _ok(s, "/api/v1/query/outliers", job="st", metric="step_time")
    assert obj["mad_zero"] is True and all(o["score"] == 0 for o in obj["outliers"]), obj
    # value mode on a phase; direction=low puts the fastest first
    obj = _ok(s, "/api/v1/query/outliers", job="st", metric="step_time.allreduce",
              direction="low", limit=1)
    assert obj["outliers"][0]["rank"] == 5 and obj["outliers"][0]["score"] < 0
    s.stop()


def test_job_metadata():
    s = Server().start()
    path = "/api/v1/jobs/run-7/meta"
    st, obj = s.get_json(path)
    assert_error(st, obj, 404)
    doc = {"world_size": 512, "config": {"lr": 3e-4, "layers": [1, 2]}, "status": "running"}
    st, _, body = s.request("PUT", path, body=json.dumps(doc))
    assert st == 200, body
    st, obj = s.get_json(path)
    assert st == 200 and obj == doc, obj
    for bad in ["[1,2]", "{\"a\":", "", "{\"a\":1,\"a\":2}"]:
        st, _, body = s.request("PUT", path, body=bad)
        assert st == 400, (bad, st, body)
    st, _, _ = s.request("PUT", path, body="{" + " " * (1 << 20) + "}")
    assert st == 413
    st, _, _ = s.request("PUT", "/api/v1/jobs/bad$job/meta", body="{}")
    assert st == 400
    st, _, _ = s.request("DELETE", path)
    assert st == 405
    s.kill9()  # durable once acknowledged
    s.start()
    st, obj = s.get_json(path)
    assert st == 200 and obj == doc, obj
    s.stop()


def test_tail_and_crossrank_answers_across_chunks_and_head():
    """The last-N-steps window and cross-rank buckets are exact whether the
    points are in the head, in chunks the window starts or ends inside, or
    both; a rank's re-logged steps (attempt 1) win. Cross-rank and outliers
    decode chunks without their timestamps where that changes nothing."""
    s = Server(["--chunk-max-points", "16"]).start()
    ranks, steps = range(10), range(100)
    s.write_ok(_training("tail", ranks, steps))
    # rank 3 restarts at step 90: attempt 1 re-logs steps 90..99, later in time
    s.write_ok(_training("tail", [3], range(90, 100), attempt=1, t_off=200 * SEC))

    def value(rank, step):
        return _loss(step, rank) + (1 if rank == 3 and step >= 90 else 0)

    def check():
        obj = _ok(s, "/api/v1/query/outliers", job="tail", metric="loss", last_steps=30,
                  limit=100, direction="high")
        assert obj["window"] == {"step_from": 70, "step_to": 99}, obj["window"]
        got = {o["rank"]: o["value"] for o in obj["outliers"]}
        assert sorted(got) == list(ranks), got
        for r in ranks:
            want = sum(value(r, st) for st in range(70, 100)) / 30
            assert got[r] == want, (r, got[r], want)
        obj = _ok(s, "/api/v1/query/crossrank", job="tail", metric="loss", step_width=7,
                  agg="mean,max,count")
        assert obj["start"] == list(range(0, 100, 7)), obj["start"]
        for i, b in enumerate(obj["start"]):
            means = [sum(value(r, st) for st in range(b, min(b + 7, 100))) /
                     len(range(b, min(b + 7, 100))) for r in ranks]
            assert obj["count"][i] == 10
            assert obj["max"][i] == max(means), (b, obj["max"][i], means)
            assert math.isclose(obj["mean"][i], sum(means) / 10, rel_tol=1e-15), b

    check()  # 96 points of each series in chunks of 16, the rest in the head
    s.restart()
    check()  # everything in chunks
    s.write_ok(_training("tail", [5], [99], attempt=1, t_off=300 * SEC))
    _loss_99 = _loss(99, 5)
    obj = _ok(s, "/api/v1/query/outliers", job="tail", metric="loss", last_steps=1, limit=100)
    assert {o["rank"]: o["value"] for o in obj["outliers"]}[5] == _loss_99 + 1
    s.stop()
