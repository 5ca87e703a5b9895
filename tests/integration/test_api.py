"""Write -> query round trips, filters, listings."""

import json
import random
import time

from harness import (T0, Server, jobs_brief, jobs_stored, assert_error, assert_series_equal, expected_series, f32,
                     series_map)

SEC = 1_000_000_000


def _training_records(job, ranks, steps, attempt=0):
    recs = []
    for step in steps:
        for rank in ranks:
            recs.append({
                "job": job, "rank": rank, "step": step, "attempt": attempt,
                "timestamp": T0 + step * SEC + rank * 1000,
                "metrics": {
                    "loss": 1.0 / (step + 1) + rank * 0.01,
                    "lr": 1e-4 * step,
                    "grad_norm": f32(2.5 + 0.37 * step - 0.11 * rank),
                },
            })
    return recs


def test_healthz():
    s = Server().start()
    st, obj = s.get_json("/healthz")
    assert st == 200 and obj == {"status": "ok"}, (st, obj)
    st, obj = s.get_json("/api/v1/jobs")
    assert st == 200 and obj == {"jobs": []}, (st, obj)
    s.stop()


def test_roundtrip_json_array():
    s = Server().start()
    recs = _training_records("rt1", range(4), range(50))
    st, obj = s.write(recs)
    assert st == 200, (st, obj)
    assert obj == {"accepted_points": 600, "accepted_events": 0, "records": 200}, obj

    # one metric, all ranks, everything
    got = series_map(s.query_ok(job="rt1", metric="loss"))
    assert_series_equal(got, expected_series(recs, metrics={"loss"}), "loss")
    assert len(got) == 4

    # metric lists: comma form and repeated parameter
    want = expected_series(recs, metrics={"loss", "lr"})
    assert_series_equal(series_map(s.query_ok(job="rt1", metric="loss,lr")), want, "metric=loss,lr")
    assert_series_equal(series_map(s.query_ok(job="rt1", metric=["loss", "lr"])), want, "metric=loss&metric=lr")
    all3 = s.query_ok(job="rt1", metric="loss,lr,grad_norm")
    assert all3["points"] == 600, all3["points"]

    # rank filter
    want = expected_series(recs, ranks={0, 2}, metrics={"loss", "grad_norm"})
    assert_series_equal(series_map(s.query_ok(job="rt1", metric="loss,grad_norm", rank="0,2")),
                        want, "rank=0,2")
    assert_series_equal(series_map(s.query_ok(job="rt1", metric="lr", rank="3")),
                        expected_series(recs, ranks={3}, metrics={"lr"}), "rank=3")

    # time range, inclusive at both ends, rank 1's timestamps are T0+step*SEC+1000
    def ts(step, rank=1):
        return T0 + step * SEC + rank * 1000
    for tfrom, tto, desc in [
        (ts(10), ts(20), "exact bounds"),
        (ts(10) + 1, ts(20), "from just after a point"),
        (ts(10), ts(20) - 1, "to just before a point"),
        (ts(0), ts(0), "single point at the start"),
        (ts(49), ts(49), "single point at the end"),
        (ts(49), ts(49) + 10 * SEC, "beyond the end"),
        (0, ts(2), "from zero"),
    ]:
        got = series_map(s.query_ok(job="rt1", metric="loss", rank="1", **{"from": tfrom, "to": tto}))
        want = expected_series(recs, ranks={1}, metrics={"loss"}, tfrom=tfrom, tto=tto)
        assert_series_equal(got, want, "time range %s" % desc)
    # from only / to only
    got = series_map(s.query_ok(job="rt1", metric="loss", rank="1", **{"from": ts(45)}))
    assert_series_equal(got, expected_series(recs, ranks={1}, metrics={"loss"}, tfrom=ts(45)), "from only")
    got = series_map(s.query_ok(job="rt1", metric="loss", rank="1", to=ts(3)))
    assert_series_equal(got, expected_series(recs, ranks={1}, metrics={"loss"}, tto=ts(3)), "to only")

    # empty range: series omitted
    obj = s.query_ok(job="rt1", metric="loss", **{"from": ts(60), "to": ts(70)})
    assert obj["series"] == [] and obj["points"] == 0, obj
    obj = s.query_ok(job="rt1", metric="loss", **{"from": ts(20, 2) + 1, "to": ts(20, 3) - 1})
    assert obj["series"] == [] and obj["points"] == 0, obj

    # step ranges, inclusive
    for a, b in [(5, 5), (0, 0), (10, 19), (48, 1000), (49, 49), (0, 49)]:
        got = series_map(s.query_ok(job="rt1", metric="lr,loss", step_from=a, step_to=b))
        want = expected_series(recs, metrics={"lr", "loss"}, step_from=a, step_to=b)
        assert_series_equal(got, want, "steps %d..%d" % (a, b))
    obj = s.query_ok(job="rt1", metric="lr", step_from=50, step_to=100)
    assert obj["series"] == [], obj
    # step and time range together
    got = series_map(s.query_ok(job="rt1", metric="lr", rank="0", step_from=10, step_to=30,
                                **{"from": ts(20, 0), "to": ts(40, 0)}))
    want = expected_series(recs, ranks={0}, metrics={"lr"}, step_from=10, step_to=30,
                           tfrom=ts(20, 0), tto=ts(40, 0))
    assert_series_equal(got, want, "step and time range")

    # listings
    st, obj = s.get_json("/api/v1/jobs")
    assert st == 200 and jobs_brief(obj) == {"jobs": [{"job": "rt1", "series": 12}]}, (st, obj)
    j = obj["jobs"][0]
    assert (j["first_ts"], j["last_step"], j["ranks"]) == (min(r["timestamp"] for r in recs),
                                                           max(r["step"] for r in recs), 4), j
    st, obj = s.get_json("/api/v1/jobs/rt1/metrics")
    assert st == 200 and obj == {"job": "rt1", "metrics": ["grad_norm", "loss", "lr"]}, (st, obj)
    st, obj = s.get_json("/api/v1/jobs/rt1/ranks")
    assert st == 200 and obj == {"job": "rt1", "ranks": [0, 1, 2, 3], "job_level": False}, (st, obj)
    s.stop()


def test_roundtrip_ndjson_job_rank_and_defaults():
    s = Server().start()
    recs = []
    for step in range(20):
        recs.append({"job": "nd.j-1", "rank": "job", "step": step, "timestamp": T0 + step * SEC,
                     "type": "metrics", "metrics": {"tokens_per_s": 1000.0 + step, "global_step": step}})
        for rank in (0, 1):
            recs.append({"job": "nd.j-1", "rank": rank, "step": step, "timestamp": T0 + step * SEC + 1 + rank,
                         "metrics": {"loss": f32(3.0 - 0.1 * step)}})
    # points without a step
    for i in range(5):
        recs.append({"job": "nd.j-1", "rank": "job", "timestamp": T0 + 100 * SEC + i,
                     "metrics": {"event": float(i)}})
    # NDJSON with blank lines and no trailing newline
    lines = [json.dumps(r) for r in recs]
    body = "\n".join(lines[:10]) + "\n\n" + "\n".join(lines[10:])
    st, obj = s.post_json("/api/v1/write", body, content_type="application/x-ndjson")
    assert st == 200, (st, obj)
    assert obj == {"accepted_points": 20 * 2 + 40 + 5, "accepted_events": 0, "records": len(recs)}, obj

    got = series_map(s.query_ok(job="nd.j-1", metric="tokens_per_s,global_step,event", rank="job"))
    assert_series_equal(got, expected_series(recs, ranks={"job"}), "rank=job")
    for k in got:
        assert k[1] == "job", k
    evs = got[("nd.j-1", "job", "event")]
    assert all(p[1] is None for p in evs), "points written without step must read back step null: %r" % evs
    # a step range selects only points that have a step
    obj = s.query_ok(job="nd.j-1", metric="event", step_from=0, step_to=10 ** 12)
    assert obj["series"] == [], obj
    got = series_map(s.query_ok(job="nd.j-1", metric="loss"))
    assert_series_equal(got, expected_series(recs, metrics={"loss"}), "loss ranks 0,1")
    # the job-level series are not returned when filtering by numeric rank
    got = series_map(s.query_ok(job="nd.j-1", metric="loss,tokens_per_s", rank="0"))
    assert_series_equal(got, expected_series(recs, ranks={0}, metrics={"loss", "tokens_per_s"}), "rank=0")

    st, obj = s.get_json("/api/v1/jobs/nd.j-1/ranks")
    assert st == 200 and obj == {"job": "nd.j-1", "ranks": [0, 1], "job_level": True}, (st, obj)
    st, obj = s.get_json("/api/v1/jobs/nd.j-1/metrics")
    assert st == 200 and obj == {"job": "nd.j-1", "metrics": ["event", "global_step", "loss", "tokens_per_s"]}, obj

    # a single object body is one NDJSON record
    st, obj = s.post_json("/api/v1/write", json.dumps({"job": "single", "rank": 7, "step": 1,
                                                       "timestamp": T0, "metrics": {"x": 1.5}}))
    assert st == 200 and obj == {"accepted_points": 1, "accepted_events": 0, "records": 1}, (st, obj)
    st, obj = s.get_json("/api/v1/jobs")
    assert st == 200 and jobs_brief(obj) == {"jobs": [{"job": "nd.j-1", "series": 5}, {"job": "single", "series": 1}]}, obj
    s.stop()


def test_default_timestamp_and_attempt():
    s = Server().start()
    before = time.time_ns()
    s.write_ok([{"job": "dt", "rank": 0, "step": 1, "metrics": {"a": 1.0}},
                {"job": "dt", "rank": 0, "step": 2, "attempt": 3, "timestamp": T0, "metrics": {"a": 2.0}}])
    after = time.time_ns()
    obj = s.query_ok(job="dt", metric="a")
    (ser,) = obj["series"]
    pts = sorted(zip(ser["timestamps"], ser["steps"], ser["attempts"]))
    assert pts[0] == (T0, 2, 3), pts
    ts, step, att = pts[1]
    assert (step, att) == (1, 0), pts
    # server time: a wall clock reading taken while the request ran (60 s slack
    # only guards against a coarse clock, this is not a timing assertion)
    assert before - 60 * SEC <= ts <= after + 60 * SEC, (before, ts, after)
    s.stop()


def test_out_of_order_and_late_points():
    s = Server(["--chunk-max-points", "16"]).start()
    rnd = random.Random(7)
    steps = list(range(300))
    rnd.shuffle(steps)
    recs = [{"job": "ooo", "rank": r, "step": st, "timestamp": T0 + st * 1000 + r,
             "metrics": {"v": st * 0.5 + r}} for st in steps for r in (0, 1)]
    for i in range(0, len(recs), 37):
        s.write_ok(recs[i:i + 37])
    want = expected_series(recs)
    assert_series_equal(series_map(s.query_ok(job="ooo", metric="v")), want, "shuffled writes")
    # late points, older than everything sealed so far
    late = [{"job": "ooo", "rank": 0, "step": 1000 + i, "timestamp": T0 - 1000 + i, "metrics": {"v": -1.0 * i}}
            for i in range(20)]
    s.write_ok(late)
    want = expected_series(recs + late)
    assert_series_equal(series_map(s.query_ok(job="ooo", metric="v")), want, "late points")
    s.restart()
    assert_series_equal(series_map(s.query_ok(job="ooo", metric="v")), want, "after restart")
    got = series_map(s.query_ok(job="ooo", metric="v", rank="0", **{"from": T0 - 995, "to": T0 + 10 * 1000}))
    assert_series_equal(got, expected_series(recs + late, ranks={0}, tfrom=T0 - 995, tto=T0 + 10000),
                        "time window over late points")
    s.stop()


def test_many_jobs_listing_sorted():
    s = Server().start()
    jobs = ["zeta", "Alpha", "alpha", "b-2", "b.1", "b_3", "0job"]
    for i, j in enumerate(jobs):
        s.write_ok([{"job": j, "rank": r, "step": 0, "timestamp": T0, "metrics": {"m%d" % k: 1 for k in range(i + 1)}}
                    for r in range(2)])
    st, obj = s.get_json("/api/v1/jobs")
    assert st == 200, (st, obj)
    want = [{"job": j, "series": 2 * (jobs.index(j) + 1)} for j in sorted(jobs)]
    assert jobs_brief(obj) == {"jobs": want}, obj
    st, obj = s.get_json("/api/v1/jobs/0job/metrics")
    assert obj == {"job": "0job", "metrics": ["m%d" % k for k in range(7)]}, obj
    # metrics stay distinct when written again
    s.write_ok([{"job": "b.1", "rank": 5, "step": 1, "timestamp": T0 + 1, "metrics": {"m0": 2, "m9": 3}}])
    st, obj = s.get_json("/api/v1/jobs/b.1/metrics")
    assert obj == {"job": "b.1", "metrics": ["m0", "m1", "m2", "m3", "m4", "m9"]}, obj
    st, obj = s.get_json("/api/v1/jobs/b.1/ranks")
    assert obj == {"job": "b.1", "ranks": [0, 1, 5], "job_level": False}, obj
    st, obj = s.get_json("/api/v1/jobs/nosuch/metrics")
    assert_error(st, obj, 404, what="metrics of unknown job")
    st, obj = s.get_json("/api/v1/jobs/nosuch/ranks")
    assert_error(st, obj, 404, what="ranks of unknown job")
    s.stop()
