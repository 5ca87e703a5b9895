"""Issue 10 item 7: damage in what answers queries without being a chunk is
detected, never served, counted and reported by verify: job metadata
documents (meta/<job>.meta) and the chunk statistics in the LMDB index."""

import json
import os
import subprocess

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
