"""Issue 10 item 7: damage in what answers queries without being a chunk is
detected, never served, counted and reported by verify: job metadata
documents (meta/<job>.meta) and the chunk statistics in the LMDB index."""

import json
import os
import re
import struct
import subprocess
import tarfile
import time
import urllib.parse

from harness import Server


def _rankctl(*args):
    binary = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        os.environ.get("RDB_BIN") or "build/server/rankdbd"))), "tools", "rankctl")
    return subprocess.run([binary] + list(args), capture_output=True, text=True, timeout=120)


def _tree(d):
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = fh.read()
    return out


def _put_meta(s, job, doc):
    st, _, body = s.request("PUT", "/api/v1/jobs/%s/meta" % job, body=json.dumps(doc).encode(),
                            headers={"Content-Type": "application/json"})
    assert st == 200, (st, body)


def _metric(s, name):
    st, _, body = s.get("/metrics")
    assert st == 200
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric %s" % name)


def test_damaged_job_metadata_is_never_served():
    s = Server(["--detect", "off"]).start()
    doc = {"world_size": 512, "lr": 0.0003, "model": "gpt-small"}
    _put_meta(s, "mj", doc)
    _put_meta(s, "ok", {"a": 1})
    assert s.get_json("/api/v1/jobs/mj/meta") == (200, doc)
    s.stop()
    # one flipped bit in the middle of the stored document ("512" -> "5\x132")
    path = os.path.join(s.data_dir, "meta", "mj.meta")
    with open(path, "rb") as f:
        raw = f.read()
    pos = raw.index(b"512") + 1
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(bytes([raw[pos] ^ 0x02]))
    # verify (read-only) reports it and changes nothing
    before = _tree(s.data_dir)
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "DAMAGED" in r.stdout and "job mj" in r.stdout, r.stdout
    assert '"meta_damaged":1' in r.stdout, r.stdout
    assert _tree(s.data_dir) == before, "verify changed the data directory"
    s.start()
    st, _, body = s.get("/api/v1/jobs/mj/meta")
    text = body.decode()
    assert st == 500, (st, text)
    assert "512" not in text and "job mj" in text and "damaged" in text, text
    assert "PUT /api/v1/jobs/mj/meta" in text, text  # what the operator can do
    assert s.get_json("/api/v1/jobs/ok/meta") == (200, {"a": 1})
    assert _metric(s, "rankdb_job_meta_damaged_documents") == 1
    assert _metric(s, "rankdb_job_meta_damaged_reads_total") == 1
    # the job list still answers, without the damaged document
    st, jobs = s.get_json("/api/v1/jobs")
    assert st == 200, jobs
    assert "512" not in json.dumps(jobs)
    # storing it again repairs it; verify is clean again
    _put_meta(s, "mj", doc)
    assert s.get_json("/api/v1/jobs/mj/meta") == (200, doc)
    s.stop()
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)


def test_legacy_job_metadata_is_upgraded_in_place():
    s = Server(["--detect", "off"]).start()
    s.stop()
    # a document as the previous release stored it: meta/<job>.json, bare bytes
    meta = os.path.join(s.data_dir, "meta")
    os.makedirs(meta, exist_ok=True)
    body = b'{"world_size": 8, "note": "written by the old layout"}'
    with open(os.path.join(meta, "old.json"), "wb") as f:
        f.write(body)
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 0 and '"meta_unchecked":1' in r.stdout, r.stdout
    s.start()
    st, _, got = s.get("/api/v1/jobs/old/meta")
    assert st == 200 and got == body, (st, got)
    assert sorted(os.listdir(meta)) == ["old.meta"], os.listdir(meta)
    s.stop()
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 0 and '"meta_docs":1' in r.stdout, r.stdout


# ---------------------------------------------------------------------------
# chunk statistics in the LMDB index (the issue: min 1000 served as 744)

SEC = 1_000_000_000
T0 = 1_700_000_000 * SEC
MIN_MAX = struct.pack("<dd", 1000.0, 1999.0)  # the entry's min and max fields


def _write_ramp(s, job="st"):
    recs = [{"job": job, "rank": 0, "step": i, "timestamp": T0 + i * SEC,
             "metrics": {"m": 1000.0 + i}} for i in range(1000)]
    s.write_ok(recs)


def _min_from_stats(s, job="st"):
    """The downsample min over one bucket holding the whole chunk."""
    st, obj = s.get_json("/api/v1/query/downsample?" + urllib.parse.urlencode(
        {"job": job, "metric": "m", "agg": "min,count", "time_width_ns": 10_000 * SEC}))
    return st, obj


def _flip_stats_min(data_dir):
    """Turns the min 1000.0 of every stored copy of the entry into 744.0 (one
    byte: 0x408F4... -> 0x40874...), as the torture run did. Returns copies."""
    path = os.path.join(data_dir, "index", "data.mdb")
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    n, pos = 0, raw.find(MIN_MAX)
    while pos >= 0:
        raw[pos + 6] ^= 0x08
        assert struct.unpack_from("<d", raw, pos)[0] == 744.0
        n += 1
        pos = raw.find(MIN_MAX, pos + 1)
    with open(path, "wb") as f:
        f.write(raw)
    return n


def test_damaged_chunk_statistics_are_never_served():
    s = Server(["--detect", "off", "--chunk-max-points", "1000"]).start()
    _write_ramp(s)
    s.stop()  # sealed: one chunk, answered from its statistics
    s.start()
    st, obj = _min_from_stats(s)
    assert st == 200 and obj["series"][0]["min"] == [1000.0], obj
    assert obj["chunks_from_stats"] == 1, obj
    s.stop()
    assert _flip_stats_min(s.data_dir) >= 1
    # verify (read-only) finds it and changes nothing
    before = _tree(s.data_dir)
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "DAMAGED" in r.stdout and "index entry of chunk" in r.stdout, r.stdout
    assert '"index_damaged":1' in r.stdout, r.stdout
    assert _tree(s.data_dir) == before, "verify changed the data directory"
    # the query decodes the chunk instead: the right minimum, never 744
    s.start()
    st, obj = _min_from_stats(s)
    assert st == 200, (st, obj)
    ser = obj["series"][0]
    assert ser["min"] == [1000.0] and ser["count"] == [1000], ser  # recomputed from the chunk
    assert _metric(s, "rankdb_index_damaged_reads_total") >= 1
    assert "failed its checksum" in s.log_text()
    raw = s.query_ok(job="st", metric="m")
    assert raw["points"] == 1000
    s.stop()
    # verify --quarantine rewrites the entry from the intact chunk
    r = _rankctl("--data-dir", s.data_dir, "verify", "--quarantine")
    assert r.returncode == 3 and '"index_damaged":1' in r.stdout, r.stdout
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    s.start()
    st, obj = _min_from_stats(s)
    assert st == 200 and obj["series"][0]["min"] == [1000.0], obj
    assert obj["chunks_from_stats"] == 1, obj
    s.stop()


FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                       "format2-datadir.tar.gz")


def test_format2_index_is_upgraded_with_checksums():
    """A data directory written by the previous release (format 2: chunk
    entries without checksums; tests/integration/fixtures/README.md) is read
    as it is by verify, upgraded in place at the first start, answers the
    same, and from then on a flipped statistic is detected."""
    s = Server(["--detect", "off"])
    with tarfile.open(FIXTURE) as tf:
        tf.extractall(s.workdir)
    data = os.path.join(s.workdir, "data")
    s.data_dir = data
    with open(os.path.join(data, "FORMAT")) as f:
        assert f.read() == "rankdb data directory\nformat 2\n"
    before = _tree(data)
    r = _rankctl("--data-dir", data, "verify")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert _tree(data) == before
    s.start()
    assert "upgrading to format 5" in s.log_text()
    # meta counters, batch ids, ...: every value of the other tables sealed
    m = re.search(r"(\d+) values of the other tables given a checksum", s.log_text())
    assert m and int(m.group(1)) > 0, s.log_text()[-3000:]
    st, obj = _min_from_stats(s, "old")
    assert st == 200 and obj["series"][0]["min"] == [1000.0], obj
    assert obj["series"][0]["count"] == [1000] and obj["chunks_from_stats"] == 1, obj
    assert s.get_json("/api/v1/jobs/old/meta") == (200, {"world_size": 8})
    s.stop()
    with open(os.path.join(data, "FORMAT")) as f:
        assert f.read() == "rankdb data directory\nformat 5\n"
    r = _rankctl("--data-dir", data, "verify")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert _flip_stats_min(data) >= 1
    r = _rankctl("--data-dir", data, "verify")
    assert r.returncode == 3 and '"index_damaged":1' in r.stdout, r.stdout
    s.start()
    st, obj = _min_from_stats(s, "old")
    assert st == 200 and obj["series"][0]["min"] == [1000.0], obj
    s.stop()


def test_statistics_damaged_before_the_upgrade_are_found_by_verify():
    """A format 2 entry has no checksum: damage from before the upgrade is
    given one by it. verify compares every entry's statistics with its
    chunk's points, so it still finds it (before and after the upgrade) and
    --quarantine rewrites the entry from the chunk."""
    s = Server(["--detect", "off"])
    with tarfile.open(FIXTURE) as tf:
        tf.extractall(s.workdir)
    data = os.path.join(s.workdir, "data")
    s.data_dir = data
    assert _flip_stats_min(data) >= 1
    r = _rankctl("--data-dir", data, "verify")
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "differ from the chunk's points" in r.stdout and '"index_damaged":1' in r.stdout, r.stdout
    s.start()  # the upgrade: the damaged statistics get a checksum
    s.stop()
    r = _rankctl("--data-dir", data, "verify", "--quarantine")
    assert r.returncode == 3 and "differ from the chunk's points" in r.stdout, r.stdout
    r = _rankctl("--data-dir", data, "verify")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    s.start()
    st, obj = _min_from_stats(s, "old")
    assert st == 200 and obj["series"][0]["min"] == [1000.0], obj
    s.stop()


def _flip_event_entry(data_dir, job, at, mask):
    """XORs mask into byte `at` of every stored copy of the job's event chunk
    entry (key: job, 0, min_ts, uid (16 bytes); then the entry, version 2):
    48..55 is max_ts, 16..23 the record's offset, 88.. the token filter.
    Returns copies."""
    path = os.path.join(data_dir, "index", "data.mdb")
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    key = job.encode() + b"\x00"
    n, pos = 0, raw.find(key)
    while pos >= 0:
        entry = pos + len(key) + 16
        if entry + 88 <= len(raw) and raw[entry] == 2 and raw[entry + 3] == 0:
            raw[entry + at] ^= mask
            n += 1
        pos = raw.find(key, pos + 1)
    with open(path, "wb") as f:
        f.write(raw)
    return n


def _event_logs(s, job):
    items = urllib.parse.urlencode([("job", job), ("from", str(T0)), ("limit", "1000")])
    return s.get_json("/api/v1/logs?" + items)


def test_damaged_event_chunk_entry_is_read_around():
    """Format 5: event chunk entries carry a checksum (as chunk entries do).
    A flipped sign bit of the entry's max_ts used to make a query from T0
    skip the chunk silently; now verify names the entry, the query reads the
    chunk instead and answers every log, and verify --quarantine rewrites the
    entry from the chunk. An entry whose location is damaged too cannot be
    read around: the query fails, verify --quarantine moves the entry aside,
    and rebuild-index recreates it from the chunk."""
    s = Server(["--detect", "off"]).start()
    recs = [{"type": "log", "job": "evd", "rank": 0, "timestamp": T0 + i * 1000, "attempt": 0,
             "level": "info", "message": "hello %d" % i, "step": i} for i in range(50)]
    deadline = time.monotonic() + 30
    while True:
        st, obj = s.write(recs)
        if st == 200 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert st == 200, (st, obj)
    st, obj = _event_logs(s, "evd")
    assert st == 200 and len(obj["logs"]) == 50, (st, obj)
    s.stop()  # the checkpoint seals the events into an event chunk
    assert _flip_event_entry(s.data_dir, "evd", 55, 0x80) >= 1  # max_ts < 0
    before = _tree(s.data_dir)
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "index entry of event chunk" in r.stdout and "the chunk is intact" in r.stdout, r.stdout
    assert '"index_damaged":1' in r.stdout, r.stdout
    assert _tree(s.data_dir) == before, "verify changed the data directory"
    s.start()
    st, obj = _event_logs(s, "evd")
    assert st == 200 and len(obj["logs"]) == 50, (st, obj)
    assert _metric(s, "rankdb_index_damaged_reads_total") >= 1
    s.stop()
    r = _rankctl("--data-dir", s.data_dir, "verify", "--quarantine")
    assert r.returncode == 3 and '"index_damaged":1' in r.stdout, r.stdout
    assert '"quarantined":0' in r.stdout, r.stdout  # rewritten, not moved aside
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    s.start()
    st, obj = _event_logs(s, "evd")
    assert st == 200 and len(obj["logs"]) == 50, (st, obj)
    assert _metric(s, "rankdb_index_damaged_reads_total") == 0
    s.stop()
    # the location too: the offset 64 KiB off
    assert _flip_event_entry(s.data_dir, "evd", 18, 0x01) >= 1
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 3 and "does not lead to its chunk" in r.stdout, r.stdout
    s.start()
    st, obj = _event_logs(s, "evd")
    assert st == 500, (st, obj)
    s.stop()
    r = _rankctl("--data-dir", s.data_dir, "verify", "--quarantine")
    assert r.returncode == 3 and '"quarantined":1' in r.stdout, r.stdout
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    s.start()
    st, obj = _event_logs(s, "evd")
    assert st == 404, (st, obj)  # its only chunk is quarantined: no such job any more
    s.stop()
    r = _rankctl("--data-dir", s.data_dir, "rebuild-index")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    s.start()
    st, obj = _event_logs(s, "evd")
    assert st == 200 and len(obj["logs"]) == 50, (st, obj)
    s.stop()
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)


def test_damaged_event_token_filter_is_read_around():
    """The seal of an event chunk entry covers its key and fixed part; the
    token filter has a checksum of its own, checked only when a query with
    words consults it. A flipped filter byte: a query without words uses
    the entry as it is; one with words decodes the chunk instead (counted),
    so no log is lost; verify names it and --quarantine rewrites it."""
    s = Server(["--detect", "off"]).start()
    recs = [{"type": "log", "job": "evf", "rank": 0, "timestamp": T0 + i * 1000, "attempt": 0,
             "level": "info", "message": "hello %d" % i, "step": i} for i in range(50)]
    assert s.write(recs)[0] == 200
    s.stop()
    n = 0
    for at in range(88, 88 + 64):  # every byte of the smallest filter: "hello"'s bits too
        n = _flip_event_entry(s.data_dir, "evf", at, 0xff)
    assert n >= 1
    s.start()
    st, obj = _event_logs(s, "evf")
    assert st == 200 and len(obj["logs"]) == 50, (st, obj)
    assert _metric(s, "rankdb_index_damaged_reads_total") == 0  # filter not consulted
    items = urllib.parse.urlencode([("job", "evf"), ("from", str(T0)), ("limit", "1000"),
                                    ("q", "hello")])
    st, obj = s.get_json("/api/v1/logs?" + items)
    assert st == 200 and len(obj["logs"]) == 50, (st, obj)
    assert _metric(s, "rankdb_index_damaged_reads_total") == 1
    s.stop()
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 3 and '"index_damaged":1' in r.stdout, r.stdout
    r = _rankctl("--data-dir", s.data_dir, "verify", "--quarantine")
    assert r.returncode == 3 and '"quarantined":0' in r.stdout, r.stdout
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    s.start()
    st, obj = s.get_json("/api/v1/logs?" + items)
    assert st == 200 and len(obj["logs"]) == 50, (st, obj)
    assert _metric(s, "rankdb_index_damaged_reads_total") == 0
    s.stop()


def test_damaged_tombstone_is_named_by_verify():
    """Format 5: the small tables' values carry a checksum too. A flipped
    tombstone generation (which decides which WAL records of a deleted job
    replay skips) is named by verify, and the server refuses to start on it
    instead of replaying by a wrong generation."""
    token = "tomb-token-for-tests"
    s = Server(["--detect", "off", "--admin-token", token]).start()
    s.write_ok([{"job": "tomb", "rank": 0, "step": 1, "timestamp": T0, "metrics": {"a": 1.0}}])
    st, _, body = s.request("DELETE", "/api/v1/admin/jobs/tomb",
                            headers={"Authorization": "Bearer " + token})
    assert st == 200, (st, body)
    s.stop()
    path = os.path.join(s.data_dir, "index", "data.mdb")
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    # a tombstone: key "tomb", then the generation (u64) and its checksum;
    # flip the high byte of every 16-byte value after the key whose
    # generation is small (other uses of "tomb" are series keys: "tomb\0")
    n, pos = 0, raw.find(b"tomb")
    while pos >= 0:
        v = pos + 4
        if v + 16 <= len(raw) and raw[v] != 0 and struct.unpack_from("<Q", raw, v)[0] < 1 << 20:
            raw[v + 7] ^= 0x40
            n += 1
        pos = raw.find(b"tomb", pos + 1)
    with open(path, "wb") as f:
        f.write(raw)
    assert n >= 1
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "tombstones entry with key 'tomb'" in r.stdout, r.stdout
    rc, text = s.start_expect_failure()
    assert "tombstones entry with key 'tomb' failed its checksum" in text, text[-2000:]


def test_quarantined_event_chunk_survives_compaction():
    """A quarantined entry is not in the events table, so compaction would
    not copy its record and would delete it with the segment, before
    rebuild-index could recreate the entry from it. Compaction (admin,
    rankctl, background, the recovery rewrite) refuses while the quarantine
    is not empty; rebuild-index then brings every log back."""
    token = "quar-token-for-tests"
    auth = {"Authorization": "Bearer " + token}
    s = Server(["--detect", "off", "--admin-token", token]).start()
    recs = [{"type": "log", "job": "evd", "rank": 0, "timestamp": T0 + i * 1000, "attempt": 0,
             "level": "info", "message": "hello %d" % i, "step": i} for i in range(50)]
    assert s.write(recs)[0] == 200
    s.write_ok([{"job": "pts", "rank": 0, "step": i, "timestamp": T0 + i * SEC,
                 "metrics": {"loss": float(i)}} for i in range(100)])
    s.stop()
    assert _flip_event_entry(s.data_dir, "evd", 18, 0x01) >= 1  # the offset
    r = _rankctl("--data-dir", s.data_dir, "verify", "--quarantine")
    assert r.returncode == 3 and '"quarantined":1' in r.stdout, r.stdout
    r = _rankctl("--data-dir", s.data_dir, "compact", "--min-live-pct", "100")
    assert r.returncode != 0 and "rebuild-index" in r.stderr, (r.returncode, r.stdout, r.stderr)
    s.start()
    st, _, body = s.request("POST", "/api/v1/admin/compact?min_live_pct=100", headers=auth)
    assert st == 409 and b"rebuild-index" in body, (st, body)
    assert _metric(s, "rankdb_compactions_refused_total") == 1
    s.stop()
    s.start()
    s.stop()
    r = _rankctl("--data-dir", s.data_dir, "rebuild-index")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    s.start()
    st, obj = _event_logs(s, "evd")
    assert st == 200 and len(obj["logs"]) == 50, (st, obj)
    st, _, body = s.request("POST", "/api/v1/admin/compact?min_live_pct=100", headers=auth)
    assert st == 200, (st, body)  # the quarantine is empty again
    s.stop()


def test_damaged_format_version_is_named():
    """A flipped byte in the checksum of the index's format_version (a
    16-byte sealed value) used to read as a malformed value of the old
    layout: verify could not open the directory and the start named no
    checksum. Now verify goes on and names the key; the start fails naming
    it."""
    s = Server(["--detect", "off"]).start()
    s.write_ok([{"job": "fv", "rank": 0, "step": 1, "timestamp": T0, "metrics": {"a": 1.0}}])
    s.stop()
    path = os.path.join(s.data_dir, "index", "data.mdb")
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    n, pos = 0, raw.find(b"format_version")
    while pos >= 0:
        v = pos + len(b"format_version")
        if v + 16 <= len(raw) and struct.unpack_from("<Q", raw, v)[0] == 5:
            raw[v + 11] ^= 0x20  # a byte of the trailer
            n += 1
        pos = raw.find(b"format_version", pos + 1)
    with open(path, "wb") as f:
        f.write(raw)
    assert n >= 1
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "meta entry with key 'format_version'" in r.stdout, r.stdout
    rc, text = s.start_expect_failure()
    assert "meta entry with key 'format_version' failed its checksum" in text, text[-2000:]
    assert "malformed" not in text, text[-2000:]


def _event_entry_segment(data_dir, job):
    path = os.path.join(data_dir, "index", "data.mdb")
    with open(path, "rb") as f:
        raw = f.read()
    key = job.encode() + b"\x00"
    pos = raw.find(key)
    while pos >= 0:
        entry = pos + len(key) + 16
        if entry + 88 <= len(raw) and raw[entry] == 2 and raw[entry + 3] == 0:
            return struct.unpack_from("<Q", raw, entry + 8)[0]
        pos = raw.find(key, pos + 1)
    raise AssertionError("no event chunk entry of job %s" % job)


def test_unreadable_chunk_does_not_quarantine_its_entry():
    """verify --quarantine moves a damaged event chunk entry aside only when
    its chunk provably is not where it says (no such segment file): a read
    that fails otherwise (here EISDIR: a directory where the damaged segment
    id leads) fails verify and leaves the entry for the next run."""
    s = Server(["--detect", "off"]).start()
    recs = [{"type": "log", "job": "evr", "rank": 0, "timestamp": T0 + i * 1000, "attempt": 0,
             "level": "info", "message": "hello %d" % i, "step": i} for i in range(50)]
    assert s.write(recs)[0] == 200
    s.stop()
    seg = _event_entry_segment(s.data_dir, "evr")
    assert _flip_event_entry(s.data_dir, "evr", 9, 0x01) >= 1  # segment id + 256
    bogus = os.path.join(s.data_dir, "chunks", "seg-%016x.dat" % (seg ^ 0x100))
    os.mkdir(bogus)
    r = _rankctl("--data-dir", s.data_dir, "verify", "--quarantine")
    assert r.returncode not in (0, 3), (r.returncode, r.stdout, r.stderr)
    assert '"quarantined":1' not in r.stdout, r.stdout
    os.rmdir(bogus)
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 3 and "does not lead to its chunk" in r.stdout, r.stdout
    r = _rankctl("--data-dir", s.data_dir, "verify", "--quarantine")
    assert r.returncode == 3 and '"quarantined":1' in r.stdout, r.stdout


def test_job_delete_quarantines_damaged_entries_not_provably_its():
    """A job deletion deletes a damaged event chunk entry under the job's key
    only when its location leads to an intact chunk of that uid naming the
    job; one that does not (its key may be another job's, damaged into this
    one's) goes to the quarantine instead, so compaction cannot delete the
    record before rebuild-index has looked at it."""
    token = "del-token-for-tests"
    auth = {"Authorization": "Bearer " + token}
    s = Server(["--detect", "off", "--admin-token", token]).start()
    for job in ("dx", "dy"):
        recs = [{"type": "log", "job": job, "rank": 0, "timestamp": T0 + i * 1000,
                 "attempt": 0, "level": "info", "message": "hi %d" % i, "step": i}
                for i in range(20)]
        assert s.write(recs)[0] == 200
    s.stop()
    assert _flip_event_entry(s.data_dir, "dx", 55, 0x80) >= 1  # max_ts: still leads there
    assert _flip_event_entry(s.data_dir, "dy", 9, 0x01) >= 1  # segment id: leads nowhere
    s.start()
    st, _, body = s.request("DELETE", "/api/v1/admin/jobs/dx", headers=auth)
    assert st == 200, (st, body)
    assert "moved to the quarantine" not in s.log_text()  # provably dx's: deleted
    st, _, body = s.request("DELETE", "/api/v1/admin/jobs/dy", headers=auth)
    assert st == 200, (st, body)
    assert ("deleting job dy: 1 event chunk index entry under its key failed"
            in s.log_text()), s.log_text()[-3000:]
    st, _, body = s.request("POST", "/api/v1/admin/compact", headers=auth)
    assert st == 409 and b"holds index entries (1;" in body, (st, body)
    s.stop()
    r = _rankctl("--data-dir", s.data_dir, "rebuild-index")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    s.start()
    st, _, body = s.request("POST", "/api/v1/admin/compact", headers=auth)
    assert st == 200, (st, body)
    s.stop()


def test_unreadable_segment_does_not_quarantine_chunk_entries():
    """An intact chunk entry whose segment cannot be read for a reason that
    says nothing about the chunk (EISDIR here: a directory in place of the
    segment file; EIO or EMFILE alike) fails verify --quarantine and keeps
    its entry, instead of being moved to the quarantine as if the chunk were
    damaged."""
    s = Server(["--detect", "off"]).start()
    s.write_ok([{"job": "ur", "rank": 0, "step": i, "timestamp": T0 + i * SEC,
                 "metrics": {"loss": float(i)}} for i in range(100)])
    s.stop()
    chunks = os.path.join(s.data_dir, "chunks")
    segs = sorted(f for f in os.listdir(chunks) if f.startswith("seg-"))
    assert segs, os.listdir(chunks)
    path = os.path.join(chunks, segs[0])
    os.rename(path, path + ".away")
    os.mkdir(path)
    r = _rankctl("--data-dir", s.data_dir, "verify", "--quarantine")
    assert r.returncode not in (0, 3), (r.returncode, r.stdout, r.stderr)
    assert '"quarantined":' not in r.stdout or '"quarantined":0' in r.stdout, r.stdout
    os.rmdir(path)
    os.rename(path + ".away", path)
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
