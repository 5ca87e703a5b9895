"""Detection end to end: a real rankdbd watches runs fed over HTTP, raises
the built-in alerts with the right labels, delivers them to a webhook
receiver (and, in test_alertmanager_e2e, a real Alertmanager), writes each
transition into the job's logs, resolves them when the fault clears, keeps
them across a restart without re-sending, and never lets a dead receiver
slow ingest.

No timing assertions: every wait polls with a generous deadline and the
assertions are about what arrived, not how fast.
"""

import http.server
import json
import os
import threading
import time

from harness import Server, parse_json

JOB = "run1"
DEADLINE_S = 30


# ---------------------------------------------------------------------------
# a webhook receiver


class Hook:
    """Collects the JSON documents POSTed to http://127.0.0.1:<port>/hook."""

    def __init__(self):
        self.docs = []
        self.lock = threading.Lock()
        hook = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                with hook.lock:
                    hook.docs.append(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d/hook" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def matching(self, alertname, state):
        with self.lock:
            return [d for d in self.docs
                    if d["labels"]["alertname"] == alertname and d["state"] == state]

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


# ---------------------------------------------------------------------------
# a run


def step_records(job, step, ranks, slow_rank=None, nan_rank=None, cfg=None, ts=None):
    """One record per rank for one training step, the vocabulary the SDK
    sends: loss, grad_norm, step time and its phases, throughput, GPU."""
    ts = ts or time.time_ns()
    out = []
    for r in ranks:
        fwd = 0.100 + 0.002 * ((r * 7 + step) % 5)
        if r == slow_rank:
            fwd *= 2.5
        bwd, opt, dl = 0.200 + 0.001 * (r % 3), 0.030, 0.010
        coll = 0.050 + (0.15 if slow_rank is not None and r != slow_rank else 0.0)
        loss = 3.0 * (0.999 ** step) + 0.01 * (((r + step) * 37) % 11) / 11.0
        m = {"loss": float("nan") if r == nan_rank else loss,
             "grad_norm": 1.0 + 0.05 * ((step + r) % 7),
             "lr": 0.0003,
             "step_time": fwd + bwd + opt + dl + coll,
             "step_time.forward": fwd, "step_time.backward": bwd,
             "step_time.optimizer": opt, "step_time.dataloader": dl,
             "step_time.collective": coll,
             "samples_per_sec": 64.0 / (fwd + bwd + opt + dl + coll),
             "gpu.temp": 65.0 + r % 5, "heartbeat": 1.0}
        if cfg is not None:
            m["config_hash"] = float(cfg.get(r, 1234))
            m["world_size"] = float(len(ranks))
        out.append({"job": job, "rank": r, "step": step, "timestamp": ts + r, "metrics": m})
    return out


def write(s, recs):
    body = "".join(json.dumps(r, allow_nan=True) + "\n" for r in recs)
    st, _, data = s.post("/api/v1/write", body, content_type="application/x-ndjson",
                         keepalive=True)
    assert st == 200, (st, data)


def alerts(s, **params):
    q = "&".join("%s=%s" % kv for kv in params.items())
    st, _, body = s.get("/api/v1/alerts" + ("?" + q if q else ""))
    obj = parse_json(body, st, "/api/v1/alerts")
    assert st == 200, (st, obj)
    return obj["alerts"]


def wait_for(what, fn, deadline_s=DEADLINE_S, feed=None):
    """Polls fn() until it returns something truthy; feed() (if given) runs
    between polls, like a training loop that keeps going."""
    end = time.monotonic() + deadline_s
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        if feed:
            feed()
        time.sleep(0.05)


def rules_file(s, text):
    path = os.path.join(s.workdir, "rules.conf")
    with open(path, "w") as f:
        f.write(text)
    return path


class Run:
    """A run that advances one step per call of next()."""

    def __init__(self, s, job, ranks, **kw):
        self.s, self.job, self.ranks, self.kw, self.step = s, job, ranks, kw, 0

    def next(self, n=1, **override):
        for _ in range(n):
            self.step += 1
            kw = dict(self.kw)
            kw.update(override)
            write(self.s, step_records(self.job, self.step, self.ranks, **kw))


# ---------------------------------------------------------------------------


def test_loss_nan_fires_once_then_resolves():
    hook = Hook()
    s = Server(name="nan")
    path = rules_file(s, "[rule LossNonFinite]\nwebhook = %s\nclear_steps = 3\n" % hook.url)
    s.flags += ["--rules-file", path]
    s.start()
    run = Run(s, JOB, range(4))
    run.next(30)
    assert alerts(s, state="firing") == []
    run.next(1, nan_rank=2)
    run.next(1, nan_rank=2)  # a second NaN confirms the same alert, not a new one
    fired = wait_for("LossNonFinite firing", lambda: alerts(s, state="firing",
                                                           alertname="LossNonFinite"))
    assert len(fired) == 1, fired
    a = fired[0]
    assert a["rank"] == 2 and a["metric"] == "loss" and a["job"] == JOB, a
    assert a["severity"] in ("warning", "critical"), a
    # a NaN is one fault: no LossSpike beside it
    assert not [x for x in alerts(s) if x["alertname"] == "LossSpike"], alerts(s)
    wait_for("webhook firing", lambda: hook.matching("LossNonFinite", "firing"))
    doc = hook.matching("LossNonFinite", "firing")[0]
    assert doc["labels"]["job"] == JOB and doc["labels"]["rank"] == "2", doc
    # the transition is in the job's logs, at rank 2 (written by the
    # detector's own write after it hands the webhook its notification: wait)
    def logged():
        st, _, body = s.get("/api/v1/logs?job=%s&q=alert&rank=2" % JOB)
        logs = parse_json(body, st)["logs"]
        return any("LossNonFinite firing" in x["message"] for x in logs)
    wait_for("the LossNonFinite firing log line", logged)
    # finite again for a few steps: resolved, delivered, logged
    wait_for("LossNonFinite resolved",
             lambda: alerts(s, state="resolved", alertname="LossNonFinite"),
             feed=lambda: run.next(1))
    wait_for("webhook resolved", lambda: hook.matching("LossNonFinite", "resolved"))
    assert len(hook.matching("LossNonFinite", "firing")) == 1, hook.docs
    s.stop()
    hook.close()


def test_straggler_names_rank_and_phase():
    s = Server(name="straggler").start()
    run = Run(s, "strag", range(8), slow_rank=5)
    fired = wait_for("Straggler", lambda: alerts(s, state="firing", alertname="Straggler"),
                     feed=lambda: run.next(1), deadline_s=60)
    assert len(fired) == 1, fired
    assert fired[0]["rank"] == 5 and fired[0]["phase"] == "forward", fired
    assert run.step <= 30 + 10, "raised after %d steps" % run.step
    st, _, body = s.get("/api/v1/jobs/strag/health")
    h = parse_json(body, st)
    assert st == 200 and h["ranks_seen"] == 8, h
    states = {r["rank"]: r["state"] for r in h["ranks"]}
    assert states[5] == "straggler", states
    assert all(states[r] == "ok" for r in range(8) if r != 5), states
    assert "Straggler" in [r for r in h["ranks"] if r["rank"] == 5][0]["alerts"], h
    # no other alert for this fault
    others = [a for a in alerts(s) if a["alertname"] != "Straggler"]
    assert others == [], others
    s.stop()


def test_config_mismatch_and_health_of_unknown_job():
    s = Server(name="cfg").start()
    run = Run(s, "cfgjob", range(4), cfg={1: 9999})
    run.next(3)
    fired = wait_for("ConfigMismatch", lambda: alerts(s, alertname="ConfigMismatch"),
                     feed=lambda: run.next(1))
    assert fired[0]["rank"] == 1, fired
    st, _, body = s.get("/api/v1/jobs/nosuchjob/health")
    assert st == 404, (st, body)
    st, _, body = s.get("/api/v1/alerts?state=bogus")
    assert st == 400 and b"state" in body, (st, body)
    s.stop()


def test_hang_with_ranks_alive_and_rank_down():
    s = Server(name="hang")
    path = rules_file(s, "[rule TrainingHang]\nmin_s = 2\nstep_mult = 2\nfor = 0s\n"
                         "[rule RankDown]\nsilence_s = 3\nfor = 0s\n")
    s.flags += ["--rules-file", path]
    s.start()
    run = Run(s, "hangjob", range(4))
    run.next(20)

    def heartbeats(ranks):
        now = time.time_ns()
        write(s, [{"job": "hangjob", "rank": r, "timestamp": now, "metrics": {"heartbeat": 1}}
                  for r in ranks])

    # every rank alive (heartbeats), no step moves: a hang, not a crash
    fired = wait_for("TrainingHang", lambda: alerts(s, alertname="TrainingHang", state="firing"),
                     feed=lambda: heartbeats(range(4)))
    assert fired, fired
    assert not alerts(s, alertname="RankDown"), alerts(s)
    # steps move again: the hang resolves
    wait_for("TrainingHang resolved",
             lambda: alerts(s, alertname="TrainingHang", state="resolved"),
             feed=lambda: run.next(1))
    # rank 3 goes silent while its peers go on
    run.ranks = range(3)
    fired = wait_for("RankDown", lambda: alerts(s, alertname="RankDown", state="firing"),
                     feed=lambda: run.next(1))
    assert [a["rank"] for a in fired] == [3], fired
    s.stop()


def test_restart_keeps_firing_alert_without_resending():
    hook = Hook()
    s = Server(name="restart")
    path = rules_file(s, "[rule LossNonFinite]\nwebhook = %s\nclear_steps = 1000\n" % hook.url)
    s.flags += ["--rules-file", path]
    s.start()
    run = Run(s, "rs", range(4))
    run.next(10)
    run.next(1, nan_rank=1)
    fired = wait_for("LossNonFinite", lambda: alerts(s, state="firing",
                                                    alertname="LossNonFinite"))
    starts = fired[0]["starts_at"]
    wait_for("webhook", lambda: hook.matching("LossNonFinite", "firing"))
    s.stop()
    s.start()
    run.next(1, nan_rank=1)  # the fault persists after the restart
    run.next(3)
    again = wait_for("restored alert", lambda: alerts(s, state="firing",
                                                     alertname="LossNonFinite"))
    assert len(again) == 1 and again[0]["starts_at"] == starts, (fired, again)
    time.sleep(1.0)  # give a wrong re-send the chance to show
    assert len(hook.matching("LossNonFinite", "firing")) == 1, hook.docs
    st, _, body = s.get("/api/v1/logs?job=rs&q=alert&limit=1000")
    logs = parse_json(body, st)["logs"]
    firing = [x for x in logs if "LossNonFinite firing" in x["message"]]
    assert len(firing) == 1, logs
    s.stop()
    hook.close()


def test_dead_receiver_never_blocks_ingest():
    # a port nobody listens on: every delivery fails and is retried
    import socket
    sk = socket.socket()
    sk.bind(("127.0.0.1", 0))
    dead = sk.getsockname()[1]
    sk.close()
    s = Server(name="dead", flags=["--alertmanager-url", "http://127.0.0.1:%d" % dead]).start()
    run = Run(s, "dj", range(4))
    run.next(5)
    run.next(1, nan_rank=0)
    wait_for("alert", lambda: alerts(s, state="firing", alertname="LossNonFinite"))
    run.next(200)  # every write still acknowledged (write() asserts 200)

    def failed_attempts():
        st, _, body = s.get("/metrics")
        for line in body.decode().splitlines():
            if line.startswith('rankdb_alert_deliveries_total{receiver="alertmanager",'
                               'result="retried"}'):
                return float(line.split()[-1]) > 0
        return False
    wait_for("failed deliveries counted", failed_attempts)
    q = s.query_ok(job="dj", metric="loss")
    assert sum(len(x["values"]) for x in q["series"]) == 4 * 206, q["points"]
    s.stop()


def test_rules_reload_refuses_bad_file_and_keeps_rules():
    s = Server(name="reload", flags=["--admin-token", "t0ken"])
    path = rules_file(s, "[rule RankDown]\nsilence_s = 60\n")
    s.flags += ["--rules-file", path]
    s.start()
    auth = {"Authorization": "Bearer t0ken"}
    with open(path, "w") as f:
        f.write("[rule RankDown]\nsilence_s = banana\n")
    st, _, body = s.post("/api/v1/admin/rules/reload", b"", headers=auth)
    assert st == 422 and b"rules.conf:2" in body, (st, body)
    with open(path, "w") as f:
        f.write("[rule RankDown]\nsilence_s = 45\n[aliases]\nmy.loss = loss\n")
    st, _, body = s.post("/api/v1/admin/rules/reload", b"", headers=auth)
    assert st == 200, (st, body)
    assert b"1 aliases" in body, body
    # SIGHUP reloads too; a bad file then is logged and refused
    with open(path, "w") as f:
        f.write("[rule Nonsense]\n")
    import signal
    os.kill(s.pid(), signal.SIGHUP)
    wait_for("reload refused in the log", lambda: "rules reload refused" in s.log_text())
    assert s.running()
    s.stop()
    # a bad rules file keeps the server from starting, naming the line
    rc, text = s.start_expect_failure()
    assert "rules.conf:1" in text, text[-2000:]


def test_alertmanager_e2e_fire_resolve_and_restart():
    """A real Alertmanager gets rankdbd's alerts with their labels, sees them
    resolve when the fault clears, and holds one alert (not two) across a
    rankdbd restart."""
    from alertmanager import Alertmanager
    am = Alertmanager().start()
    s = Server(name="am")
    path = rules_file(s, "[rule LossNonFinite]\nclear_steps = 3\n"
                         "[rule Straggler]\nfor = 0s\n")
    s.flags += ["--rules-file", path, "--alertmanager-url", am.url(),
                "--alert-resend-interval-s", "1"]
    s.start()
    run = Run(s, "amjob", range(6))
    run.next(25)
    run.next(1, nan_rank=4)
    got = am.wait_alert({"alertname": "LossNonFinite", "job": "amjob", "rank": "4",
                         "metric": "loss", "severity": "critical"})
    assert got["annotations"].get("summary"), got
    assert "step" in got["annotations"], got
    # a straggler: its rank and phase reach Alertmanager as labels
    run.kw["slow_rank"] = 2
    for _ in range(60):
        run.next(1)
        if am.find({"alertname": "Straggler"}):
            break
    am.wait_alert({"alertname": "Straggler", "job": "amjob", "rank": "2", "phase": "forward"})
    # rankdbd restarts: the alerts stay one each in Alertmanager
    s.stop()
    s.start()
    run.next(2)
    time.sleep(2.5)  # past two re-send intervals: a duplicate would show now
    am.wait_alert({"alertname": "Straggler", "job": "amjob", "rank": "2"}, count=1)
    # the fault clears: resolved at once in Alertmanager (endsAt in the past)
    run.kw["slow_rank"] = None
    am.wait_gone({"alertname": "LossNonFinite", "job": "amjob"})
    st, _, body = s.get("/metrics")
    sent = [l for l in body.decode().splitlines()
            if l.startswith('rankdb_alert_deliveries_total{receiver="alertmanager",result="sent"}')]
    assert sent and float(sent[0].split()[-1]) >= 2, sent
    s.stop()
    am.stop()


def test_rankctl_rules_check_sample_and_reload():
    from test_admin import rankctl
    s = Server(name="rankctl-rules", flags=["--admin-token", "tk"])
    sample = rankctl("rules", "sample").stdout
    assert "[rule Straggler]" in sample and "[rule LossNonFinite]" in sample, sample[:500]
    path = rules_file(s, sample + "\n[job \"team-a-*\"]\nStraggler.enabled = false\n")
    out = json.loads(rankctl("rules", "check", path).stdout)
    assert out == {"file": path, "valid": True, "job_sections": 1, "aliases": 0}, out
    bad = rules_file(s, "[rule Straggler]\nrel = -3\n")
    p = rankctl("rules", "check", bad, check=False)
    assert p.returncode == 1 and "rules.conf:2" in p.stderr and "rel" in p.stderr, p.stderr
    s.flags += ["--rules-file", path]
    with open(path, "w") as f:
        f.write(sample)
    s.start()
    p = rankctl("--url", "http://127.0.0.1:%d" % s.port, "--token", "tk", "rules", "reload")
    assert '"reloaded":true' in p.stdout, p.stdout
    s.stop()
