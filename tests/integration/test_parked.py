"""Writes acknowledged when durable without holding an HTTP thread (parked
requests, http_max_parked): many single-record POSTs at once, SIGTERM while
requests wait for their WAL sync, the parked cap."""

import http.client
import json
import re
import signal
import threading
import time

from harness import T0, Server

BIG = ["--max-query-points", "10000000"]


def _metric(text, name):
    m = re.search(r"^%s ([0-9.e+]+)$" % re.escape(name), text, re.M)
    assert m, "%s missing from /metrics" % name
    return float(m.group(1))


def _metrics(s):
    st, _, body = s.request("GET", "/metrics")
    assert st == 200, st
    return body.decode()


def _lp(job, rank, step):
    return "train,job=%s,rank=%d loss=%d.5,step=%di %d\n" % (job, rank, step, step, T0 + step * 1000 + rank)


def _json(job, rank, step):
    return json.dumps([{"job": job, "rank": rank, "step": step, "timestamp": T0 + step * 1000 + rank,
                        "metrics": {"loss": step + 0.5}}])


def _post(conn, job, rank, step, use_lp):
    """One single-record POST on a keep-alive connection: (status, headers, body)."""
    if use_lp:
        conn.request("POST", "/write?precision=ns", _lp(job, rank, step))
    else:
        conn.request("POST", "/api/v1/write", _json(job, rank, step),
                     {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, dict(r.getheaders()), r.read()


def _steps(s, job, rank, use_lp):
    """The steps stored for (job, rank)'s loss, in order, duplicates kept."""
    metric = "train.loss" if use_lp else "loss"
    obj = s.query_ok(job=job, metric=metric, rank=rank)
    out = []
    for ser in obj["series"]:
        out += ser["steps"]
    return out


def test_many_concurrent_single_record_posts_all_stored_once():
    """64 ranks each POST one record per request, half line protocol, half
    JSON, all at once: every request is acknowledged, every record is stored
    exactly once (also after a restart), and the acks were shared syncs."""
    s = Server(BIG).start()
    ranks, steps = 64, 40
    bad = []

    def rank_loop(rank):
        use_lp = rank % 2 == 0
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        for step in range(steps):
            st, _, body = _post(conn, "many", rank, step, use_lp)
            if st not in (200, 204):
                bad.append((rank, step, st, body[:200]))
        conn.close()

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, bad[:5]
    text = _metrics(s)
    assert _metric(text, "rankdb_http_parked_total") == ranks * steps, "every write was parked"
    assert _metric(text, "rankdb_http_parked") == 0
    assert 1 <= _metric(text, "rankdb_http_parked_max") <= ranks
    assert _metric(text, "rankdb_wal_records_total") >= ranks * steps
    assert _metric(text, "rankdb_wal_syncs_total") <= _metric(text, "rankdb_wal_records_total")
    for restart in (False, True):
        if restart:
            s.restart()
        for rank in range(ranks):
            got = _steps(s, "many", rank, rank % 2 == 0)
            assert got == list(range(steps)), "rank %d after restart=%s: %r" % (rank, restart, got)
    s.stop()


def test_sigterm_while_writes_are_parked():
    """SIGTERM while 32 connections keep writing: the server exits cleanly
    (no hang on parked requests), every request got an answer or a closed
    connection, and every acknowledged record is stored after the restart,
    exactly once."""
    s = Server(BIG).start()
    acked = {}  # rank -> steps acknowledged
    lock = threading.Lock()
    stop = threading.Event()

    def rank_loop(rank):
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        step = 0
        while not stop.is_set():
            try:
                st, _, _ = _post(conn, "term", rank, step, True)
            except (OSError, http.client.HTTPException):
                return  # the server went away: no answer, nothing claimed
            if st == 204:
                with lock:
                    acked.setdefault(rank, []).append(step)
            elif st != 503:
                raise AssertionError("rank %d step %d: status %d" % (rank, step, st))
            step += 1

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(32)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while sum(len(v) for v in acked.values()) < 2000 and time.monotonic() < deadline:
        time.sleep(0.05)
    s.signal_stop(signal.SIGTERM, timeout=60)  # exit status 0, within the timeout
    stop.set()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a client got no answer and no close"
    assert sum(len(v) for v in acked.values()) > 0
    s.start()
    for rank, want in acked.items():
        got = _steps(s, "term", rank, True)
        assert len(got) == len(set(got)), "rank %d: a step stored twice: %r" % (rank, got)
        missing = sorted(set(want) - set(got))
        assert not missing, "rank %d: acknowledged steps lost: %r" % (rank, missing[:10])
    s.stop()


def test_parked_cap_answers_503():
    """With http_max_parked = 1, writes arriving while one waits for its
    sync get 503 + Retry-After, counted in /metrics, and are not stored;
    every acknowledged one is stored once."""
    s = Server(BIG + ["--http-max-parked", "1"]).start()
    results = []  # (rank, step, status)
    lock = threading.Lock()
    refused = threading.Event()
    errs = []

    def rank_loop(rank):
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        for step in range(300):
            if refused.is_set() and step >= 20:
                break
            st, hdrs, body = _post(conn, "cap", rank, step, True)
            with lock:
                results.append((rank, step, st))
            if st == 503:
                if hdrs.get("Retry-After") != "1" or b"http_max_parked" not in body:
                    errs.append((hdrs, body[:300]))
                refused.set()
            elif st != 204:
                errs.append((st, body[:300]))
        conn.close()

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errs, errs[:3]
    n503 = sum(1 for r in results if r[2] == 503)
    assert n503 > 0, "no write was refused with 32 writers and http_max_parked = 1"
    text = _metrics(s)
    assert _metric(text, "rankdb_http_parked_refused_total") == n503
    assert _metric(text, "rankdb_http_parked_max") == 1
    for rank in range(32):
        want = sorted(st for r, st, code in results if r == rank and code == 204)
        assert _steps(s, "cap", rank, True) == want, "rank %d" % rank
    s.stop()


def test_sync_none_parks_only_in_the_write_loop():
    """With sync_policy = none, libmicrohttpd's workers answer a write after
    write(2) on their own thread (nothing parked); the write loop parks it
    all the same (a loop thread serves thousands of connections and must
    never wait for the WAL). Everything is stored either way."""
    for loop in ("off", "on"):
        s = Server(BIG + ["--sync-policy", "none", "--http-write-loop", loop]).start()
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        for step in range(50):
            st, _, body = _post(conn, "none", 0, step, step % 2 == 0)
            assert st in (200, 204), (st, body)
        parked = _metric(_metrics(s), "rankdb_http_parked_total")
        if loop == "off":
            assert parked == 0, parked
        else:
            assert parked == 50, parked
        assert _steps(s, "none", 0, True) == list(range(0, 50, 2))
        assert _steps(s, "none", 0, False) == list(range(1, 50, 2))
        s.stop()
