"""GET /api/v1/jobs answers from a per-job summary the server keeps up to
date on writes (storage/sto.h sto_job_extent_get): after writes into an
existing summary, a checkpoint, a retention run, a job delete and re-write,
a compaction and a kill -9 (WAL replay), the listing must equal what a
freshly started server computes by walking every series, and the values
written where the test knows them."""

import json
import time

from harness import Server, jobs_stored

TOKEN = "s3cret-token-for-tests"
FLAGS = ["--admin-token", TOKEN, "--chunk-max-points", "100"]


def admin(s, method, path):
    st, _, body = s.request(method, "/api/v1/admin/" + path,
                            headers={"Authorization": "Bearer " + TOKEN})
    return st, json.loads(body) if body else None


def write(s, job, steps, t0, ranks):
    recs = [{"job": job, "rank": r, "step": i, "timestamp": t0 + i * 1_000_000 + r,
             "metrics": {"loss": 1.0 / (1 + i), "lr": 1e-4}}
            for i in steps for r in ranks]
    for k in range(0, len(recs), 2000):
        s.write_ok(recs[k:k + 2000])


def listing(s):
    st, obj = s.get_json("/api/v1/jobs")
    assert st == 200, obj
    return jobs_stored(obj)


def entry(lst, job):
    for j in lst["jobs"]:
        if j["job"] == job:
            return j
    return None


def same_after_restart(s, lst, kill=False):
    if kill:
        s.kill9()
        s.start()
    else:
        s.restart()
    fresh = listing(s)
    assert fresh == lst, (lst, fresh)


def test_jobs_listing_equals_a_fresh_walk_after_every_event():
    s = Server(FLAGS).start()
    now = time.time_ns()
    old, recent = now - 10 * 86400 * 10**9, now - 3600 * 10**9

    # writes into a summary that exists (the first listing builds it)
    write(s, "a", range(0, 300), old, (0, 1))
    assert admin(s, "POST", "checkpoint")[0] == 200  # a's old points: chunks of their own
    write(s, "b", range(0, 300), recent, (0, 1, 2))
    first = listing(s)
    assert entry(first, "a")["last_ts"] == old + 299 * 1_000_000 + 1, first
    write(s, "a", range(300, 400), recent, (0, 1, 2, 3))  # later, two more ranks
    write(s, "b", range(1000, 1001), old, (0,))  # earlier than all of b, highest step
    lst = listing(s)
    a, b = entry(lst, "a"), entry(lst, "b")
    assert (a["first_ts"], a["last_ts"], a["last_step"], a["ranks"]) == \
        (old, recent + 399 * 1_000_000 + 3, 399, 4), a
    assert (b["first_ts"], b["last_ts"], b["last_step"], b["ranks"]) == \
        (old + 1000 * 1_000_000, recent + 299 * 1_000_000 + 2, 1000, 3), b
    same_after_restart(s, lst)

    # a checkpoint moves every point into chunks: the same listing
    listing(s)
    assert admin(s, "POST", "checkpoint")[0] == 200
    assert listing(s) == lst
    same_after_restart(s, lst)

    # retention drops a's old chunks (its old points fill chunks of their own)
    listing(s)
    assert admin(s, "PUT", "retention/a?seconds=86400")[0] == 200
    st, r = admin(s, "POST", "retention/run")
    assert st == 200 and r["points"] == 600 * 2, r
    lst = listing(s)
    a = entry(lst, "a")
    assert (a["first_ts"], a["last_step"]) == (recent + 300 * 1_000_000, 399), a
    same_after_restart(s, lst)

    # delete b and write it again, smaller
    listing(s)
    assert admin(s, "DELETE", "jobs/b")[0] == 200
    assert entry(listing(s), "b") is None
    write(s, "b", range(5, 10), now, (7,))
    lst = listing(s)
    b = entry(lst, "b")
    assert (b["first_ts"], b["last_ts"], b["last_step"], b["ranks"]) == \
        (now + 5 * 1_000_000 + 7, now + 9 * 1_000_000 + 7, 9, 1), b
    same_after_restart(s, lst)

    # a compaction merges the small chunks: the same listing
    listing(s)
    st, c = admin(s, "POST", "compact?min_live_pct=100")
    assert st == 200, c
    assert listing(s) == lst

    # points only in the head and the WAL, then kill -9: the replay
    listing(s)
    write(s, "b", range(10, 20), now + 10**9, (7, 8))
    lst = listing(s)
    assert entry(lst, "b")["last_step"] == 19 and entry(lst, "b")["ranks"] == 2, lst
    same_after_restart(s, lst, kill=True)
    s.stop()
