"""Restart, kill -9 durability, chunk corruption."""

import json
import os
import threading
import time

from harness import (T0, Server, jobs_brief, jobs_stored, assert_error, assert_series_equal, decode_value, expected_series,
                     f32, fmt_bits, parse_segment, segment_files, series_map)

BIG = ["--max-query-points", "10000000"]


def _all(s, job, metrics):
    return series_map(s.query_ok(job=job, metric=",".join(metrics)))


def test_sigterm_restart_same_results():
    s = Server(BIG).start()
    recs = []
    for job in ("ra", "rb"):
        for step in range(200):
            for rank in (0, 1, 2, "job"):
                recs.append({"job": job, "rank": rank, "step": step, "attempt": step // 150,
                             "timestamp": T0 + step * 1000 + (3 if rank == "job" else rank),
                             "metrics": {"loss": f32(2.0 / (step + 1)), "lr": 1e-3 * step, "n": step}})
    for i in range(0, len(recs), 300):
        s.write_ok(recs[i:i + 300])
    before = {j: _all(s, j, ["loss", "lr", "n"]) for j in ("ra", "rb")}
    for j in ("ra", "rb"):
        assert_series_equal(before[j], expected_series(recs, job=j), "before restart")
    listings = [s.get_json(p) for p in ("/api/v1/jobs", "/api/v1/jobs/ra/metrics", "/api/v1/jobs/rb/ranks")]
    listings[0] = (listings[0][0], jobs_stored(listings[0][1]))
    s.stop()
    assert os.path.isfile(os.path.join(s.data_dir, "FORMAT")), os.listdir(s.data_dir)
    assert segment_files(s.data_dir), "no chunks/seg-*.dat after SIGTERM: %r" % os.listdir(s.data_dir)
    s.start()
    for j in ("ra", "rb"):
        assert_series_equal(_all(s, j, ["loss", "lr", "n"]), before[j], "after restart")
    after = [s.get_json(p) for p in ("/api/v1/jobs", "/api/v1/jobs/ra/metrics", "/api/v1/jobs/rb/ranks")]
    after[0] = (after[0][0], jobs_stored(after[0][1]))
    assert after == listings
    # and once more, without writing in between
    s.restart()
    for j in ("ra", "rb"):
        assert_series_equal(_all(s, j, ["loss", "lr", "n"]), before[j], "after second restart")
    s.stop()


def test_many_points_span_chunks_and_head():
    s = Server(BIG + ["--chunk-max-points", "1000"]).start()
    n = 20_500
    recs = [{"job": "many", "rank": 0, "step": i, "timestamp": T0 + i * 1_000_000,
             "metrics": {"loss": f32(10.0 / (1 + i * 0.01))}} for i in range(n)]
    for i in range(0, n, 500):
        s.write_ok(recs[i:i + 500])
    want = expected_series(recs)
    got = _all(s, "many", ["loss"])
    assert_series_equal(got, want, "before restart")
    windows = [(990, 1010), (999, 1000), (1000, 1000), (19_990, 20_010), (20_000, 20_499), (0, 0), (20_499, 30_000)]

    def check_windows(what):
        for a, b in windows:
            g = series_map(s.query_ok(job="many", metric="loss", step_from=a, step_to=b))
            assert_series_equal(g, expected_series(recs, step_from=a, step_to=b), "%s steps %d..%d" % (what, a, b))
            g = series_map(s.query_ok(job="many", metric="loss", **{"from": T0 + a * 1_000_000,
                                                                     "to": T0 + b * 1_000_000}))
            assert_series_equal(g, expected_series(recs, tfrom=T0 + a * 1_000_000, tto=T0 + b * 1_000_000),
                                "%s time of steps %d..%d" % (what, a, b))

    check_windows("before restart")
    s.stop()
    s.start()
    assert_series_equal(_all(s, "many", ["loss"]), want, "after restart")
    check_windows("after restart")
    # more points, then a crash: the new ones come back from the WAL
    more = [{"job": "many", "rank": 0, "step": i, "timestamp": T0 + i * 1_000_000,
             "metrics": {"loss": f32(10.0 / (1 + i * 0.01))}} for i in range(n, n + 1500)]
    for i in range(0, len(more), 500):
        s.write_ok(more[i:i + 500])
    s.kill9()
    s.start()
    assert_series_equal(_all(s, "many", ["loss"]), expected_series(recs + more), "after kill -9")
    s.stop()


# ---------------------------------------------------------------------------
# kill -9 while 6 clients write


NTHREADS = 6
BAD_EVERY = 9  # every 9th batch of a thread carries a bad record


def _value(t, step, k):
    # distinct, exactly representable, not monotone: catches mixed-up points
    return ((step * 2654435761 + t * 40503 + k * 7) % 1000003) / 64.0 - 7000.0


def _batch(t, b):
    """Batch b of thread t: records with steps unique over (t, b)."""
    nrec = 1 + (b % 4)
    recs = []
    for i in range(nrec):
        step = b * 10 + i
        recs.append({"job": "crash", "rank": t, "step": step, "timestamp": T0 + step * 1000 + t,
                     "metrics": {"a": _value(t, step, 0), "b": _value(t, step, 1)}})
    bad = b % BAD_EVERY == BAD_EVERY - 1
    if bad:
        # the bad record comes last, after good ones: nothing of the batch may be stored
        kind = b // BAD_EVERY % 3
        r = {"job": "crash", "rank": t, "step": b * 10 + 9, "timestamp": T0 + (b * 10 + 9) * 1000 + t,
             "metrics": {"a": 1.0}}
        if kind == 0:
            r["rank"] = -1
        elif kind == 1:
            r["metrics"] = {"a": True}
        else:
            r["bogus_field"] = 1
        recs.append(r)
    return recs, bad


class _Writer(threading.Thread):
    def __init__(self, srv, t, first_batch, stop):
        super().__init__(daemon=True)
        self.srv, self.t, self.b, self.stop_ev = srv, t, first_batch, stop
        self.acked, self.rejected, self.unknown, self.unexpected = [], [], [], []
        self.sent = []

    def run(self):
        failures = 0
        while not self.stop_ev.is_set() and failures < 50:
            recs, bad = _batch(self.t, self.b)
            self.sent.append(self.b)
            try:
                st, _, body = self.srv.post("/api/v1/write", json.dumps(recs),
                                            keepalive=True, timeout=30)
            except Exception:
                self.unknown.append(self.b)  # in flight when the server died
                failures += 1
                time.sleep(0.01)
                self.b += 1
                continue
            if st == 200 and not bad:
                self.acked.append(self.b)
            elif 400 <= st < 500 and bad:
                self.rejected.append(self.b)
            elif st in (429, 503) and not bad:
                self.unknown.append(self.b)  # overloaded: refused, treat as not acknowledged
            else:
                self.unexpected.append((self.b, st, body[:300]))
            self.b += 1


def _crash_round(s, first_batch, min_acked=60, write_s=2.0):
    stop = threading.Event()
    ws = [_Writer(s, t, first_batch, stop) for t in range(NTHREADS)]
    for w in ws:
        w.start()
    t_start = time.monotonic()
    # let the clients run for a couple of seconds and until enough batches
    # were acknowledged (a progress condition, not a timing assertion)
    while True:
        time.sleep(0.05)
        acked = sum(len(w.acked) for w in ws)
        if time.monotonic() - t_start >= write_s and acked >= min_acked:
            break
        if time.monotonic() - t_start > 60:
            break
        if any(w.unexpected for w in ws):
            break
    s.kill9()  # mid-write: the clients are still sending
    stop.set()
    for w in ws:
        w.join(60)
        assert not w.is_alive(), "writer thread hangs"
    for w in ws:
        assert not w.unexpected, "thread %d got unexpected answers (batch, status, body): %r" % (
            w.t, w.unexpected[:5])
    assert sum(len(w.acked) for w in ws) >= 10, "too few acknowledged batches to test anything"
    assert sum(len(w.rejected) for w in ws) >= 1, "no deliberately bad batch was answered"
    return ws


def _verify(s, writers_by_round):
    """Every acknowledged point exactly once with its value; nothing of
    rejected batches; in-flight batches may or may not be there but, if
    present, with the right values and without duplicates."""
    errors = []
    for t in range(NTHREADS):
        obj = s.query_ok(job="crash", metric="a,b", rank=str(t))
        got = {}  # (metric, step) -> [values]
        for ser in obj["series"]:
            assert ser["rank"] == t and ser["metric"] in ("a", "b"), (ser["rank"], ser["metric"])
            for ts, step, v in zip(ser["timestamps"], ser["steps"], ser["values"]):
                got.setdefault((ser["metric"], step), []).append((ts, decode_value(v)))
        acked, rejected, sent = set(), set(), set()
        for ws in writers_by_round:
            w = ws[t]
            acked |= set(w.acked)
            rejected |= set(w.rejected)
            sent |= set(w.sent)
        seen_steps = set()
        for b in sorted(sent):
            recs, bad = _batch(t, b)
            for r in recs:
                step = r["step"]
                for m in ("a", "b"):
                    if m not in r["metrics"] or not isinstance(r["metrics"][m], float):
                        continue
                    want = (r["timestamp"], decode_value(r["metrics"][m]))
                    pts = got.get((m, step), [])
                    seen_steps.add((m, step))
                    if b in acked:
                        if pts != [want]:
                            errors.append("rank %d batch %d (acknowledged) %s step %d: got %r, expected %r"
                                          % (t, b, m, step, [(x, fmt_bits(y)) for x, y in pts],
                                             (want[0], fmt_bits(want[1]))))
                    elif b in rejected:
                        if pts:
                            errors.append("rank %d batch %d (rejected with 4xx) %s step %d is stored: %r"
                                          % (t, b, m, step, pts))
                    elif pts and pts != [want]:
                        errors.append("rank %d batch %d (in flight) %s step %d: got %r, expected none or %r"
                                      % (t, b, m, step, pts, want))
        extra = set(got) - seen_steps
        if extra:
            errors.append("rank %d: points that no client sent: %r" % (t, sorted(extra)[:10]))
        if len(errors) > 20:
            break
    assert not errors, "%d problems:\n%s" % (len(errors), "\n".join(errors[:30]))


def _kill9_durability(flags):
    s = Server(BIG + flags).start()
    r1 = _crash_round(s, first_batch=0)
    s.start()
    _verify(s, [r1])
    # a second crash on the recovered data directory, new batches
    first = max(max(w.sent) for w in r1) + 1
    r2 = _crash_round(s, first_batch=first)
    s.start()
    _verify(s, [r1, r2])
    # clean restart keeps the same result
    s.restart()
    _verify(s, [r1, r2])
    s.stop()


def test_kill9_durability_fdatasync():
    _kill9_durability(["--sync-policy", "fdatasync"])


def test_kill9_durability_sync_none():
    _kill9_durability(["--sync-policy", "none"])


def _wal_sizes(s):
    d = os.path.join(s.data_dir, "wal")
    sizes = {}
    for f in os.listdir(d):
        if f.endswith(".log"):
            try:  # a checkpoint may delete it meanwhile
                sizes[f] = os.path.getsize(os.path.join(d, f))
            except FileNotFoundError:
                pass
    return sizes


def _preallocated_wal(s):
    """Name of a WAL file zero-filled ahead (1 MiB or more, its last bytes
    zeros), or None."""
    d = os.path.join(s.data_dir, "wal")
    for f, size in _wal_sizes(s).items():
        if size < 1 << 20:
            continue
        try:
            with open(os.path.join(d, f), "rb") as fh:
                fh.seek(size - 4096)
                if fh.read(4096) == bytes(4096):
                    return f
        except FileNotFoundError:
            pass
    return None


def test_kill9_into_a_preallocated_wal_file():
    """A WAL file made ahead of its rotation is zero-filled (docs/FORMAT.md,
    "Preallocated files"): every acknowledged write into one survives kill -9,
    and its zeros are neither replayed nor taken for damage."""
    # A generation past 1 MiB, so that the next file is zero-filled. Compact
    # WAL records take ~14 bytes a point and the head checkpoints at
    # wal_rotate_bytes / 64 points, so a generation reaches about a fifth of
    # wal_rotate_bytes: 8M makes ~1.8 MiB ones.
    s = Server(BIG + ["--wal-rotate-bytes", "8M"]).start()
    fill = [{"job": "fill", "rank": r, "step": 0, "timestamp": T0 + r,
             "metrics": {"m%d" % k: float(k) for k in range(32)}} for r in range(200)]
    deadline = time.monotonic() + 60
    step = 0
    while _preallocated_wal(s) is None and time.monotonic() < deadline:
        step += 1
        for r in fill:
            r["step"], r["timestamp"] = step, T0 + step * 1000 + r["rank"]
        s.write_ok(fill)
        time.sleep(0.01)
    assert _preallocated_wal(s) is not None, \
        "no preallocated WAL file appeared: %r" % _wal_sizes(s)
    r1 = _crash_round(s, first_batch=0)
    s.start()
    _verify(s, [r1])
    st, _, body = s.get("/metrics")
    text = body.decode()
    assert "rankdb_wal_damaged_ranges 0\n" in text, text
    assert "this is damage" not in s.log_text()  # the zeros are the file's end
    got = s.query_ok(job="fill", metric="m3")
    assert {len(x["steps"]) for x in got["series"]} == {step}, "filler points lost"
    s.stop()


# ---------------------------------------------------------------------------
# kill -9 during a per-rank load after WAL rotations: every POST is one step
# of one rank (32 metrics), as a training job sends them. WAL records name
# their series by ids that each WAL file defines (docs/FORMAT.md, record
# types 4 and 5); after rotations (new files, definitions written again)
# and a crash, every acknowledged point is back, none naming an undefined id.

PR_RANKS = 16
PR_METRICS = 32


def _pr_value(rank, step, m):
    return ((step * 2654435761 + rank * 40503 + m * 7) % 1000003) / 64.0 - 7000.0


def _pr_metric(m):
    return "train/metric_%02d" % m


class _RankWriter(threading.Thread):
    def __init__(self, srv, rank, stop):
        super().__init__(daemon=True)
        self.srv, self.rank, self.stop_ev = srv, rank, stop
        self.acked, self.unexpected = [], []

    def run(self):
        step = 0
        while not self.stop_ev.is_set():
            rec = {"job": "perrank", "rank": self.rank, "step": step, "attempt": step // 300,
                   "timestamp": T0 + step * 1_000_000 + self.rank,
                   "metrics": {_pr_metric(m): _pr_value(self.rank, step, m) for m in range(PR_METRICS)}}
            try:
                st, _, body = self.srv.post("/api/v1/write", json.dumps([rec]), keepalive=True, timeout=30)
            except Exception:
                return  # the server died with this step in flight
            if st == 200:
                self.acked.append(step)
            elif st not in (429, 503):
                self.unexpected.append((step, st, body[:300]))
                return
            step += 1


def _wal_gen(s):
    names = [f for f in os.listdir(os.path.join(s.data_dir, "wal")) if f.startswith("wal-") and f.endswith(".log")]
    return max(int(f[4:-4], 16) for f in names) if names else 0


def test_kill9_per_rank_load_after_wal_rotations():
    s = Server(BIG + ["--wal-rotate-bytes", "1M"]).start()
    stop = threading.Event()
    ws = [_RankWriter(s, r, stop) for r in range(PR_RANKS)]
    for w in ws:
        w.start()
    # until the WAL was rotated at least twice (1 MiB files) and the writers
    # went on after that (a progress condition, not a timing one)
    first_gen = _wal_gen(s)
    deadline = time.monotonic() + 120
    while _wal_gen(s) < first_gen + 2 and time.monotonic() < deadline and not any(w.unexpected for w in ws):
        time.sleep(0.05)
    rotated = _wal_gen(s) - first_gen
    acked_then = sum(len(w.acked) for w in ws)
    while sum(len(w.acked) for w in ws) < acked_then + 200 and time.monotonic() < deadline:
        time.sleep(0.02)
    s.kill9()
    stop.set()
    for w in ws:
        w.join(60)
        assert not w.is_alive(), "writer thread hangs"
        assert not w.unexpected, "rank %d got unexpected answers: %r" % (w.rank, w.unexpected[:3])
    assert rotated >= 2, "the load rotated the WAL %d times, not twice" % rotated
    s.start()
    text = s.get("/metrics")[2].decode()
    assert "rankdb_wal_undefined_records 0\n" in text, text
    assert "rankdb_wal_damaged_ranges 0\n" in text, text
    errors = []
    for w in ws:
        obj = s.query_ok(job="perrank", rank=str(w.rank), metric=",".join(_pr_metric(m) for m in range(PR_METRICS)))
        got = {}
        for ser in obj["series"]:
            got[ser["metric"]] = {st: (ts, decode_value(v))
                                  for ts, st, v in zip(ser["timestamps"], ser["steps"], ser["values"])}
            steps = ser["steps"]
            if len(set(steps)) != len(steps):
                errors.append("rank %d %s: duplicated steps" % (w.rank, ser["metric"]))
        for m in range(PR_METRICS):
            pts = got.get(_pr_metric(m), {})
            for step in w.acked:
                want = (T0 + step * 1_000_000 + w.rank, decode_value(_pr_value(w.rank, step, m)))
                if pts.get(step) != want:
                    errors.append("rank %d %s step %d (acknowledged): got %r, expected %r"
                                  % (w.rank, _pr_metric(m), step, pts.get(step), want))
                    break
    assert not errors, "%d problems:\n%s" % (len(errors), "\n".join(errors[:20]))
    s.stop()


# ---------------------------------------------------------------------------
# kill -9 while series are being created: every batch brings new series
# (a job's first steps), so the writes wait for the series creator thread;
# every acknowledged batch's series and points are there after restart.

NEW_PER_BATCH = 4


def _new_series_batch(t, b):
    return [{"job": "fresh", "rank": t, "step": b, "timestamp": T0 + b * 1000 + t,
             "metrics": {"n%d_%d" % (b, k): _value(t, b, k) for k in range(NEW_PER_BATCH)}}]


class _NewSeriesWriter(threading.Thread):
    def __init__(self, srv, t, stop):
        super().__init__(daemon=True)
        self.srv, self.t, self.stop_ev = srv, t, stop
        self.acked, self.sent, self.unexpected = [], [], []

    def run(self):
        b = 0
        failures = 0
        while not self.stop_ev.is_set() and failures < 50:
            self.sent.append(b)
            try:
                st, _, body = self.srv.post("/api/v1/write", json.dumps(_new_series_batch(self.t, b)),
                                            keepalive=True, timeout=30)
            except Exception:
                failures += 1  # in flight when the server died
                time.sleep(0.01)
                b += 1
                continue
            if st == 200:
                self.acked.append(b)
            elif st not in (429, 503):
                self.unexpected.append((b, st, body[:300]))
            b += 1


def test_kill9_while_series_are_created():
    s = Server(BIG).start()
    stop = threading.Event()
    ws = [_NewSeriesWriter(s, t, stop) for t in range(NTHREADS)]
    for w in ws:
        w.start()
    t_start = time.monotonic()
    while time.monotonic() - t_start < 60:
        time.sleep(0.05)
        if time.monotonic() - t_start >= 1.5 and sum(len(w.acked) for w in ws) >= 60:
            break
    s.kill9()  # the writers are still creating series
    stop.set()
    for w in ws:
        w.join(60)
        assert not w.is_alive(), "writer thread hangs"
        assert not w.unexpected, "unexpected answers (batch, status, body): %r" % w.unexpected[:5]
    assert sum(len(w.acked) for w in ws) >= 10, "too few acknowledged batches to test anything"
    s.start()
    st, listing = s.get_json("/api/v1/jobs/fresh/metrics")
    assert st == 200, (st, listing)
    stored = set(listing["metrics"])
    errors = []
    for w in ws:
        acked = set(w.acked)
        for b in w.acked:
            for k in range(NEW_PER_BATCH):
                if "n%d_%d" % (b, k) not in stored:
                    errors.append("rank %d batch %d (acknowledged): series n%d_%d is missing" % (w.t, b, b, k))
        # batches in flight at the kill may be there or not, but only whole
        names = [n for b in w.sent for n in ["n%d_%d" % (b, k) for k in range(NEW_PER_BATCH)] if n in stored]
        got = {}
        for i in range(0, len(names), 64):
            for ser in s.query_ok(job="fresh", metric=",".join(names[i:i + 64]), rank=str(w.t))["series"]:
                got[ser["metric"]] = list(zip(ser["timestamps"], ser["steps"],
                                              [decode_value(v) for v in ser["values"]]))
        for b in w.sent:
            present = ["n%d_%d" % (b, k) in got for k in range(NEW_PER_BATCH)]
            if any(present) and not all(present):
                errors.append("rank %d batch %d: only some of its series are there: %r" % (w.t, b, present))
            for k in range(NEW_PER_BATCH):
                want = [(T0 + b * 1000 + w.t, b, decode_value(_value(w.t, b, k)))]
                pts = got.get("n%d_%d" % (b, k))
                if (b in acked or pts is not None) and pts != want:
                    errors.append("rank %d batch %d n%d_%d: got %r, expected %r" % (w.t, b, b, k, pts, want))
    assert not errors, "%d problems:\n%s" % (len(errors), "\n".join(errors[:30]))
    s.stop()


# ---------------------------------------------------------------------------
# corruption


def test_corrupted_chunk_checksum():
    s = Server().start()
    series = {}
    for rank in (0, 1):
        recs = [{"job": "cor", "rank": rank, "step": i, "timestamp": T0 + i * 1000 + rank,
                 "metrics": {"temp": 60.0 + (i * 7 + rank) % 13}} for i in range(50)]
        s.write_ok(recs)
        series[rank] = expected_series(recs)
    s.stop()  # seals the head into chunk files
    segs = segment_files(s.data_dir)
    assert segs, "no segment files after SIGTERM"
    chunks = parse_segment(segs[0])
    assert chunks, "no chunk record in %s" % segs[0]
    off, plen = chunks[0]
    assert plen > 4, plen
    pos = off + 48 + plen // 3
    with open(segs[0], "r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0x40]))
    s.start()

    results = {}
    for rank in (0, 1):
        st, obj = s.query(job="cor", metric="temp", rank=str(rank))
        results[rank] = (st, obj)
    bad = [r for r in results if results[r][0] != 200]
    assert len(bad) == 1, "exactly one series must fail after one flipped byte: %r" % {
        r: (results[r][0], results[r][1] if results[r][0] != 200 else "ok") for r in results}
    (b,) = bad
    st, obj = results[b]
    assert_error(st, obj, 500, what="query of corrupted series")
    msg = obj["error"]
    assert "checksum" in msg.lower(), "error does not mention the checksum: %r" % msg
    assert os.path.basename(segs[0]) in msg, "error does not name the segment file %s: %r" % (
        os.path.basename(segs[0]), msg)
    assert "series" not in obj or not obj.get("series"), "no data may accompany the error: %r" % obj
    good = 1 - b
    st, obj = results[good]
    assert_series_equal(series_map(obj), series[good], "other series after corruption")

    st, obj = s.get_json("/healthz")
    assert st == 200, (st, obj)
    # still serving: the corrupted series keeps failing cleanly, the rest works
    st, obj = s.query(job="cor", metric="temp")
    assert_error(st, obj, 500, what="query over both series")
    st, obj = s.query(job="cor", metric="temp", rank=str(good))
    assert st == 200
    assert_series_equal(series_map(obj), series[good], "other series, again")
    st, obj = s.get_json("/api/v1/jobs")
    assert st == 200 and jobs_brief(obj) == {"jobs": [{"job": "cor", "series": 2}]}, obj
    s.write_ok([{"job": "cor2", "rank": 0, "step": 0, "timestamp": T0, "metrics": {"x": 1}}])
    s.query_ok(job="cor2", metric="x")
    s.stop()
