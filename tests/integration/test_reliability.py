"""Reliability (issue 10): what a torture run found. Each test reproduces one
finding against the real server: a request-supplied regex that would take
gigabytes, WAL damage in the middle of the log, verify being read-only, slow
and stalled clients, refusal logging, the smaller protocol items."""

import json
import os

from harness import T0, Server

SEC = 1_000_000_000


def _vm_kb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError("%s not in /proc/%d/status" % (key, pid))


def _grafana_query(targets, **extra):
    body = {"range": {"from": "2023-11-14T22:13:20.000Z", "to": "2023-11-14T23:13:20.000Z"},
            "intervalMs": 1000, "maxDataPoints": 100, "targets": targets}
    body.update(extra)
    return body


def test_regex_blowup_refused_with_400():
    s = Server().start()
    s.write_ok([{"job": "j1", "rank": r, "step": 1, "timestamp": T0 + r,
                 "metrics": {"loss": 1.0, "lr": 0.1}} for r in range(4)])
    bomb = "((a{255}){255}){255}"
    st, _, data = s.post("/grafana/query", json.dumps(_grafana_query(
        [{"refId": "A", "target": bomb, "payload": {"job": "j1"}}])))
    obj = json.loads(data)
    assert st == 400, (st, obj)
    assert "too complex" in obj["message"], obj
    # the same pattern as an ad hoc =~ filter, and a backreference
    for op, val in (("=~", bomb), ("!~", bomb), ("=~", "(a)\\1")):
        st, _, data = s.post("/grafana/query", json.dumps(_grafana_query(
            [{"refId": "A", "target": "loss"}],
            filters=[{"key": "metric", "operator": op, "value": val}])))
        obj = json.loads(data)
        assert st == 400, (op, val, st, obj)
        assert "regex" in obj["message"], obj
    # ordinary patterns still work
    st, _, data = s.post("/grafana/query", json.dumps(_grafana_query(
        [{"refId": "A", "target": "(loss|lr)", "payload": {"job": "j1"}}],
        filters=[{"key": "rank", "operator": "=~", "value": "[0-1]"}])))
    assert st == 200, (st, data[:300])
    assert len(json.loads(data)) == 4, data[:300]
    # memory: the high-water mark stayed far from the gigabytes it took before
    hwm_kb = _vm_kb(s.pid(), "VmHWM")
    assert hwm_kb < 256 * 1024, "rankdbd peak RSS %d KiB after the patterns" % hwm_kb
    s.stop()


def _rankctl(*args):
    import subprocess
    exe = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        os.environ.get("RDB_BIN") or "build/server/rankdbd"))), "tools", "rankctl")
    return subprocess.run([exe] + list(args), capture_output=True, text=True, timeout=120)


def _wal_files(data_dir):
    d = os.path.join(data_dir, "wal")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.startswith("wal-"))


def _wal_records(path):
    """(offset, length) of each record of a WAL file (header 32, record header 16)."""
    import struct
    with open(path, "rb") as f:
        data = f.read()
    out, off = [], 32
    while off + 16 <= len(data):
        (n,) = struct.unpack_from("<I", data, off)
        out.append((off, 16 + n))
        off += 16 + n
    return out


def _ten_acked_records(s, job="walj"):
    for b in range(10):
        s.write_ok([{"job": job, "rank": 0, "step": b * 100 + i, "timestamp": T0 + (b * 100 + i) * SEC,
                     "metrics": {"loss": float(b * 100 + i)}} for i in range(100)])


def _tree(d):
    """Every file under d with its size, mtime and content: what read-only means."""
    import hashlib
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            st = os.stat(p)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = (st.st_size, st.st_mtime_ns,
                                              hashlib.sha256(fh.read()).hexdigest())
    return out


def test_wal_damage_in_the_middle_keeps_the_intact_records():
    s = Server().start()
    _ten_acked_records(s)
    s.kill9()
    wal = _wal_files(s.data_dir)[-1]
    recs = _wal_records(wal)
    assert len(recs) == 10, recs
    off, length = recs[0]
    with open(wal, "r+b") as f:  # one bit in the payload of the first record
        f.seek(off + 16 + length // 2)
        b = f.read(1)
        f.seek(off + 16 + length // 2)
        f.write(bytes([b[0] ^ 0x10]))
    # verify sees the damage before any start, and changes nothing
    before = _tree(s.data_dir)
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "damaged record" in r.stdout + r.stderr, r.stdout + r.stderr
    assert _tree(s.data_dir) == before
    s.start()
    log = s.log_text()
    assert "this is damage, not a crash" in log, log[-3000:]
    obj = s.query_ok(job="walj", metric="loss", step_from=0, step_to=10_000)
    steps = obj["series"][0]["steps"] if obj["series"] else []
    assert steps == list(range(100, 1000)), "got %d points, expected the 900 of the 9 intact records" % len(steps)
    # the damaged bytes are kept aside, byte for byte
    qdir = os.path.join(s.data_dir, "quarantine")
    kept = [f for f in os.listdir(qdir) if f.endswith(".damaged")]
    assert len(kept) == 1, kept
    assert os.path.getsize(os.path.join(qdir, kept[0])) == length
    st, _, body = s.get("/metrics")
    text = body.decode()
    assert "rankdb_wal_damaged_ranges 1\n" in text, text
    assert "rankdb_wal_damage_kept_files 1\n" in text, text
    # restarts keep reporting it (the WAL file itself is gone after the checkpoint)
    s.stop()
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 3 and "WAL damage kept in" in r.stdout + r.stderr, r.stdout + r.stderr
    s.start()
    st, _, body = s.get("/metrics")
    assert "rankdb_wal_damage_kept_files 1\n" in body.decode()
    obj = s.query_ok(job="walj", metric="loss", step_from=0, step_to=10_000)
    assert obj["series"][0]["steps"] == list(range(100, 1000))
    s.stop()


def test_torn_tail_is_not_damage():
    s = Server().start()
    _ten_acked_records(s)
    s.kill9()
    wal = _wal_files(s.data_dir)[-1]
    off, length = _wal_records(wal)[-1]
    with open(wal, "r+b") as f:  # a crash in the middle of appending one more record
        f.seek(0, 2)
        f.write(bytes(f.read(0)) + b"\x40\x00\x00\x00\x03\x00\x00\x00" + b"\x00" * 20)
    r = _rankctl("--data-dir", s.data_dir, "verify")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    s.start()
    obj = s.query_ok(job="walj", metric="loss", step_from=0, step_to=10_000)
    assert obj["series"][0]["steps"] == list(range(1000))
    assert not os.path.isdir(os.path.join(s.data_dir, "quarantine")) or not os.listdir(
        os.path.join(s.data_dir, "quarantine"))
    s.stop()


def test_verify_on_data_dir_is_read_only():
    s = Server().start()
    _ten_acked_records(s)
    s.kill9()
    before = _tree(s.data_dir)
    assert any(p.startswith("wal/") for p in before), before
    for _ in range(2):
        r = _rankctl("--data-dir", s.data_dir, "verify")
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        assert '"ok":true' in r.stdout, r.stdout
        assert _tree(s.data_dir) == before, "verify changed the data directory"
    s.start()  # and the data is all there
    obj = s.query_ok(job="walj", metric="loss", step_from=0, step_to=10_000)
    assert obj["series"][0]["steps"] == list(range(1000))
    s.stop()
