"""Alert delivery (detect/notify.c) against a real Alertmanager.

rankdbd does not wire detection in yet, so these tests drive delivery with
the notify_send test program (tests/unit/notify_send.c, built next to the
unit tests): each alert given on its command line goes through det_notify
exactly as rankdbd will send it. End-to-end tests through rankdbd reuse
alertmanager.py.
"""

import datetime
import json
import os
import subprocess
import time

import harness
from alertmanager import Alertmanager, WebhookReceiver, free_port

NS = 1000000000


def notify_send_bin():
    if os.environ.get("RDB_NOTIFY_SEND"):
        return os.environ["RDB_NOTIFY_SEND"]
    build = os.path.dirname(os.path.dirname(harness.bin_path()))  # build/server/rankdbd
    return os.path.join(build, "tests", "unit", "notify_send")


def notify_send(args, expect_rc=0):
    """Runs notify_send; returns its counters (the JSON line it prints)."""
    argv = [notify_send_bin()] + list(args)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=90)
    out = p.stdout.decode()
    if expect_rc is not None and p.returncode != expect_rc:
        raise AssertionError("%s exited %d (want %d)\nstdout: %s\nstderr: %s"
                             % (" ".join(argv), p.returncode, expect_rc, out,
                                p.stderr.decode()[-3000:]))
    return json.loads(out.strip().splitlines()[-1])


def rfc3339_ms(ns):
    t = datetime.datetime.fromtimestamp(ns // NS, tz=datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + ".%03dZ" % ((ns % NS) // 1000000)


def parse_time(s):
    """Alertmanager's RFC 3339 time -> ns (millisecond precision is all we send)."""
    main, _, frac = s.rstrip("Z").partition(".")
    t = datetime.datetime.strptime(main, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    frac = (frac + "000000000")[:9]
    return int(t.timestamp()) * NS + int(frac)


def now_ms_ns():
    """Wall clock rounded to a millisecond, as ns."""
    return (time.time_ns() // 1000000) * 1000000


def test_firing_alert_arrives_with_exact_labels():
    am = Alertmanager().start()
    now = now_ms_ns()
    starts = now - 42 * NS
    stats = notify_send(["--am", am.url(), "--generator", "http://127.0.0.1:8086/",
                         "--now-ns", str(now),
                         "--alert", "alertname=Straggler", "job=llama-70b.run7", "rank=211",
                         "phase=dataloader", "severity=warning",
                         "summary=rank 211 is a straggler in dataloader",
                         "description=dataloader 1.84 s/step vs peers' median 1.02 s over 30 steps",
                         "value=1.84", "baseline=1.02", "step=4500",
                         "starts_ns=%d" % starts])
    assert stats["sent_am"] == 1 and stats["failed_am"] == 0, stats
    a = am.wait_alert({"alertname": "Straggler"})
    assert a["labels"] == {"alertname": "Straggler", "job": "llama-70b.run7", "rank": "211",
                           "severity": "warning", "phase": "dataloader"}, a["labels"]
    assert a["annotations"] == {
        "summary": "rank 211 is a straggler in dataloader",
        "description": "dataloader 1.84 s/step vs peers' median 1.02 s over 30 steps",
        "value": "1.84", "baseline": "1.02", "step": "4500"}, a["annotations"]
    assert parse_time(a["startsAt"]) == starts, (a["startsAt"], rfc3339_ms(starts))
    # The lease: now + 4 x max(resend 60 s, evaluation 1 s).
    assert parse_time(a["endsAt"]) == now + 240 * NS, (a["endsAt"], rfc3339_ms(now + 240 * NS))
    assert a["status"]["state"] == "active", a["status"]
    assert a["generatorURL"] == \
        "http://127.0.0.1:8086/api/v1/alerts?job=llama-70b.run7&alertname=Straggler"
    am.stop()


def test_resolved_alert_clears_at_once():
    am = Alertmanager().start()
    base = ["--am", am.url()]
    fire = []
    for rank in (1, 2):
        fire += ["--alert", "alertname=RankDown", "job=j1", "rank=%d" % rank,
                 "severity=critical", "summary=rank %d silent for 31 s" % rank]
    stats = notify_send(base + fire)
    assert stats["sent_am"] == 2, stats
    am.wait_alert({"alertname": "RankDown", "rank": "1"})
    am.wait_alert({"alertname": "RankDown", "rank": "2"})
    # A re-send of a firing alert does not duplicate it.
    notify_send(base + ["--alert", "alertname=RankDown", "job=j1", "rank=2",
                        "severity=critical", "resend=1"])
    assert len(am.find({"alertname": "RankDown", "rank": "2"})) == 1
    # Rank 1 recovers: resolved with endsAt = now, gone from the active list
    # at once (no resolve_timeout wait); rank 2 stays.
    stats = notify_send(base + ["--alert", "alertname=RankDown", "job=j1", "rank=1",
                                "severity=critical", "state=resolved"])
    assert stats["sent_am"] == 1, stats
    am.wait_gone({"alertname": "RankDown", "rank": "1"})
    a = am.wait_alert({"alertname": "RankDown", "rank": "2"})
    assert a["status"]["state"] == "active"
    am.stop()


def test_batch_webhook_and_alertmanager_routing():
    """Several alerts in one run go to Alertmanager (which routes them on to its
    own receiver) and each alert's transition goes to the rule's webhook."""
    amhook = WebhookReceiver("am-receiver").start()
    hook = WebhookReceiver("rule-webhook").start()
    am = Alertmanager(webhook_url=amhook.url("/am")).start()
    args = ["--am", am.url()]
    for rank in range(4):
        args += ["--alert", "alertname=GpuOverheat", "job=j2", "rank=%d" % rank,
                 "severity=critical", "value=91", "baseline=85",
                 "webhook=%s" % hook.url("/controller?job=j2")]
    stats = notify_send(args)
    assert stats["sent_am"] == 4 and stats["sent_webhook"] == 4, stats
    am.wait_alert({"alertname": "GpuOverheat", "job": "j2"}, count=4)
    reqs = hook.wait_for(lambda r: len(r) >= 4)
    assert sorted(r["json"]["labels"]["rank"] for r in reqs) == ["0", "1", "2", "3"]
    for r in reqs:
        assert r["path"] == "/controller?job=j2"
        assert r["headers"].get("Content-Type") == "application/json"
        doc = r["json"]
        assert doc["version"] == "1" and doc["source"] == "rankdb", doc
        assert doc["state"] == "firing" and doc["endsAt"] is None, doc
        assert doc["value"] == 91 and doc["baseline"] == 85, doc
    # Alertmanager grouped them (group_by alertname, job) and notified its receiver.
    got = amhook.wait_for(lambda r: any(x["json"] and x["json"].get("status") == "firing"
                                        and len(x["json"]["alerts"]) == 4 for x in r))
    assert got[-1]["json"]["groupLabels"] == {"alertname": "GpuOverheat", "job": "j2"}
    # Resolution reaches both.
    args = ["--am", am.url()]
    for rank in range(4):
        args += ["--alert", "alertname=GpuOverheat", "job=j2", "rank=%d" % rank,
                 "severity=critical", "state=resolved", "webhook=%s" % hook.url("/controller?job=j2")]
    notify_send(args)
    am.wait_gone({"alertname": "GpuOverheat"})
    reqs = hook.wait_for(lambda r: sum(1 for x in r if x["json"]["state"] == "resolved") == 4)
    amhook.wait_for(lambda r: any(x["json"] and x["json"].get("status") == "resolved" for x in r))
    am.stop()
    hook.stop()
    amhook.stop()


def test_dead_alertmanager_does_not_stop_delivery_to_live_one():
    am = Alertmanager().start()
    dead = "http://127.0.0.1:%d" % free_port()
    stats = notify_send(["--am", "%s,%s" % (dead, am.url()), "--max-attempts", "2",
                         "--alert", "alertname=JobDown", "job=j3", "severity=critical"],
                        expect_rc=1)
    assert stats["sent_am"] == 1 and stats["failed_am"] == 1 and stats["retried_am"] == 1, stats
    a = am.wait_alert({"alertname": "JobDown", "job": "j3"})
    assert "rank" not in a["labels"]  # a job-level alert has no rank label
    am.stop()
