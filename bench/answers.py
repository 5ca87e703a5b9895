#!/usr/bin/env python3
"""answers.py - saves the answers of a fixed set of queries from a seeded
rankdbd, so that two builds can be compared byte for byte (a refactoring
must not change a single answer).

  answers.py --rankdbd BIN --gen RDB_GEN --load RDB_LOAD --out DIR [--size small]
  diff -r DIR_BEFORE DIR_AFTER

Starts BIN on a free 127.0.0.1 port in a fresh temp dir, loads the
benchmark workload (rdb-gen/rdb-load, line protocol, metrics train.*), a
few log and span records and a job metadata document, then saves every
query's status, content type, Allow header and body: once with the data
in the head (WAL), once after a checkpoint and a compaction (chunks, with
statistics). The queries: the four of bench/peers.py (raw range,
downsample, crossrank mean+max, outliers) and variants of each (every
aggregate, quantiles, time axis, phases), listings, logs, spans, the
Grafana datasource (per-rank aggregates, raw, cross-rank series, tables,
regex targets, annotations) and error answers (404, 405, 400). Only the
PID this script started is signalled. Python 3 standard library only.
"""
import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

TOKEN = "answers-token"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def request(port, method, path, body=None, ctype="application/json", headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    h = {"Content-Type": ctype} if body is not None else {}
    h.update(headers or {})
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    out = (r.status, r.getheader("Content-Type"), r.getheader("Allow"), data)
    c.close()
    return out


def q(path, params):
    return path + "?" + urllib.parse.urlencode(params)


def get_queries(info):
    job, t0, t1 = info["job"], int(info["t_first_ns"]), int(info["t_last_ns"])
    mid = (t0 + t1) // 2
    L, ST = "train.loss", "train.step_time"
    out = {
        "range_a": q("/api/v1/query/range", {"job": job, "metric": L, "rank": "0"}),
        "range_multi": q("/api/v1/query/range", {"job": job, "metric": L + ",train.lr",
                                                 "rank": "1,3", "step_from": 20, "step_to": 90}),
        "range_time": q("/api/v1/query/range", {"job": job, "metric": "train.gpu.temp_c",
                                                "from": t0, "to": mid}),
        "range_all_ranks": q("/api/v1/query/range", {"job": job, "metric": "train.grad_norm"}),
        "ds_b": q("/api/v1/query/downsample", {"job": job, "metric": L, "rank": "0",
                                               "points": 200, "agg": "avg"}),
        "ds_all": q("/api/v1/query/downsample", {"job": job, "metric": L + "," + ST,
                                                 "step_width": 7,
                                                 "agg": "avg,min,max,sum,count,first,last,p50,p99"}),
        "ds_time": q("/api/v1/query/downsample", {"job": job, "metric": L, "rank": "2,5",
                                                  "time_width_ns": 997000000, "agg": "minmax"}),
        "ds_default": q("/api/v1/query/downsample", {"job": job, "metric": "train.gpu.util"}),
        "ds_attempt_all": q("/api/v1/query/downsample", {"job": job, "metric": L,
                                                         "attempt": "all", "points": 33,
                                                         "from": t0 + 1000, "to": mid}),
        "xr_c": q("/api/v1/query/crossrank", {"job": job, "metric": L, "points": 200,
                                              "agg": "mean,max"}),
        "xr_full": q("/api/v1/query/crossrank", {"job": job, "metric": L}),
        "xr_q": q("/api/v1/query/crossrank", {"job": job, "metric": ST, "step_width": 5,
                                              "quantiles": "0.25,p75"}),
        "xr_cols": q("/api/v1/query/crossrank", {"job": job, "metric": ST, "rank": "0,1,2,7",
                                                 "agg": "argmin,argmax,p90,stddev,count"}),
        "xr_time": q("/api/v1/query/crossrank", {"job": job, "metric": "train.gpu.power_w",
                                                 "time_width_ns": 5000000000}),
        "out_d": q("/api/v1/query/outliers", {"job": job, "metric": ST,
                                              "last_steps": info["tail_steps"], "limit": 5,
                                              "direction": "high"}),
        "out_phases": q("/api/v1/query/outliers", {"job": job, "metric": ST,
                                                   "mode": "phases"}),
        "out_time": q("/api/v1/query/outliers", {"job": job, "metric": L, "from": t0,
                                                 "to": mid, "direction": "low"}),
        "jobs": "/api/v1/jobs",
        "metrics": "/api/v1/jobs/%s/metrics" % job,
        "ranks": "/api/v1/jobs/%s/ranks" % job,
        "meta": "/api/v1/jobs/%s/meta" % job,
        "logs": q("/api/v1/logs", {"job": job}),
        "logs_page": q("/api/v1/logs", {"job": job, "limit": 3, "level": "warn"}),
        "logs_around": q("/api/v1/logs/around", {"job": job, "rank": 1, "step": 10}),
        "logs_around_steps": q("/api/v1/logs/around", {"job": job, "rank": 1, "step": 10,
                                                       "window_steps": 3}),
        "spans": q("/api/v1/spans", {"job": job, "step_from": 0, "step_to": 50}),
        "healthz": "/healthz",
        "err_unknown_job": q("/api/v1/query/downsample", {"job": "nope", "metric": L}),
        "err_unknown_metric": q("/api/v1/query/crossrank", {"job": job, "metric": "nope"}),
        "err_param": q("/api/v1/query/range", {"job": job, "metric": L, "bogus": 1}),
        "err_param2": q("/api/v1/query/outliers", {"job": job, "metric": L, "points": 3}),
        "err_unknown_job_range": q("/api/v1/query/range", {"job": "nope", "metric": L}),
        "err_unknown_job_metrics": "/api/v1/jobs/nope/metrics",
        "err_job_path": "/api/v1/jobs/%s/what" % job,
        "err_job_path2": "/api/v1/jobs/bad$job/metrics",
        "err_no_endpoint": "/api/v1/nothing",
        "err_logs_job": q("/api/v1/logs", {"job": "nope"}),
        "err_meta_none": "/api/v1/jobs/nope/meta",
    }
    return out


def grafana_queries(info):
    job, t0, t1 = info["job"], int(info["t_first_ns"]), int(info["t_last_ns"])
    rng = {"from": t0 // 1000000, "to": t1 // 1000000 + 1}

    def body(targets, **kw):
        b = {"range": rng, "targets": targets, "maxDataPoints": 150}
        b.update(kw)
        return b

    return {
        "gf_avg": body([{"refId": "A", "target": "train.loss", "payload": {"job": job}}]),
        "gf_aggs": body([{"refId": "B", "target": "train.step_time",
                          "payload": {"job": job, "rank": ["0", "2"],
                                      "agg": ["min", "max", "first", "last", "sum",
                                              "count", "p50", "p90", "p99"]}}]),
        "gf_raw": body([{"refId": "C", "target": "train.lr",
                         "payload": {"job": job, "rank": "1", "agg": "raw"}}],
                       maxDataPoints=5000),
        "gf_raw_many": body([{"refId": "C", "target": "train.lr",
                              "payload": {"job": job, "rank": "1", "agg": "raw"}}]),
        "gf_xr": body([{"refId": "D", "target": "train.loss",
                        "payload": {"job": job, "agg": ["crossrank-mean", "crossrank-min",
                                                        "crossrank-max", "crossrank-median"]}}]),
        "gf_xr_odd": body([{"refId": "D", "target": "train.step_time",
                            "payload": {"job": job, "rank": ["0", "1", "4"],
                                        "agg": ["crossrank-median", "crossrank-mean", "avg"]}}]),
        "gf_table": body([{"refId": "E", "target": "train.grad_norm", "type": "table",
                           "payload": {"job": job, "rank": "3", "agg": ["avg", "crossrank-max"]}}]),
        "gf_regex": body([{"refId": "F", "target": "train\\.step_time\\..*",
                           "payload": {"job": job, "rank": "0"}}]),
        "gf_adhoc": body([{"refId": "G", "target": "train.gpu.util"}],
                         adhocFilters=[{"key": "rank", "operator": "=~", "value": "[0-3]"},
                                       {"key": "job", "operator": "=", "value": job}]),
        "gf_interval": body([{"refId": "H", "target": "train.loss",
                              "payload": {"job": job, "rank": "0"}}], intervalMs=7000),
        "gf_logs": body([{"refId": "L", "target": "logs", "payload": {"job": job}}]),
        "gf_anno": body([{"refId": "Anno", "target": job}]),
        "gf_unknown": body([{"refId": "A", "target": "nope", "payload": {"job": job}}]),
        "gf_metrics": {"metric": "", "payload": {"job": job}},
        "gf_search": {"target": ""},
    }


def seed_events(port, info):
    job, t0 = info["job"], int(info["t_first_ns"])
    recs = []
    levels = ["debug", "info", "warn", "error"]
    for i in range(60):
        recs.append({"type": "log", "job": job, "rank": i % 4, "timestamp": t0 + i * 1000003,
                     "step": i // 3, "level": levels[i % 4], "message": "message %d" % i,
                     "fields": {"i": i}})
    for step in range(0, 40, 3):
        for rank in range(3):
            for k, ph in enumerate(["data", "forward", "backward"]):
                recs.append({"type": "span", "job": job, "rank": rank, "step": step,
                             "name": ph, "start": t0 + step * 10000000 + k * 1000,
                             "duration_ns": 1000 + rank * 7 + k})
    body = "\n".join(json.dumps(r) for r in recs)
    st = request(port, "POST", "/api/v1/write", body, "application/x-ndjson")[0]
    if st != 200:
        sys.exit("answers.py: seeding events failed: %d" % st)
    meta = json.dumps({"world_size": int(info["ranks"]), "lr": 3e-4})
    st = request(port, "PUT", "/api/v1/jobs/%s/meta" % job, meta)[0]
    if st != 200:
        sys.exit("answers.py: PUT meta failed: %d" % st)


def save(out_dir, name, resp):
    st, ctype, allow, data = resp
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(("%d %s %s\n" % (st, ctype, allow)).encode())
        f.write(data)


def run_queries(port, info, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for name, path in get_queries(info).items():
        save(out_dir, name, request(port, "GET", path))
    for name, b in grafana_queries(info).items():
        path = "/grafana/" + ("metrics" if name == "gf_metrics" else
                              "search" if name == "gf_search" else "query")
        save(out_dir, name, request(port, "POST", path, json.dumps(b)))
    save(out_dir, "m405_query", request(port, "POST", "/api/v1/query/downsample", "x"))
    save(out_dir, "m405_range", request(port, "DELETE", "/api/v1/query/range"))
    save(out_dir, "m405_logs", request(port, "PUT", "/api/v1/logs", "x"))
    save(out_dir, "m405_meta", request(port, "POST", "/api/v1/jobs/j/meta", "{}"))
    save(out_dir, "m405_write", request(port, "GET", "/api/v1/write"))
    save(out_dir, "m405_jobs", request(port, "POST", "/api/v1/jobs", "x"))
    save(out_dir, "m405_health", request(port, "POST", "/healthz", "x"))
    save(out_dir, "head_query", request(port, "HEAD", q("/api/v1/query/downsample",
                                                          {"job": info["job"],
                                                           "metric": "train.loss"})))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rankdbd", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--load", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", default="small")
    a = ap.parse_args()
    info = {}
    for line in subprocess.check_output([a.gen, "--size", a.size, "--info"], text=True).split():
        k, _, v = line.partition("=")
        info[k] = v
    tmp = tempfile.mkdtemp(prefix="rankdb-answers.")
    port = free_port()
    log = open(os.path.join(tmp, "rankdbd.log"), "w")
    srv = subprocess.Popen([a.rankdbd, "--data-dir", tmp + "/data", "--http-port", str(port),
                            "--log-level", "warn", "--admin-token", TOKEN,
                            "--checkpoint-interval-s", "86400"], stdout=log, stderr=log)
    try:
        for _ in range(300):
            try:
                if request(port, "GET", "/healthz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        subprocess.check_call([a.load, "--size", a.size, "--format", "lp", "--connections", "1",
                               "--batch-records", "64", "--host", "127.0.0.1", "--port",
                               str(port), "--path", "/write?precision=ns"],
                              stdout=subprocess.DEVNULL)
        seed_events(port, info)
        run_queries(port, info, os.path.join(a.out, "head"))
        auth = {"Authorization": "Bearer " + TOKEN}
        for p in ("/api/v1/admin/checkpoint", "/api/v1/admin/compact"):
            st = request(port, "POST", p, "", headers=auth)[0]
            if st != 200:
                sys.exit("answers.py: %s answered %d" % (p, st))
        run_queries(port, info, os.path.join(a.out, "chunks"))
    finally:
        srv.terminate()
        srv.wait(timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
    print("answers.py: saved %d answers under %s" %
          (sum(len(f) for _, _, f in os.walk(a.out)), a.out))


if __name__ == "__main__":
    main()
