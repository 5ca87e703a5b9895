"""Index compaction (storage/index/ix_compact.c): LMDB never shrinks
index/data.mdb; the online compacting copy does, every point stays
queryable, and a kill -9 at each step of the swap leaves a valid index."""

import json
import os
import subprocess
import threading

from harness import T0, Server, expected_series, assert_series_equal, f32, series_map, wait_until

TOKEN = "ixc-token"
# Automatic index compaction off: the tests trigger it by hand.
FLAGS = ["--admin-token", TOKEN, "--max-query-points", "10000000", "--index-compact-free-pct", "0"]
PAUSE_ENV = "RANKDB_TEST_IXCOMPACT_PAUSE"
RANKS, METRICS = 32, ["loss", "lr", "gnorm", "tput"]


def rankctl_bin():
    return os.path.join(os.path.dirname(os.path.dirname(os.environ.get("RDB_BIN") or
                                                        "build/server/rankdbd")), "tools", "rankctl")


def admin(s, method, path):
    st, _, body = s.request(method, "/api/v1/admin/" + path, headers={"Authorization": "Bearer " + TOKEN})
    return st, json.loads(body) if body else None


def index_stat(data_dir):
    p = subprocess.run([rankctl_bin(), "--data-dir", data_dir, "index-stat"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, "rankctl index-stat: rc %d\n%s\n%s" % (p.returncode, p.stdout, p.stderr)
    return json.loads(p.stdout)


def index_file(s):
    return os.path.join(s.data_dir, "index", "data.mdb")


def load_rounds(s, rounds, steps=10):
    """Writes RANKS x METRICS series in rounds, one checkpoint each: every
    round adds a small chunk per series (index entries the merge frees)."""
    recs = []
    for r in range(rounds):
        batch = [{"job": "ixc", "rank": rank, "step": step, "timestamp": T0 + step * 1_000_000 + rank,
                  "metrics": {m: f32(1.0 / (1 + step + i)) for i, m in enumerate(METRICS)}}
                 for step in range(r * steps, (r + 1) * steps) for rank in range(RANKS)]
        s.write_ok(batch)
        st, _ = admin(s, "POST", "checkpoint")
        assert st == 200
        recs += batch
    return recs


def check_all(s, recs, what):
    got = series_map(s.query_ok(job="ixc", metric=",".join(METRICS)))
    assert_series_equal(got, expected_series(recs), what)


def loaded_and_merged(rounds=8):
    s = Server(FLAGS).start()
    recs = load_rounds(s, rounds)
    st, c = admin(s, "POST", "compact")  # merges the small chunks: their entries go
    assert st == 200 and c["merged_from"] > c["merged_into"] > 0, c
    return s, recs


def test_index_compact_shrinks_and_keeps_every_point():
    s, recs = loaded_and_merged()
    s.stop()
    before = index_stat(s.data_dir)
    assert before["file_bytes"] == os.path.getsize(index_file(s))
    assert before["free_pages"] * 2 > before["used_pages"], before
    assert before["dbs"]["chunks"]["entries"] == RANKS * len(METRICS), before["dbs"]["chunks"]
    s.start()
    check_all(s, recs, "before index compaction")
    st, r = admin(s, "POST", "compact?index=1")
    assert st == 200, r
    assert r["index_bytes_before"] == before["file_bytes"], (r, before)
    assert r["index_bytes_after"] < before["file_bytes"] / 2, r
    assert os.path.getsize(index_file(s)) == r["index_bytes_after"]
    check_all(s, recs, "after index compaction")
    more = load_rounds(s, 1)[:]  # still writable
    s.stop()
    after = index_stat(s.data_dir)
    assert after["dbs"]["chunks"]["entries"] >= RANKS * len(METRICS)
    assert after["dbs"]["series"]["entries"] == before["dbs"]["series"]["entries"]
    s.start()
    check_all(s, recs + more, "after restart")
    st, v = admin(s, "POST", "verify")
    assert st == 200 and v["ok"], v
    s.stop()


def _kill_during_swap(step):
    s, recs = loaded_and_merged(6)
    s.stop()
    size_before = os.path.getsize(index_file(s))
    os.environ[PAUSE_ENV] = step
    try:
        s.start()
    finally:
        del os.environ[PAUSE_ENV]
    check_all(s, recs, "before the index compaction (%s)" % step)
    t = threading.Thread(target=lambda: admin(s, "POST", "compact?index=1"), daemon=True)
    t.start()
    wait_until(lambda: "test pause at step %s" % step in s.log_text(), timeout=60,
               what="the index compaction pausing at step %s" % step)
    copy = index_file(s) + ".compact"
    if step == "copied":  # the copy is complete beside the file in use
        assert os.path.exists(copy) and os.path.getsize(index_file(s)) == size_before
    else:  # the copy is data.mdb now
        assert not os.path.exists(copy) and os.path.getsize(index_file(s)) < size_before / 2
    s.kill9()  # a real SIGKILL while the swap is at this step
    t.join(30)
    s.start()
    check_all(s, recs, "after kill -9 at step %s" % step)
    assert not os.path.exists(index_file(s) + ".compact"), "the copy outlived a restart"
    size_after_crash = os.path.getsize(index_file(s))
    if step == "copied":
        assert size_after_crash == size_before, (size_after_crash, size_before)
    else:
        assert size_after_crash < size_before / 2, (size_after_crash, size_before)
    # The index works: writes, another compaction, verify.
    more = load_rounds(s, 1)
    st, r = admin(s, "POST", "compact?index=1")
    assert st == 200, r
    check_all(s, recs + more, "after another index compaction (%s)" % step)
    st, v = admin(s, "POST", "verify")
    assert st == 200 and v["ok"], v
    s.stop()


def test_index_compact_kill9_after_copy():
    _kill_during_swap("copied")


def test_index_compact_kill9_after_rename():
    _kill_during_swap("renamed")


def test_index_compact_kill9_after_reopen():
    _kill_during_swap("reopened")
