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
