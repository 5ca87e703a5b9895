#!/usr/bin/env python3
"""peers.py - query phase and results table of bench/peers.sh.

  peers.py query --system rankdb|vm|influx --port P --info INFO --reps N
                 [--budget-s 30] --out FILE.json [--metric-prefix train.]
  peers.py table --size S --dir TMP --systems rankdb,vm,influx --out FILE.md

`query` runs the four benchmark queries (DESIGN.md "Performance targets")
against one server in its native query language, with the same semantics
on every system, over one keep-alive connection: 2 warm-up runs, then N
timed runs (send -> last body byte; fewer, but at least 3, once they have
taken --budget-s seconds), and keeps the last answer's facts
(points, buckets, max, top-5 ranks) for the cross-checks of `table`.

  a  raw range: rank 0 loss, whole run
  b  rank 0 loss downsampled to ~200 buckets, mean per bucket
  c  cross-rank: per bucket (~200), each rank's mean loss, then the mean
     and the max of those across ranks (rankdb's crossrank semantics; it is
     asked for exactly these two columns, agg=mean,max, like the peers)
  d  top-5 ranks by mean step_time over the last 10 % of steps

A 404 means the endpoint is missing (rankdb endpoints under construction):
the cell is "n/a (endpoint missing)" and the run goes on. `table` reads the
ingest facts peers.sh wrote (DIR/<system>.kv) and the query files
(DIR/<system>.q.json), checks the answers against each other (warnings on
stderr and in the table), and prints one markdown table with ratios.
Python 3 standard library only. Traffic: 127.0.0.1 only.
"""
import argparse
import glob
import http.client
import json
import math
import os
import statistics
import sys
import time
import urllib.parse

QUERIES = ["a", "b", "c", "d"]
QUERY_TITLES = {
    "a": "(a) raw range, 1 series",
    "b": "(b) downsample 1 series to ~200",
    "c": "(c) cross-rank mean+max, ~200 buckets",
    "d": "(d) top-5 ranks by step_time, last 10 %",
}
NAMES = {"rankdb": "rankdb", "vm": "VictoriaMetrics", "influx": "InfluxDB"}
BUCKETS = 200


def read_kv(path):
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            k, sep, v = line.strip().partition("=")
            if sep:
                out[k] = v
    return out


# ---- query construction --------------------------------------------------


def windows(info):
    """Times of the run in ms/ns, the bucket width and the tail window."""
    first, last, tail = (int(info[k]) for k in ("t_first_ns", "t_last_ns", "t_tail_ns"))
    w = {"first_ns": first, "last_ns": last, "tail_ns": tail}
    w["first_ms"] = first // 1_000_000
    w["last_ms"] = -(-last // 1_000_000)
    w["tail_ms"] = tail // 1_000_000
    w["bucket_ms"] = max(1, -(-(w["last_ms"] - w["first_ms"]) // BUCKETS))
    return w


def sec(ms):
    return "%d.%03d" % (ms // 1000, ms % 1000)


def rankdb_queries(info, prefix):
    job = info["job"]
    loss, st = prefix + "loss", prefix + "step_time"
    q = urllib.parse.urlencode
    return {
        "a": "/api/v1/query/range?" + q({"job": job, "metric": loss, "rank": "0"}),
        "b": "/api/v1/query/downsample?"
        + q({"job": job, "metric": loss, "rank": "0", "points": BUCKETS, "agg": "avg"}),
        # agg=mean,max: the two columns VM and InfluxDB compute, not all eleven
        "c": "/api/v1/query/crossrank?"
        + q({"job": job, "metric": loss, "points": BUCKETS, "agg": "mean,max"}),
        "d": "/api/v1/query/outliers?"
        + q({"job": job, "metric": st, "last_steps": info["tail_steps"], "limit": 5,
             "direction": "high"}),
    }


def vm_queries(info):
    """MetricsQL. VM keeps ms timestamps; a window [W] at time T is (T-W, T]."""
    w = windows(info)
    job = info["job"]
    b = w["bucket_ms"]
    sel = 'train_loss{job="%s"' % job
    raw_w = w["last_ms"] - w["first_ms"] + 1
    tail_w = w["last_ms"] - w["tail_ms"] + 1
    rng = {"start": sec(w["first_ms"]), "end": sec(w["last_ms"] + b), "step": "%dms" % b,
           "nocache": "1"}
    q = urllib.parse.urlencode
    cross = ('label_set(avg(avg_over_time(%s}[%dms])), "agg", "mean") or '
             'label_set(max(avg_over_time(%s}[%dms])), "agg", "max")') % (sel, b, sel, b)
    return {
        "a": "/api/v1/query?" + q({"query": '%s,rank="0"}[%dms]' % (sel, raw_w),
                                   "time": sec(w["last_ms"]), "nocache": "1"}),
        "b": "/api/v1/query_range?"
        + q(dict(rng, query='avg_over_time(%s,rank="0"}[%dms])' % (sel, b))),
        "c": "/api/v1/query_range?" + q(dict(rng, query=cross)),
        "d": "/api/v1/query?"
        + q({"query": 'topk(5, avg_over_time(train_step_time{job="%s"}[%dms]))' % (job, tail_w),
             "time": sec(w["last_ms"]), "nocache": "1"}),
    }


def influx_queries(info):
    """InfluxQL (1.x). Integer time literals are ns; bounds are inclusive."""
    w = windows(info)
    where = "job='%s' AND time >= %d AND time <= %d" % (info["job"], w["first_ns"], w["last_ns"])
    tail = "job='%s' AND time >= %d AND time <= %d" % (info["job"], w["tail_ns"], w["last_ns"])
    gb = "GROUP BY time(%dms)" % w["bucket_ms"]
    qs = {
        "a": "SELECT loss FROM train WHERE %s AND rank='0'" % where,
        "b": "SELECT mean(loss) FROM train WHERE %s AND rank='0' %s" % (where, gb),
        # The outer query needs the time bounds too: without them InfluxDB
        # fills buckets from the epoch on (a 50 s query at the default size).
        "c": "SELECT mean(m), max(m) FROM (SELECT mean(loss) AS m FROM train WHERE %s "
        "%s, rank) WHERE %s %s fill(none)" % (where, gb, where.split(" AND ", 1)[1], gb),
        "d": "SELECT top(mean, rank, 5) FROM (SELECT mean(step_time) FROM train WHERE %s "
        "GROUP BY rank)" % tail,
    }
    return {k: "/query?" + urllib.parse.urlencode({"db": "bench", "epoch": "ns", "q": v})
            for k, v in qs.items()}


# ---- answer facts ----------------------------------------------------------


def num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def facts_vm(k, doc):
    res = doc.get("data", {}).get("result", [])
    f = {"series": len(res)}
    if k == "a" and res:
        vals = [num(v[1]) for v in res[0].get("values", [])]
        f.update(points=len(vals), values=vals)
    elif k in ("b", "c"):
        f["buckets"] = max((len(s.get("values", [])) for s in res), default=0)
        for s in res:
            if s.get("metric", {}).get("agg") == "max":
                f["max"] = max(num(v[1]) for v in s["values"])
        f["empty"] = f["buckets"] == 0
    elif k == "d":
        top = sorted(res, key=lambda s: -num(s["value"][1]))
        f["top"] = [int(s["metric"]["rank"]) for s in top]
    return f


def facts_influx(k, doc):
    series = []
    for r in doc.get("results", []):
        if "error" in r:
            raise ValueError(r["error"])
        series += r.get("series", [])
    f = {"series": len(series)}
    rows = series[0]["values"] if series else []
    cols = series[0]["columns"] if series else []
    if k == "a":
        f.update(points=len(rows), values=[num(r[1]) for r in rows])
    elif k in ("b", "c"):
        rows = [r for r in rows if any(v is not None for v in r[1:])]
        f["buckets"] = len(rows)
        if "max" in cols:
            i = cols.index("max")
            f["max"] = max(num(r[i]) for r in rows)
        f["empty"] = not rows
    elif k == "d":
        i, j = cols.index("top"), cols.index("rank")
        rows = sorted(rows, key=lambda r: -r[i])
        f["top"] = [int(r[j]) for r in rows]
    return f


def walk(doc):
    yield doc
    if isinstance(doc, dict):
        for v in doc.values():
            yield from walk(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from walk(v)


def facts_rankdb(k, doc):
    """rankdb's query answers are generic here (the endpoints are young):
    the longest numeric list is the points/buckets; a list under a key named
    max is the max; the first list of objects with a rank is the top list."""
    f = {}
    longest, mx, top, nbuckets = [], None, None, None
    for node in walk(doc):
        if isinstance(node, dict) and nbuckets is None and isinstance(node.get("buckets"), int):
            nbuckets = node["buckets"]
        if isinstance(node, list) and node and all(num(v) is not None for v in node):
            if len(node) > len(longest):
                longest = node
        if isinstance(node, dict):
            for key, v in node.items():
                if key in ("max", "maxs", "max_values") and isinstance(v, list) and v:
                    vals = [num(x) for x in v if num(x) is not None]
                    if vals:
                        mx = max(vals) if mx is None else max(mx, max(vals))
        if top is None and isinstance(node, list) and node and all(
                isinstance(v, dict) and "rank" in v for v in node):
            top = node
    if k == "a":
        series = doc.get("series", []) if isinstance(doc, dict) else []
        vals = series[0].get("values", []) if series else longest
        f.update(points=len(vals), values=[num(v) for v in vals])
    elif k in ("b", "c"):
        f["buckets"] = nbuckets if nbuckets is not None else len(longest)
        f["empty"] = not f["buckets"]
        if mx is not None:
            f["max"] = mx
    elif k == "d" and top is not None:
        f["top"] = [int(v["rank"]) for v in top if str(v["rank"]).isdigit()][:5]
    return f


FACTS = {"rankdb": facts_rankdb, "vm": facts_vm, "influx": facts_influx}


# ---- query runner -------------------------------------------------------------


def timed_get(conn, path):
    t0 = time.perf_counter()
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read()
    return time.perf_counter() - t0, resp.status, body


def run_query(port, system, k, path, reps, budget_s):
    """2 warm-ups, then reps timed runs; stops early (after at least 3 timed
    runs) once the timed runs have taken budget_s seconds."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    out = {"path": path}
    try:
        lat = []
        for i in range(reps + 2):
            if len(lat) >= 3 and sum(lat) / 1e3 > budget_s:
                break
            dt, status, body = timed_get(conn, path)
            if status == 404:
                out["status"] = "n/a (endpoint missing)"
                return out
            if status != 200:
                out["status"] = "HTTP %d: %s" % (status, body[:200].decode("utf-8", "replace"))
                return out
            if i >= 2:
                lat.append(dt * 1e3)
        lat.sort()
        out["median_ms"] = statistics.median(lat)
        out["p90_ms"] = lat[min(len(lat) - 1, math.ceil(0.9 * len(lat)) - 1)]
        out["reps"] = len(lat)
        out["response_bytes"] = len(body)
        try:
            out["facts"] = FACTS[system](k, json.loads(body))
            out["status"] = "ok"
        except (ValueError, KeyError, IndexError, TypeError) as e:
            out["status"] = "ok (answer not understood: %s)" % e
    except (OSError, http.client.HTTPException) as e:
        out["status"] = "error: %s" % e
    finally:
        conn.close()
    return out


def cmd_query(a):
    info = read_kv(a.info)
    if a.system == "rankdb":
        paths = rankdb_queries(info, a.metric_prefix)
    elif a.system == "vm":
        paths = vm_queries(info)
    else:
        paths = influx_queries(info)
    res = {}
    for k in QUERIES:
        res[k] = run_query(a.port, a.system, k, paths[k], a.reps, a.budget_s)
        r = res[k]
        lat = ("median %.2f ms p90 %.2f ms (%d runs)" % (r["median_ms"], r["p90_ms"], r["reps"])
               if "median_ms" in r else "")
        print("  %-6s %s %s %s" % (a.system, QUERY_TITLES[k], r["status"], lat), flush=True)
    with open(a.out, "w") as f:
        json.dump(res, f)


# ---- table ----------------------------------------------------------------------------


def check(systems, q, info, warnings, notes):
    """Cross-checks the answers; appends human-readable warnings (answers
    that disagree) and notes (expected differences, e.g. VM's precision)."""
    steps = int(info.get("steps", 0))

    def facts(s, k):
        r = q.get(s, {}).get(k, {})
        return r.get("facts") if r.get("status") == "ok" else None

    ref_vals = None
    for s in systems:
        f = facts(s, "a")
        if f is None:
            continue
        if f.get("points") != steps:
            warnings.append("%s (a): %s points, want %d" % (NAMES[s], f.get("points"), steps))
        if s in ("influx", "rankdb") and ref_vals is None and f.get("points") == steps:
            ref_vals = (s, f["values"])
    for s in systems:
        f = facts(s, "a")
        if f is None or ref_vals is None or s == ref_vals[0] or f.get("points") != steps:
            continue
        err = max((abs(x - y) / abs(y) if y else abs(x))
                  for x, y in zip(f["values"], ref_vals[1]))
        if err > 0:
            (notes if s == "vm" and err < 1e-9 else warnings).append(
                "%s (a): values differ from %s's, max relative error %.1e%s" % (
                NAMES[s], NAMES[ref_vals[0]], err,
                " (VM stores ~12 significant digits)" if s == "vm" else ""))
    for k in ("b", "c"):
        for s in systems:
            f = facts(s, k)
            if f is not None and not (BUCKETS // 2 <= f.get("buckets", 0) <= BUCKETS * 3 // 2):
                warnings.append("%s (%s): %s buckets, want ~%d" % (NAMES[s], k,
                                                                   f.get("buckets"), BUCKETS))
    maxes = {s: facts(s, "c")["max"] for s in systems
             if facts(s, "c") and facts(s, "c").get("max") is not None}
    # Bucket edges differ between systems, so the largest bucket mean may too.
    if maxes and max(maxes.values()) - min(maxes.values()) > 0.25 * max(maxes.values()):
        warnings.append("(c) largest per-bucket max of rank means differs > 25 %: " + ", ".join(
            "%s %r" % (NAMES[s], v) for s, v in maxes.items()))
    tops = {s: facts(s, "d").get("top") for s in systems if facts(s, "d")}
    for s, t in tops.items():
        if not t or len(t) != 5:
            warnings.append("%s (d): top list %r is not 5 ranks" % (NAMES[s], t))
    if len({tuple(sorted(t or [])) for t in tops.values()}) > 1:
        warnings.append("(d) top-5 ranks disagree: " + ", ".join(
            "%s %s" % (NAMES[s], t) for s, t in tops.items()))
    return tops


def fmt_num(v, unit=""):
    if v is None:
        return "n/a"
    if abs(v) >= 100:
        s = "{:,.0f}".format(v)
    elif abs(v) >= 10:
        s = "%.1f" % v
    else:
        s = "%.2f" % v
    return s + unit


def ratio(rdb, peer, higher_better):
    if rdb is None or peer is None or rdb <= 0 or peer <= 0:
        return "n/a"
    return "%.2fx" % (rdb / peer if higher_better else peer / rdb)


def fnum(kv, key):
    v = kv.get(key)
    try:
        return float(v) if v not in (None, "") else None
    except ValueError:
        return None


def load_warning(name, kv, warnings, what="the load"):
    """Flags a load whose stored data may differ from what was sent: write
    errors (bodies missing) or resends (bodies rdb-load wrote again after a
    timeout, reset or bad answer, which the server may hold twice)."""
    errors, resends = fnum(kv, "errors") or 0, fnum(kv, "resends") or 0
    if errors > 0 or resends > 0:
        warnings.append("%s: %s had %d write error(s) and %d resend(s): the data stored may "
                        "miss or duplicate bodies; do not compare its figures"
                        % (name, what, errors, resends))


def cmd_table(a):
    systems = a.systems.split(",")
    info = read_kv(os.path.join(a.dir, "info"))
    kv = {s: read_kv(os.path.join(a.dir, s + ".kv")) for s in systems}
    q = {}
    for s in systems:
        p = os.path.join(a.dir, s + ".q.json")
        if os.path.exists(p):
            with open(p) as f:
                q[s] = json.load(f)
    sink = read_kv(os.path.join(a.dir, "sink.kv"))
    warnings, notes = [], []
    tops = check(systems, q, info, warnings, notes)
    points = float(info.get("points", 0)) or None

    rows = []  # (label, {system: (value, text)}, higher_better or None)

    def per_point(s, key):
        v = fnum(kv[s], key)
        return v / fnum(kv[s], "points") if v is not None and fnum(kv[s], "points") else None

    def add(label, getter, unit="", higher_better=None, note=None):
        cells = {}
        for s in systems:
            v = getter(s)
            text = note(s) if note and note(s) else fmt_num(v, unit)
            cells[s] = (v if not (note and note(s)) else None, text)
        rows.append((label, cells, higher_better))

    def ingest_note(s):
        return kv[s].get("ingest_note") or None

    add("ingest points/s (HTTP, line protocol)", lambda s: fnum(kv[s], "points_per_s"),
        higher_better=True, note=ingest_note)
    add("ingest seconds", lambda s: fnum(kv[s], "seconds"), " s", note=ingest_note)
    add("write errors / retries / resends", lambda s: None,
        note=lambda s: "%s / %s / %s" % (kv[s].get("errors", "n/a"), kv[s].get("retries", "n/a"),
                                         kv[s].get("resends") or "n/a"))
    for s in systems:
        load_warning(NAMES[s], kv[s], warnings)
    add("bytes/point on disk, settled + clean stop (du -sb)",
        lambda s: per_point(s, "du_after"), higher_better=False)
    add("bytes/point on disk, same, allocated blocks (du -sB1)",
        lambda s: per_point(s, "du_alloc_after"), higher_better=False)
    # No ratio: at this moment the systems are not in comparable states
    # (VM holds the fresh data in memory only, not yet durable; rankdb has
    # it in its WAL, durable; InfluxDB in its WAL and cache).
    add("bytes/point on disk right after ingest (du -sb)",
        lambda s: per_point(s, "du_ingest"))
    add("bytes/point on disk settled, before stop (du -sb)",
        lambda s: per_point(s, "du_before"), higher_better=False)
    add("settle (flush/merge/compact) before stop", lambda s: fnum(kv[s], "settle_s"), " s")
    add("peak RSS during ingest (VmHWM)", lambda s: fnum(kv[s], "hwm_kb") and
        fnum(kv[s], "hwm_kb") / 1024, " MiB", higher_better=False)
    add("stop (signal -> exit)", lambda s: fnum(kv[s], "stop_s"), " s")
    for k in QUERIES:
        def lat(s, k=k, key="median_ms"):
            r = q.get(s, {}).get(k, {})
            return r.get(key)

        def lat_note(s, k=k):
            r = q.get(s, {}).get(k)
            if r is None:
                return "n/a (not run)"
            return None if "median_ms" in r else r.get("status", "n/a")
        add(QUERY_TITLES[k] + " median", lat, " ms", higher_better=False, note=lat_note)
        add(QUERY_TITLES[k] + " p90", lambda s, k=k: lat(s, k, "p90_ms"), " ms",
            note=lat_note)
        if any(q.get(s, {}).get(k, {}).get("reps", a.reps) != a.reps for s in systems
               if "reps" in q.get(s, {}).get(k, {})):
            add(QUERY_TITLES[k] + " runs", lambda s: None,
                note=lambda s, k=k: str(q.get(s, {}).get(k, {}).get("reps", "n/a")))

    peers = [s for s in systems if s != "rankdb"]
    head = ["metric"] + [NAMES[s] for s in systems]
    if "rankdb" in systems:
        head += ["rankdb vs %s" % NAMES[p] for p in peers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, cells, hb in rows:
        line = [label] + [cells[s][1] for s in systems]
        if "rankdb" in systems:
            for p in peers:
                line.append(ratio(cells["rankdb"][0], cells[p][0], hb) if hb is not None
                            else "")
        lines.append("| " + " | ".join(line) + " |")

    out = []
    out.append("### Side-by-side: size=%s (%s ranks x %s metrics x %s steps = %s points), "
               "%s connections, %s records/body, %s query repetitions" % (
                   a.size, info.get("ranks"), info.get("metrics"), info.get("steps"),
                   info.get("points"), a.connections, a.batch_records, a.reps))
    out.append("")
    out.append("Ratios: >1x = rankdb better (throughput rankdb/peer; bytes, RSS and latency "
               "peer/rankdb).")
    out.append("")
    out += lines
    out.append("")
    out.append("- loader ceiling (rdb-load --sink, line protocol): %s points/s" %
               fmt_num(fnum(sink, "points_per_s")))
    if points:
        out.append("- line protocol on the wire: %s bytes/point" %
                   fmt_num(fnum(sink, "body_bytes") / points if fnum(sink, "body_bytes")
                           else None))
    if "rankdb" in systems:
        rk = kv["rankdb"]
        if rk.get("chunks_index"):
            out.append("- rankdb chunks + index only: %s bytes/point" %
                       fmt_num(per_point("rankdb", "chunks_index")))
    for s in systems:
        if kv[s].get("note"):
            out.append("- %s: %s" % (NAMES[s], kv[s]["note"]))
    if tops:
        out.append("- (d) top-5 ranks: " + ", ".join("%s %s" % (NAMES[s], t)
                                                     for s, t in tops.items()))
    for n in notes:
        out.append("- " + n)
    out.append("- machine: %s" % a.machine)
    for w in warnings:
        out.append("- **WARNING**: " + w)
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    with open(a.out, "w") as f:
        f.write(text)
    for w in warnings:
        print("peers: warning: " + w, file=sys.stderr)


NAMES = {"rankdb": "rankdb", "vm": "VictoriaMetrics", "influx": "InfluxDB"}


def median(v):
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def cmd_shape_table(a):
    """Per-rank ingest and many-connection tables: every run of every system
    (runs alternate between systems), the median, ratios against rankdb."""
    systems = a.systems.split(",")
    runs = {s: [read_kv(p) for p in sorted(glob.glob(os.path.join(a.dir, s + ".run*.kv")))]
            for s in systems}
    if a.shape == "per-rank":
        title = ("### Per-rank ingest: %s connections, one record (%s metrics) per POST, %s records, "
                 "%d run(s) per system, alternating" % (a.connections, a.metrics, a.records,
                                                       max(len(r) for r in runs.values())))
        rows = [("ingest points/s (median)", "points_per_s", True, ""),
                ("requests/s (median)", "requests_per_s", True, ""),
                ("ack latency p50 (median of runs)", "p50_ms", False, " ms"),
                ("ack latency p99 (median of runs)", "p99_ms", False, " ms"),
                ("server CPU per request (median)", "cpu_us_per_req", False, " us"),
                ("loader (rdb-load) CPU per request (median)", "loader_cpu_us_per_req", None, " us"),
                ("loader runnable without a CPU (median)", "loader_runq_s", None, " s"),
                ("write errors (all runs)", "errors", None, ""),
                ("resends that may duplicate a body (all runs)", "resends", None, "")]
    else:
        title = ("### Many ranks at once: %s keep-alive connections, each POSTing one step (%s metrics) "
                 "per second for %s s" % (a.connections, a.metrics, a.duration_s))
        rows = [("acks/s (expected %s)" % a.connections, "acks_per_s", True, ""),
                ("ack latency p50, steps after the first", "p50_ms", False, " ms"),
                ("ack latency p99, steps after the first", "p99_ms", False, " ms"),
                ("ack latency max", "max_ms", None, " ms"),
                ("first step (creates the series) p99", "first_step_p99_ms", None, " ms"),
                ("server CPU (% of one core)", "server_cpu_pct", False, " %"),
                ("server CPU per ack", "server_cpu_us_per_ack", False, " us"),
                ("server threads waiting for a CPU (runqueue)", "server_runq_wait_s", None, " s"),
                ("errors / non-2xx / reconnects", None, None, "")]
    peers = [s for s in systems if s != "rankdb"]
    out = [title, "",
           "| figure | " + " | ".join(NAMES[s] for s in systems) + "".join(
               " | rankdb vs %s" % NAMES[p] for p in peers) + " |",
           "|---" * (1 + len(systems) + (len(peers) if "rankdb" in systems else 0)) + "|"]
    for label, key, higher, unit in rows:
        cells, vals = [], {}
        for s in systems:
            if key is None:
                cells.append(" / ".join(str(sum(int(fnum(r, k) or 0) for r in runs[s]))
                                        for k in ("errors", "non2xx", "reconnects")))
                continue
            per_run = [fnum(r, key) for r in runs[s]]
            if key in ("errors", "resends"):
                v = sum(x or 0 for x in per_run)
                cells.append("%d" % v if any(x is not None for x in per_run) else "n/a")
                continue
            v = median(per_run)
            vals[s] = v
            shown = fmt_num(v, unit) if v is not None else "n/a"
            if len(per_run) > 1 and v is not None:
                shown += " (runs: " + ", ".join(fmt_num(x, unit) for x in per_run if x is not None) + ")"
            cells.append(shown)
        if "rankdb" in systems:
            for p in peers:
                cells.append(ratio(vals.get("rankdb"), vals.get(p), higher) if higher is not None else "")
        out.append("| " + label + " | " + " | ".join(cells) + " |")
    if a.shape == "per-rank" and runs.get("rankdb"):
        rps = [fnum(r, "records_per_sync") for r in runs["rankdb"]]
        out += ["", "- rankdb WAL records per fdatasync: " + ", ".join(
            "%.1f" % x for x in rps if x is not None) + " (every acknowledgement is durable; "
            "VictoriaMetrics and InfluxDB do not fsync before answering)"]
    warnings = []
    for s in systems:
        for i, r in enumerate(runs[s]):
            load_warning(NAMES[s], r, warnings, "run %d" % (i + 1))
    out += ["- machine: " + a.machine]
    out += ["- **WARNING**: " + w for w in warnings] + [""]
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    with open(a.out, "w") as f:
        f.write(text)
    for w in warnings:
        print("peers: warning: " + w, file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pq = sub.add_parser("query")
    pq.add_argument("--system", choices=["rankdb", "vm", "influx"], required=True)
    pq.add_argument("--port", type=int, required=True)
    pq.add_argument("--info", required=True)
    pq.add_argument("--reps", type=int, default=20)
    pq.add_argument("--budget-s", type=float, default=30.0,
                    help="stop repeating a query after this many seconds (>= 3 runs)")
    pq.add_argument("--out", required=True)
    pq.add_argument("--metric-prefix", default="train.")
    pt = sub.add_parser("table")
    pt.add_argument("--size", required=True)
    pt.add_argument("--dir", required=True)
    pt.add_argument("--systems", required=True)
    pt.add_argument("--out", required=True)
    pt.add_argument("--connections", default="?")
    pt.add_argument("--batch-records", default="?")
    pt.add_argument("--reps", type=int, default=0)
    pt.add_argument("--machine", default="?")
    ps = sub.add_parser("shape-table")
    ps.add_argument("--shape", choices=["per-rank", "many-conns"], required=True)
    ps.add_argument("--dir", required=True)
    ps.add_argument("--systems", required=True)
    ps.add_argument("--out", required=True)
    ps.add_argument("--connections", default="?")
    ps.add_argument("--metrics", default="32")
    ps.add_argument("--records", default="?")
    ps.add_argument("--duration-s", default="?")
    ps.add_argument("--machine", default="?")
    a = ap.parse_args()
    if a.cmd == "query":
        cmd_query(a)
    elif a.cmd == "shape-table":
        cmd_shape_table(a)
    else:
        cmd_table(a)


if __name__ == "__main__":
    main()
