"""Admin API and rankctl: auth + audit, stats, export, delete (kill -9),
retention + compaction (space comes back), compaction under kill -9,
verify (segment, WAL, LMDB damage), backup during writes + restore."""

import json
import os
import random
import shutil
import struct
import subprocess
import threading
import time
import urllib.parse

from harness import T0, Server, f32, jobs_stored, segment_files, wait_until

TOKEN = "s3cret-token-for-tests"
ADMIN = ["--admin-token", TOKEN, "--max-query-points", "10000000"]


def rankctl_bin():
    return os.path.join(os.path.dirname(os.path.dirname(os.environ.get("RDB_BIN") or
                                                        "build/server/rankdbd")), "tools", "rankctl")


def rankctl(*args, check=True):
    p = subprocess.run([rankctl_bin()] + list(args), capture_output=True, text=True, timeout=120)
    if check:
        assert p.returncode == 0, "rankctl %r: rc %d\n%s\n%s" % (args, p.returncode, p.stdout, p.stderr)
    return p


def url(s):
    return "http://127.0.0.1:%d" % s.port


def admin(s, method, path, token=TOKEN):
    hdrs = {"Authorization": "Bearer " + token} if token is not None else {}
    st, _, body = s.request(method, "/api/v1/admin/" + path, headers=hdrs)
    return st, json.loads(body) if body else None


def write_job(s, job, n, t0=T0, ranks=(0, 1), step0=0):
    recs = [{"job": job, "rank": r, "step": step0 + i, "timestamp": t0 + i * 1_000_000 + r,
             "metrics": {"loss": f32(3.0 / (1 + i)), "lr": 1e-4 * i}}
            for i in range(n) for r in ranks]
    for i in range(0, len(recs), 2000):
        s.write_ok(recs[i:i + 2000])
    return recs


def export(s, job):
    return rankctl("--url", url(s), "export", "--job", job).stdout


def du(d):
    total = 0
    for root, _, files in os.walk(d):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def test_auth_and_audit():
    s = Server(["--max-query-points", "1000"]).start()
    st, body = admin(s, "GET", "stats")
    assert st == 403 and "admin_token" in body["error"], (st, body)
    s.stop()
    s = Server(ADMIN, data_dir=s.data_dir).start()
    assert admin(s, "GET", "stats", token=None)[0] == 401
    assert admin(s, "GET", "stats", token="wrong")[0] == 403
    st, body = admin(s, "GET", "stats")
    assert st == 200 and "disk" in body, body
    assert s.get("/api/v1/jobs")[0] == 200  # other paths unaffected
    lines = [json.loads(l) for l in open(os.path.join(s.data_dir, "audit.log"))]
    res = [(l["action"], l["result"], l["status"]) for l in lines]
    assert ("admin", "refused", 401) in res and ("admin", "refused", 403) in res, res
    assert ("stats", "ok", 200) in res, res
    assert all(l["client"].startswith("127.0.0.1:") for l in lines), lines
    own = [l for l in s.log_text().splitlines() if not l.startswith("====")]
    assert not any(TOKEN in l for l in own), "token logged"
    s.stop()


def test_stats_export_delete_kill9():
    s = Server(ADMIN + ["--chunk-max-points", "500"]).start()
    write_job(s, "keep", 3000)
    write_job(s, "gone", 3000)
    st, body = admin(s, "GET", "stats?job=keep")
    assert st == 200 and body["jobs"][0]["series"] == 4, body
    j = body["jobs"][0]
    assert j["points"] + j["head_points"] == 12000, j
    ndj = export(s, "keep").splitlines()
    assert len(ndj) == 12000, len(ndj)
    csv = rankctl("--url", url(s), "export", "--job", "keep", "--metric", "loss", "--format", "csv",
                  "--step-from", "10", "--step-to", "19").stdout.splitlines()
    assert csv[0].startswith("job,rank,metric") and len(csv) == 1 + 20, csv[:3]
    before_keep = export(s, "keep")
    write_job(s, "gone", 10, step0=5000)  # in the head and the WAL when deleted
    r = rankctl("--url", url(s), "--token", TOKEN, "delete", "gone")
    assert json.loads(r.stdout)["deleted"], r.stdout
    s.write_ok([{"job": "gone", "rank": 0, "step": 1, "timestamp": T0, "metrics": {"again": 1.0}}])
    s.kill9()
    s.start()
    jobs = [j["job"] for j in s.get_json("/api/v1/jobs")[1]["jobs"]]
    assert "keep" in jobs, jobs
    assert s.get_json("/api/v1/jobs/gone/metrics")[1]["metrics"] == ["again"]
    assert export(s, "keep") == before_keep
    s.stop()


def test_retention_and_compaction_reclaim_space():
    s = Server(ADMIN + ["--chunk-max-points", "1000", "--segment-max-bytes", "1M"]).start()
    now = time.time_ns()
    old = now - 10 * 86400 * 10**9
    write_job(s, "old", 20000, t0=old)
    write_job(s, "new", 20000, t0=now - 3600 * 10**9)
    admin(s, "POST", "checkpoint")
    size0 = du(os.path.join(s.data_dir, "chunks"))
    before_new = export(s, "new")
    assert admin(s, "PUT", "retention/old?seconds=86400")[0] == 200
    st, r = admin(s, "POST", "retention/run")
    assert st == 200 and r["points"] == 80000, r
    assert export(s, "old") == ""
    st, c = admin(s, "POST", "compact?min_live_pct=90")  # old and new share segments
    assert st == 200 and c["segments"] >= 1, c
    # the compacted-away files go after a grace of a few seconds (queries
    # that started before the switch may still read them)
    size1 = wait_until(lambda: (lambda n: n if n < size0 * 0.7 else 0)(
        du(os.path.join(s.data_dir, "chunks"))), what="space to come back")
    assert size1 < size0 * 0.7, (size0, size1)
    assert export(s, "new") == before_new
    s.restart()
    assert export(s, "new") == before_new and export(s, "old") == ""
    s.stop()


def test_compaction_kill9_loop():
    s = Server(ADMIN + ["--chunk-max-points", "200", "--segment-max-bytes", "1M"]).start()
    write_job(s, "a", 15000, ranks=(0, 1, 2))
    write_job(s, "b", 15000, ranks=(0, 1, 2))
    admin(s, "POST", "checkpoint")
    want = export(s, "a")
    rankctl("--url", url(s), "--token", TOKEN, "delete", "b")
    rng = random.Random(7)
    for _ in range(4):
        t = threading.Thread(target=lambda: admin(s, "POST", "compact?min_live_pct=100"))
        t.daemon = True
        t.start()
        time.sleep(rng.uniform(0.0, 0.4))
        s.kill9()
        t.join(30)
        s.start()
        assert export(s, "a") == want
    st, c = admin(s, "POST", "compact?min_live_pct=100")
    assert st == 200, c
    assert export(s, "a") == want
    st, v = admin(s, "POST", "verify")
    assert st == 200 and v["ok"], v
    s.stop()


def _stats_chunks(s, job):
    r = rankctl("--url", url(s), "--token", TOKEN, "stats", "--job", job)
    return json.loads(r.stdout)["jobs"][0]["chunks"]


def _tiny_chunks(s, job, rounds, per=3):
    for k in range(rounds):  # a checkpoint every few writes: chunks of `per` points
        write_job(s, job, per, t0=T0 + k * per * 1_000_000, step0=k * per)
        admin(s, "POST", "checkpoint")


def test_compaction_merges_small_chunks():
    s = Server(ADMIN + ["--chunk-max-points", "100"]).start()
    _tiny_chunks(s, "tiny", 40)
    want = export(s, "tiny")
    assert len(want.splitlines()) == 40 * 3 * 2 * 2
    n0 = _stats_chunks(s, "tiny")
    st, c = admin(s, "POST", "compact")
    assert st == 200 and c["merged_from"] > c["merged_into"] > 0, c
    n1 = _stats_chunks(s, "tiny")
    assert n1 < n0 / 4, (n0, n1)
    assert export(s, "tiny") == want
    s.restart()
    assert export(s, "tiny") == want and _stats_chunks(s, "tiny") == n1
    st, v = admin(s, "POST", "verify")
    assert st == 200 and v["ok"], v
    s.stop()


def test_merge_small_chunks_kill9_loop():
    s = Server(ADMIN + ["--chunk-max-points", "100"]).start()
    for j in ("m0", "m1", "m2"):
        _tiny_chunks(s, j, 25)
    want = {j: export(s, j) for j in ("m0", "m1", "m2")}
    rng = random.Random(11)
    for _ in range(4):
        t = threading.Thread(target=lambda: admin(s, "POST", "compact"))
        t.daemon = True
        t.start()
        time.sleep(rng.uniform(0.0, 0.3))
        s.kill9()
        t.join(30)
        s.start()
        assert {j: export(s, j) for j in want} == want
    st, c = admin(s, "POST", "compact")
    assert st == 200, c
    assert {j: export(s, j) for j in want} == want
    assert _stats_chunks(s, "m0") <= 4
    st, v = admin(s, "POST", "verify")
    assert st == 200 and v["ok"], v
    s.stop()


def _brute(recs, rank, width):
    out = {}
    for r in recs:
        if r["rank"] != rank:
            continue
        k = r["timestamp"] // width
        v = r["metrics"]["loss"]
        b = out.setdefault(k, [])
        b.append((r["timestamp"], v))
    return out


def test_rollups_answer_downsample_after_retention():
    s = Server(ADMIN + ["--chunk-max-points", "100"]).start()
    sec = 10**9
    now = time.time_ns()
    t0 = (now - 4 * 3600 * sec) // (600 * sec) * (600 * sec)
    recs = [{"job": "ru", "rank": rk, "step": i, "timestamp": t0 + i * 7 * sec + rk,
             "metrics": {"loss": ((i * 37 + rk * 11) % 101) * 0.5}}
            for i in range(1800) for rk in (0, 1)]
    for i in range(0, len(recs), 2000):
        s.write_ok(recs[i:i + 2000])
    width = 300 * sec  # a multiple of the 60 s time tier
    q = {"job": "ru", "metric": "loss", "time_width_ns": width, "from": t0, "to": now,
         "agg": "count,sum,min,max,first,last,avg"}
    assert admin(s, "PUT", "retention/ru?seconds=7200")[0] == 200
    st, r = admin(s, "POST", "retention/run")
    assert st == 200 and 1000 < r["points"] < 3600, r
    assert len(export(s, "ru").splitlines()) == 3600 - r["points"]

    def check():
        st, obj = s.get_json("/api/v1/query/downsample?" + urllib.parse.urlencode(q))
        assert st == 200 and obj["from_rollups"] > 0, (st, obj)
        for ser in obj["series"]:
            want = _brute(recs, ser["rank"], width)
            assert [x // width for x in ser["start"]] == sorted(want), ser["start"]
            for i, k in enumerate(sorted(want)):
                pts = sorted(want[k])
                vals = [v for _, v in pts]
                assert ser["count"][i] == len(vals), (k, ser["count"][i], len(vals))
                assert ser["min"][i] == min(vals) and ser["max"][i] == max(vals)
                assert abs(ser["sum"][i] - sum(vals)) < 1e-6
                assert abs(ser["avg"][i] - sum(vals) / len(vals)) < 1e-9
                assert ser["first"][i] == pts[0][1] and ser["last"][i] == pts[-1][1]
        return obj
    check()
    s.restart()
    check()
    q2 = dict(q, agg="p50")
    st, obj = s.get_json("/api/v1/query/downsample?" + urllib.parse.urlencode(q2))
    assert st == 422 and "rolled up" in obj["error"], (st, obj)
    q3 = dict(q, time_width_ns=90 * sec)  # not a multiple: raw data only
    st, obj = s.get_json("/api/v1/query/downsample?" + urllib.parse.urlencode(q3))
    assert st == 200 and obj["from_rollups"] == 0, obj
    assert sum(sum(x["count"]) for x in obj["series"]) == 3600 - r["points"]
    s.stop()


def test_verify_finds_damage():
    s = Server(ADMIN + ["--chunk-max-points", "500"]).start()
    write_job(s, "v", 3000)
    s.stop()
    r = rankctl("--data-dir", s.data_dir, "verify")
    assert '"ok":true' in r.stdout, r.stdout
    seg = sorted(segment_files(s.data_dir))[0]
    with open(seg, "r+b") as f:
        data = f.read()
    # write_job sends loss and lr in the same records: the seal stores them
    # as group records (docs/FORMAT.md) whose head (shared time columns) is
    # checksummed once and each member's section on its own.
    first_len = 48 + struct.unpack_from("<I", data, 32 + 4)[0]
    second = 32 + first_len
    assert data[32:36] == b"GRP1" and data[second:second + 4] == b"GRP1"
    members = data[32 + 48]
    with open(seg, "r+b") as f:
        f.seek(32 + 48 + 20)  # in the first record's shared columns: every member
        f.write(bytes([data[32 + 48 + 20] ^ 0xff]))
        end = second + 48 + struct.unpack_from("<I", data, second + 4)[0] - 1
        f.seek(end)  # the second record's last member section: that member only
        f.write(bytes([data[end] ^ 0xff]))
    r = rankctl("--data-dir", s.data_dir, "verify", check=False)
    assert r.returncode == 3 and "checksum" in r.stdout and seg in r.stdout, r.stdout
    assert "group member's section checksum mismatch" in r.stdout, r.stdout
    r = rankctl("--data-dir", s.data_dir, "verify", "--quarantine", check=False)
    assert '"quarantined":%d' % (members + 1) in r.stdout, r.stdout
    s.start()
    st, _ = s.query(job="v", metric="loss,lr")[:2]
    assert st == 200  # the damaged chunk is no longer served
    s.write_ok([{"job": "v", "rank": 0, "step": 99999, "timestamp": T0 + 10**12,
                 "metrics": {"loss": 1.0}}])
    s.kill9()
    wal = [os.path.join(s.data_dir, "wal", f) for f in os.listdir(os.path.join(s.data_dir, "wal"))]
    wal = [w for w in wal if os.path.getsize(w) > 64][0]
    with open(wal, "r+b") as f:
        f.seek(32 + 16 + 3)
        b = f.read(1)
        f.seek(32 + 16 + 3)
        f.write(bytes([b[0] ^ 0x55]))
    r = rankctl("--data-dir", s.data_dir, "verify", check=False)
    assert r.returncode == 3 and "WAL" in r.stdout, r.stdout
    mdb = os.path.join(s.data_dir, "index", "data.mdb")
    with open(mdb, "r+b") as f:
        f.seek(16)
        f.write(b"\xde\xad\xbe\xef")
        f.seek(4096 + 16)
        f.write(b"\xde\xad\xbe\xef")
    r = rankctl("--data-dir", s.data_dir, "verify", check=False)
    assert r.returncode == 3 and "cannot be opened" in r.stdout, r.stdout


def test_backup_during_writes_restores():
    s = Server(ADMIN + ["--chunk-max-points", "300"]).start()
    write_job(s, "bk", 4000)
    stop = threading.Event()
    written = []

    def writer():
        i = 0
        while not stop.is_set():
            s.write_ok([{"job": "live", "rank": 0, "step": i, "timestamp": T0 + i, "metrics": {"x": i}}])
            written.append(i)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    wait_until(lambda: len(written) >= 20, what="concurrent writes started")
    bdir = os.path.join(os.path.dirname(s.data_dir), "backup1")
    st, r = admin(s, "POST", "backup?dir=" + bdir)
    stop.set()
    t.join()
    assert st == 200, r
    want = export(s, "bk")
    rdir = os.path.join(os.path.dirname(s.data_dir), "restored")
    rankctl("restore", bdir, rdir)
    r2 = Server(ADMIN, data_dir=rdir).start()
    assert export(r2, "bk") == want
    assert r2.get("/api/v1/jobs/live/metrics")[0] == 200
    r2.stop()
    s.stop()


def test_backup_restores_job_metadata():
    s = Server(ADMIN).start()
    write_job(s, "mj", 10)
    doc = {"lr": 0.001, "world_size": 2, "model": "gpt-small"}
    st, _, _ = s.request("PUT", "/api/v1/jobs/mj/meta", body=json.dumps(doc).encode(),
                         headers={"Content-Type": "application/json"})
    assert st in (200, 204), st
    bdir = os.path.join(os.path.dirname(s.data_dir), "backup-meta")
    st, r = admin(s, "POST", "backup?dir=" + bdir)
    assert st == 200, r
    rdir = os.path.join(os.path.dirname(s.data_dir), "restored-meta")
    rankctl("restore", bdir, rdir)
    s.stop()
    r2 = Server(ADMIN, data_dir=rdir).start()
    st, got = r2.get_json("/api/v1/jobs/mj/meta")
    assert st == 200 and got == doc, (st, got)
    r2.stop()


def test_delete_job_deletes_metadata():
    s = Server(ADMIN).start()
    write_job(s, "dm", 10)
    st, _, _ = s.request("PUT", "/api/v1/jobs/dm/meta", body=b'{"lr":0.1}',
                         headers={"Content-Type": "application/json"})
    assert st in (200, 204), st
    assert s.get_json("/api/v1/jobs/dm/meta")[0] == 200
    st, r = admin(s, "POST", "jobs/dm/delete")
    assert st == 200 and r["deleted"], r
    st, _ = s.get_json("/api/v1/jobs/dm/meta")
    assert st == 404, st
    # a job that has only a metadata document can be deleted too
    s.request("PUT", "/api/v1/jobs/onlymeta/meta", body=b'{"a":1}',
              headers={"Content-Type": "application/json"})
    st, r = admin(s, "POST", "jobs/onlymeta/delete")
    assert st == 200, r
    assert s.get_json("/api/v1/jobs/onlymeta/meta")[0] == 404
    s.stop()


def test_rankctl_data_dir_refuses_locked():
    s = Server(ADMIN).start()
    write_job(s, "x", 10)
    r = rankctl("--data-dir", s.data_dir, "stats", check=False)
    assert r.returncode != 0 and "LOCK" in r.stderr, r.stderr
    s.stop()
    r = rankctl("--data-dir", s.data_dir, "stats")
    assert '"job":"x"' in r.stdout, r.stdout


def _events(job, n, t0=T0):
    recs = [{"type": "log", "job": job, "rank": i % 3, "timestamp": t0 + i * 1000, "attempt": 0,
             "level": ["debug", "info", "warn", "error", "fatal"][i % 5],
             "message": "rebuild msg %d nccl" % i, "fields": {"i": i, "host": "h%d" % (i % 2)},
             **({"step": i // 4} if i % 6 else {})} for i in range(n)]
    recs += [{"type": "span", "job": job, "rank": r, "step": st, "name": "forward",
              "start": t0 + st * 10**6 + r, "duration_ns": 100 + r, "attempt": 0}
             for st in range(5) for r in range(2)]
    return recs


def _write_events(s, recs):
    st, obj = s.write(recs)
    assert st == 200 and obj["records"] == len(recs), (st, obj)


def _snapshot(s, jobs=("ra", "rb", "rc", "rd")):
    """Everything a client can read: jobs, metrics, every point, logs, spans."""
    st, listed = s.get_json("/api/v1/jobs")
    assert st == 200, listed
    snap = {"jobs": jobs_stored(listed)}
    for j in jobs:
        logs = s.get_json("/api/v1/logs?job=%s&limit=10000" % j)
        spans = s.get_json("/api/v1/spans?job=%s&step_from=0&step_to=1000000" % j)
        p = rankctl("--url", url(s), "export", "--job", j, check=False)  # rc: logs only
        snap[j] = (s.get_json("/api/v1/jobs/%s/metrics" % j), p.returncode, p.stdout, logs, spans)
    return snap


def test_rebuild_index_from_segments():
    s = Server(ADMIN + ["--chunk-max-points", "300"]).start()
    write_job(s, "ra", 2000)
    write_job(s, "rb", 700, ranks=(0, 1, 2), t0=T0 + 10**12)
    _write_events(s, _events("ra", 400))
    admin(s, "POST", "checkpoint")
    write_job(s, "ra", 500, step0=10000, t0=T0 + 10**13)
    _write_events(s, _events("rc", 50))
    want = _snapshot(s)
    assert len(want["ra"][2].splitlines()) == 10000 and want["rc"][3][1]["logs"], want
    s.stop()
    idx = os.path.join(s.data_dir, "index")
    shutil.rmtree(idx)
    seg = sorted(segment_files(s.data_dir))[-1]
    with open(seg, "ab") as f:  # a torn tail: never indexed, reported
        f.write(struct.pack("<II", 0x314b4843, 5000) + b"\x01" * 30)
    r = rankctl("--data-dir", s.data_dir, "rebuild-index")
    out = json.loads(r.stdout.splitlines()[-1])
    assert "DAMAGED" in r.stdout and seg in r.stdout, r.stdout
    assert out["rebuilt"] and out["old_index"] is None and out["event_chunks"] > 0, out
    assert out["chunks"] > 0 and out["damaged"] == 1, out
    s.start()
    assert _snapshot(s) == want
    # kill -9 with pending chunks (a series past chunk-max-points) and the WAL present
    write_job(s, "rd", 1200)
    _write_events(s, _events("rd", 30))
    want = _snapshot(s)
    s.kill9()
    assert [f for f in os.listdir(os.path.join(s.data_dir, "wal")) if f.startswith("wal-")]
    r = rankctl("--data-dir", s.data_dir, "rebuild-index")
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["skipped_uncheckpointed"] > 0, out
    assert out["old_index"] and os.path.isdir(out["old_index"]), out
    assert os.path.isdir(idx) and not os.path.exists(idx + ".rebuild")
    s.start()
    assert _snapshot(s) == want
    st, v = admin(s, "POST", "verify")  # only the torn tail made above
    assert st == 200 and v["damaged"] == 1 and seg in v["problems"][0], v
    write_job(s, "ra", 10, step0=20000, t0=T0 + 10**14)  # ids and uids continue above
    s.restart()
    assert len(export(s, "ra").splitlines()) == 10040
    r = rankctl("--url", url(s), "rebuild-index", check=False)
    assert r.returncode == 2
    s.stop()


# ---- merged chunks and rebuild-index: supersede records ------------------------------

def _merge_mixed(s, rounds=20):
    """Per round: 4 points per series of jobs "mk" and "md" (tiny chunks; "md"
    with incompressible values) and a big job "mb" (full chunks, incompressible:
    its segments stay mostly live), then a checkpoint. 20 rounds of 4 points
    merge into one chunk per series (80 <= chunk_max_points 100)."""
    for k in range(rounds):
        rng = random.Random(k)
        write_job(s, "mk", 4, t0=T0 + k * 4 * 1_000_000, step0=k * 4)
        s.write_ok([{"job": "md", "rank": r, "step": k * 4 + i,
                     "timestamp": T0 + (k * 4 + i) * 1_000_000,
                     "metrics": {"loss": rng.random(), "lr": rng.random()}}
                    for i in range(4) for r in (0, 1)])
        s.write_ok([{"job": "mb", "rank": r, "step": k * 200 + i,
                     "timestamp": T0 + 10**12 + (k * 200 + i) * 1_000_000,
                     "metrics": {"loss": rng.random(), "lr": rng.random()}}
                    for i in range(200) for r in (0, 1)])
        admin(s, "POST", "checkpoint")


def _rebuild(s):
    s.stop()
    r = rankctl("--data-dir", s.data_dir, "rebuild-index")
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["rebuilt"], r.stdout
    s.start()
    return r, out


def test_rebuild_after_merge_counts_points_once():
    s = Server(ADMIN + ["--chunk-max-points", "100"]).start()
    _merge_mixed(s)
    want = {j: export(s, j) for j in ("mk", "md", "mb")}
    assert len(want["mk"].splitlines()) == 20 * 4 * 2 * 2
    st, c = admin(s, "POST", "compact?min_live_pct=0")  # merge only: old records stay
    assert st == 200 and c["merged_from"] > c["merged_into"] > 0 and c["segments"] == 0, c
    r, out = _rebuild(s)
    got = {j: export(s, j) for j in want}
    assert len(got["mk"].splitlines()) == len(want["mk"].splitlines())  # not doubled
    assert got == want
    assert "DAMAGED" not in r.stdout, r.stdout
    assert out["skipped_superseded"] == c["merged_from"], (out, c)
    st, v = admin(s, "POST", "verify")
    assert st == 200 and v["ok"], v
    # A second merge pass has nothing left to merge; a rebuild again is stable.
    st, c2 = admin(s, "POST", "compact?min_live_pct=0")
    assert st == 200 and c2["merged_from"] == 0, c2
    _rebuild(s)
    assert {j: export(s, j) for j in want} == want
    s.stop()


def test_rebuild_after_merge_and_segment_compaction():
    s = Server(ADMIN + ["--chunk-max-points", "100"]).start()
    _merge_mixed(s)
    keep = {j: export(s, j) for j in ("mk", "mb")}
    st, c = admin(s, "POST", "compact?min_live_pct=0")
    assert st == 200 and c["merged_into"] >= 8, c
    segs_merge = set(segment_files(s.data_dir))
    rankctl("--url", url(s), "--token", TOKEN, "delete", "md")
    # The merge output segment is now about half dead and gets rewritten; the
    # source segment (mostly the big job) stays: the supersede records must
    # travel to the new segment.
    st, c = admin(s, "POST", "compact?min_live_pct=75")
    assert st == 200 and c["segments"] >= 1, c
    left = set(segment_files(s.data_dir))
    assert left & segs_merge and left - segs_merge, (segs_merge, left)
    _rebuild(s)
    assert {j: export(s, j) for j in keep} == keep
    s.stop()
    r = rankctl("--data-dir", s.data_dir, "verify")
    v = json.loads(r.stdout.splitlines()[-1])
    assert v["ok"] and v["supersede_records"] >= 4, r.stdout
    s.start()
    # Everything rewritten: the sources are gone, so are the supersede records.
    st, c = admin(s, "POST", "compact?min_live_pct=100")
    assert st == 200, c
    assert {j: export(s, j) for j in keep} == keep
    s.stop()
    r = rankctl("--data-dir", s.data_dir, "verify")
    v = json.loads(r.stdout.splitlines()[-1])
    assert v["ok"] and v["supersede_records"] == 0, r.stdout
    s.start()
    _rebuild(s)
    assert {j: export(s, j) for j in keep} == keep
    s.stop()


def test_merge_kill9_then_rebuild_index():
    s = Server(ADMIN + ["--chunk-max-points", "100"]).start()
    for j in ("k0", "k1", "k2"):
        _tiny_chunks(s, j, 25)
    want = {j: export(s, j) for j in ("k0", "k1", "k2")}
    rng = random.Random(5)
    for _ in range(4):
        t = threading.Thread(target=lambda: admin(s, "POST", "compact?min_live_pct=0"))
        t.daemon = True
        t.start()
        time.sleep(rng.uniform(0.0, 0.3))
        s.kill9()
        t.join(30)
        rankctl("--data-dir", s.data_dir, "rebuild-index")
        s.start()
        assert {j: export(s, j) for j in want} == want
    st, c = admin(s, "POST", "compact?min_live_pct=0")
    assert st == 200, c
    _rebuild(s)
    assert {j: export(s, j) for j in want} == want
    st, v = admin(s, "POST", "verify")
    assert st == 200 and v["ok"], v
    s.stop()


def _sup_offsets(path):
    """Offsets of the supersede (SUP1) records of a segment file."""
    data = open(path, "rb").read()
    off, out = 32, []
    while off + 48 <= len(data):
        magic, plen = struct.unpack_from("<II", data, off)
        if magic == 0x31505553:
            out.append(off)
        off += 48 + plen
    return out


def test_damaged_supersede_record_is_reported():
    s = Server(ADMIN + ["--chunk-max-points", "100"]).start()
    _tiny_chunks(s, "ds", 20)
    st, c = admin(s, "POST", "compact?min_live_pct=0")
    assert st == 200 and c["merged_into"] == 4, c
    s.stop()
    seg = [p for p in segment_files(s.data_dir) if _sup_offsets(p)]
    assert len(seg) == 1, seg
    off = _sup_offsets(seg[0])[0]
    with open(seg[0], "r+b") as f:  # a source uid in the payload
        f.seek(off + 48 + 8 + 3)
        b = f.read(1)
        f.seek(off + 48 + 8 + 3)
        f.write(bytes([b[0] ^ 0x40]))
    r = rankctl("--data-dir", s.data_dir, "verify", check=False)
    assert r.returncode == 3 and "supersede record" in r.stdout and seg[0] in r.stdout, r.stdout
    r = rankctl("--data-dir", s.data_dir, "rebuild-index")
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["damaged"] == 1 and out["suspect_merges"] == 1, r.stdout
    assert out["supersede_records"] == 3 and out["skipped_superseded"] == 3 * 20, out
    assert "is indexed but its supersede record is damaged" in r.stdout, r.stdout


def _records_by_magic(data_dir):
    """(magic, payload) of every record of every segment file."""
    out = []
    for seg in segment_files(data_dir):
        with open(seg, "rb") as f:
            data = f.read()
        off = 32
        while off + 48 <= len(data):
            plen = struct.unpack_from("<I", data, off + 4)[0]
            out.append((data[off:off + 4], data[off + 48:off + 48 + plen]))
            off += 48 + plen
    return out


def _write_group_job(s, job, steps, step0=0):
    """Ranks 0..2 send metrics a..d in one record per step; rank 0 also sends
    `solo` in records of its own (other timestamps); rank 2 adds `late` from
    step 100 on. Returns the expected export lines as a set of tuples."""
    want = set()
    recs = []
    for i in range(step0, step0 + steps):
        for r in range(3):
            m = {"a": f32(1.0 / (1 + i)), "b": float(i * 512), "c": 0.1 * i + r, "d": 7.0}
            if r == 2 and i >= 100:
                m["late"] = float(i)
            ts = T0 + i * 300_000_000 + r * 1_337 + (i * 7919) % 3_000_000
            recs.append({"job": job, "rank": r, "step": i, "timestamp": ts, "metrics": m})
            want |= {(r, k, i, v) for k, v in m.items()}
        recs.append({"job": job, "rank": 0, "step": i, "timestamp": T0 + i * 300_000_000 + 5,
                     "metrics": {"solo": -float(i)}})
        want.add((0, "solo", i, -float(i)))
    for k in range(0, len(recs), 1000):
        s.write_ok(recs[k:k + 1000])
    return want


def _exported(s, job):
    got = set()
    for line in export(s, job).splitlines():
        p = json.loads(line)
        got.add((p["rank"], p["metric"], p["step"], p["value"]))
    return got


def test_group_records_share_time_columns():
    """Metrics sent in the same records are sealed as group records (their
    timestamps, steps and attempts stored once); a series with other
    timestamps gets chunks of its own. Every point reads back exactly,
    through restart, small-group merging, segment rewrite, kill -9 and
    rebuild-index; verify finds nothing wrong."""
    s = Server(ADMIN + ["--chunk-max-points", "100"]).start()
    want = set()
    for k in range(10):  # checkpoints every 20 steps: groups of 20 points
        want |= _write_group_job(s, "grp", 20, step0=k * 20)
        admin(s, "POST", "checkpoint")
    assert _exported(s, "grp") == want
    recs = _records_by_magic(s.data_dir)
    groups = [p for m, p in recs if m == b"GRP1"]
    assert groups and all(p[0] >= 2 for p in groups), [m for m, _ in recs]
    # a..d of one rank; rank 2 from step 100 on: a..d and late
    assert {p[0] for p in groups} == {4, 5}, {p[0] for p in groups}
    assert any(m == b"CHK1" for m, _ in recs)  # solo: timestamps of its own
    n0 = _stats_chunks(s, "grp")
    st, c = admin(s, "POST", "compact")
    assert st == 200 and c["merged_from"] > c["merged_into"] > 0, c
    assert _stats_chunks(s, "grp") < n0 / 2
    assert _exported(s, "grp") == want
    merged = [p for m, p in _records_by_magic(s.data_dir) if m == b"GRP1"]
    assert max(struct.unpack_from("<I", p, 4)[0] for p in merged) == 100  # n of the shared part
    s.restart()
    assert _exported(s, "grp") == want
    st, c = admin(s, "POST", "compact?min_live_pct=100")  # rewrite every segment
    assert st == 200 and c["segments"] >= 1, c
    assert _exported(s, "grp") == want
    more = _write_group_job(s, "grp", 30, step0=1000)
    s.kill9()
    s.start()
    assert _exported(s, "grp") == want | more
    s.stop()
    r = rankctl("--data-dir", s.data_dir, "rebuild-index")
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["rebuilt"] and out["damaged"] == 0, out
    r = rankctl("--data-dir", s.data_dir, "verify")
    assert '"ok":true' in r.stdout, r.stdout
    s.start()
    assert _exported(s, "grp") == want | more
    s.stop()


def test_damaged_group_member_is_contained():
    """A flipped byte in one member's section of a group record loses that
    member's chunk only: queries of its siblings, verify --quarantine,
    compaction (which then rewrites the segment) and rebuild-index all keep
    every other point."""
    s = Server(ADMIN + ["--chunk-max-points", "1000"]).start()
    want = _write_group_job(s, "gd", 300)
    s.stop()
    seg = sorted(segment_files(s.data_dir))[0]
    with open(seg, "rb") as f:
        data = f.read()
    # the first group record (rank 0: a, b, c, d): damage member c's section
    off = 32
    while data[off:off + 4] != b"GRP1":
        off += 48 + struct.unpack_from("<I", data, off + 4)[0]
    m = data[off + 48]
    head_len = struct.unpack_from("<I", data, off + 36)[0]
    dir_at = off + 48 + head_len - 24 * m
    sec_off, sec_len = struct.unpack_from("<II", data, dir_at + 2 * 24 + 8)
    with open(seg, "r+b") as f:
        f.seek(off + 48 + sec_off + sec_len - 1)
        f.write(bytes([data[off + 48 + sec_off + sec_len - 1] ^ 0x40]))
    lost = {p for p in want if p[0] == 0 and p[1] == "c"}
    r = rankctl("--data-dir", s.data_dir, "rebuild-index")  # siblings stay indexed
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["rebuilt"] and out["damaged"] == 1 and "member 2 of 4" in r.stdout, r.stdout
    s.start()
    assert _exported(s, "gd") == want - lost
    s.stop()
    shutil.rmtree(out["old_index"])
    s.start()
    st, body = s.query(job="gd", metric="a", rank="0")[:2]
    assert st == 200, body
    st, v = admin(s, "POST", "verify?quarantine=1")
    assert st == 200 and v["damaged"] >= 1 and v["quarantined"] == 0, v  # not indexed
    assert _exported(s, "gd") == want - lost
    st, c = admin(s, "POST", "compact?min_live_pct=100")
    assert st == 200 and c["segments"] >= 1 and c["skipped"] == 0, c
    st, v = admin(s, "POST", "verify")
    assert st == 200 and v["ok"], v
    assert _exported(s, "gd") == want - lost
    s.stop()
    r = rankctl("--data-dir", s.data_dir, "rebuild-index")
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["rebuilt"] and out["damaged"] == 0, out
    s.start()
    assert _exported(s, "gd") == want - lost
    s.stop()


def test_rebuild_after_crash_recovery_counts_points_once():
    """kill -9 with pending chunks (size seals of a generation not yet
    checkpointed): recovery drops their entries and replays the WAL, and
    rewrites the segments holding the dropped records before deleting the
    WAL, so a later rebuild-index cannot index them next to the replayed
    points."""
    s = Server(ADMIN + ["--chunk-max-points", "100"]).start()
    want = _write_group_job(s, "cr", 150)
    solo = write_job(s, "cr1", 250)  # lone chunks too
    before = (_exported(s, "cr"), export(s, "cr1"))
    assert before[0] == want and len(before[1].splitlines()) == 2 * len(solo)
    # the size seals (100 points) happen on the flusher: wait for their records
    wait_until(lambda: _stats_chunks(s, "cr") > 0 and _stats_chunks(s, "cr1") > 0)
    s.kill9()
    s.start()  # recovery: drop pending chunks, replay, rewrite, checkpoint
    assert (_exported(s, "cr"), export(s, "cr1")) == before
    s.stop()
    r = rankctl("--data-dir", s.data_dir, "rebuild-index")
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["rebuilt"] and out["damaged"] == 0, out
    s.start()
    assert (_exported(s, "cr"), export(s, "cr1")) == before
    st, v = admin(s, "POST", "verify")
    assert st == 200 and v["ok"], v
    s.stop()
