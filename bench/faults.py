#!/usr/bin/env python3
"""faults.py - the detection benchmark: a real Alertmanager and a real
rankdbd on 127.0.0.1, bench/faultgen.py streaming a training run into it,
one fault at a time; per fault the time from the first faulty write's
acknowledgement to the alert in GET /api/v1/alerts and at Alertmanager, the
labels, and every other alert; then clean runs that must raise nothing.
bench/faults.sh builds rankdbd and runs this; see bench/README.md.

    bench/faults.py --rankdbd build/server/rankdbd [--ranks 64]
                    [--faults all|nan_loss,hang,...] [--clean 64:600,512:600]
                    [--tail-s 30] [--out bench/out] [--keep]

Timing sources (one machine, one clock: CLOCK_REALTIME everywhere):
- t_ack: faultgen's time.time() when the HTTP answer to the faulty body was
  read (for an absence, the ack of the last write that still showed it);
- API: the alert's starts_at in GET /api/v1/alerts (rankdbd's evaluation that
  made it fire), cross-checked by the 0.1 s poll that first saw it firing;
- Alertmanager: the alert's updatedAt in Alertmanager's GET /api/v2/alerts at
  the poll that first saw it (Alertmanager's own receive time);
- notification: when Alertmanager's webhook notification (group_wait 0s)
  reached the receiver in this process.
Only the PIDs this script starts are signalled; temp dirs under /tmp.
"""

import argparse
import datetime
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import faultgen  # noqa: E402  (the fault table)

AM_BIN = os.environ.get("RDB_ALERTMANAGER") or "/usr/bin/prometheus-alertmanager"

# fault -> (inject after s, wait for the alert after t_ack s, checkpoint every N steps,
#           configured wait in s before the alert may fire (None: in steps), its meaning)
PLAN = {
    "nan_loss": (40, 20, 300, 0, "for 0s"),
    "loss_spike": (40, 20, 300, 0, "for 0s"),
    "divergence": (80, 120, 300, None, "rising medians of 4 8-step blocks, +max(20 %, 6 SE)"),
    "grad_spike": (40, 20, 300, 0, "for 0s"),
    "loss_scale": (40, 40, 300, None, "4 halvings within 200 steps"),
    "hang": (40, 40, 300, "window", "window max(10 s, 10 x median step time)"),
    "rank_down": (40, 60, 300, 30, "silence_s 30"),
    "job_down": (40, 60, 300, 30, "silence_s 30"),
    "throughput": (80, 90, 300, 30, "for 30s"),
    "straggler_fwd": (40, 60, 300, None, "20 slow of 30 judged steps"),
    "straggler_data": (40, 60, 300, None, "20 slow of 30 judged steps"),
    "overheat": (40, 60, 300, 30, "for 30s"),
    "ecc": (40, 20, 300, 0, "for 0s"),
    "xid": (40, 20, 300, 0, "for 0s"),
    "config": (45, 20, 20, 0, "for 0s"),
    "ckpt_stale": (45, 90, 20, 60, "max_age_s 60 (rules file)"),
    "mfu_low": (0, 200, 300, 120, "warmup_s 60 + for 60s (rules file)"),
}

# Only where a default makes the benchmark impractically long.
RULES = """# bench/faults.py: defaults everywhere except these two jobs.
# CheckpointStale's default age is 2 h; MfuLow's defaults are a 300 s warm-up
# and a 300 s `for`.
[job "fault-ckpt_stale*"]
CheckpointStale.max_age_s = 60

[job "fault-mfu_low*"]
MfuLow.warmup_s = 60
MfuLow.for = 60s
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http_req(port, method, path, body=None, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def rfc3339(s):
    """Alertmanager's time text -> seconds since the epoch (float)."""
    m = re.match(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", s)
    if not m:
        return None
    y, mo, d, h, mi, se = (int(x) for x in m.groups()[:6])
    frac = float(m.group(7) or 0)
    t = datetime.datetime(y, mo, d, h, mi, se, tzinfo=datetime.timezone.utc).timestamp() + frac
    tz = m.group(8)
    if tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        t -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return t


class Notifications:
    """Alertmanager's webhook receiver: arrival time of each notified alert."""

    def __init__(self):
        self.lock = threading.Lock()
        self.got = []  # (t, status, labels)
        owner = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                t = time.time()
                n = int(self.headers.get("Content-Length") or 0)
                try:
                    doc = json.loads(self.rfile.read(n))
                except ValueError:
                    doc = {}
                with owner.lock:
                    for a in doc.get("alerts", []):
                        owner.got.append((t, a.get("status"), a.get("labels", {})))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d/am" % self.srv.server_address[1]

    def first(self, job):
        """identity -> first firing notification time, for one job."""
        out = {}
        with self.lock:
            for t, st, lb in self.got:
                if lb.get("job") == job and st == "firing":
                    out.setdefault(ident_labels(lb), t)
        return out


def ident_api(a):
    return (a["alertname"], a["rank"], a.get("phase") or "", a.get("metric") or "")


def ident_labels(lb):
    r = lb.get("rank")
    return (lb.get("alertname"), int(r) if r is not None else None, lb.get("phase", ""),
            lb.get("metric", ""))


def fmt_ident(i):
    s = i[0]
    if i[1] is not None:
        s += " rank=%d" % i[1]
    if i[2]:
        s += " phase=%s" % i[2]
    if i[3]:
        s += " metric=%s" % i[3]
    return s


class Bench:
    def __init__(self, a):
        self.a = a
        self.tmp = tempfile.mkdtemp(prefix="rankdb-faults.")
        self.procs = []
        self.note = Notifications()

    # -- processes --------------------------------------------------------------

    def start_am(self):
        d = os.path.join(self.tmp, "am")
        os.makedirs(d)
        cfg = os.path.join(d, "alertmanager.yml")
        with open(cfg, "w") as f:
            f.write("route:\n  receiver: hook\n  group_by: ['alertname', 'job', 'rank']\n"
                    "  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 4h\n"
                    "receivers:\n  - name: hook\n    webhook_configs:\n"
                    "      - url: %s\n        send_resolved: true\n" % json.dumps(self.note.url))
        self.am_port = free_port()
        log = open(os.path.join(d, "alertmanager.log"), "wb")
        p = subprocess.Popen([AM_BIN, "--config.file=" + cfg, "--storage.path=" + d + "/data",
                              "--web.listen-address=127.0.0.1:%d" % self.am_port,
                              "--cluster.listen-address="], stdout=log, stderr=log,
                             stdin=subprocess.DEVNULL)
        self.procs.append(p)
        self.am = p
        for _ in range(300):
            try:
                if http_req(self.am_port, "GET", "/-/ready")[0] == 200:
                    return
            except OSError:
                pass
            if p.poll() is not None:
                break
            time.sleep(0.1)
        raise SystemExit("alertmanager did not start; see %s/alertmanager.log" % d)

    def start_rankdbd(self):
        d = os.path.join(self.tmp, "rankdbd")
        os.makedirs(d)
        rules = os.path.join(d, "rules.conf")
        with open(rules, "w") as f:
            f.write(RULES)
        argv = [self.a.rankdbd, "--data-dir", d + "/data", "--http-port", "0",
                "--port-file", d + "/port", "--log-level", "info",
                "--alertmanager-url", "http://127.0.0.1:%d" % self.am_port,
                "--rules-file", rules]
        self.rankdbd_argv = argv
        log = open(os.path.join(d, "rankdbd.log"), "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        self.rdb = p
        for _ in range(300):
            if os.path.exists(d + "/port") and open(d + "/port").read().strip():
                self.port = int(open(d + "/port").read().strip())
                return
            if p.poll() is not None:
                break
            time.sleep(0.1)
        raise SystemExit("rankdbd did not start; see %s/rankdbd.log" % d)

    def cpu_s(self, p):
        with open("/proc/%d/stat" % p.pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if not self.a.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            print("kept %s" % self.tmp)

    # -- observing ----------------------------------------------------------------

    def poll(self, job, seen_api, seen_am):
        now = time.time()
        try:
            st, body = http_req(self.port, "GET", "/api/v1/alerts?job=" + job)
            if st == 200:
                for al in json.loads(body)["alerts"]:
                    i = ident_api(al)
                    e = seen_api.setdefault(i, {"first_poll": now, "states": []})
                    if al["state"] not in e["states"]:
                        e["states"].append(al["state"])
                    if al["state"] == "firing" and "firing_poll" not in e:
                        e["firing_poll"] = now
                        e["alert"] = al
        except (OSError, ValueError, http.client.HTTPException):
            pass
        try:
            q = urllib.parse.urlencode([("filter", 'job="%s"' % job)])
            st, body = http_req(self.am_port, "GET", "/api/v2/alerts?" + q)
            if st == 200:
                for al in json.loads(body):
                    i = ident_labels(al["labels"])
                    if i not in seen_am:
                        seen_am[i] = {"poll": now, "updatedAt": rfc3339(al["updatedAt"]),
                                      "startsAt": rfc3339(al["startsAt"]),
                                      "labels": al["labels"]}
        except (OSError, ValueError, http.client.HTTPException):
            pass

    # -- one generator run ---------------------------------------------------------

    def generator(self, job, ranks, fault, inject_after, duration, ckpt_every, seed):
        argv = [sys.executable, os.path.join(HERE, "faultgen.py"), "--port", str(self.port),
                "--job", job, "--ranks", str(ranks), "--duration-s", str(duration),
                "--ckpt-every", str(ckpt_every), "--seed", str(seed)]
        if fault:
            argv += ["--fault", fault, "--inject-after-s", str(inject_after)]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=sys.stderr,
                             stdin=subprocess.DEVNULL, text=True)
        self.procs.append(p)
        events = []

        def reader():
            for line in p.stdout:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        return p, events, t

    def end_job(self, job):
        """The job's controller marks it failed: nothing is judged any more."""
        http_req(self.port, "PUT", "/api/v1/jobs/%s/meta" % job,
                 json.dumps({"status": "failed", "world_size": 0}))

    def run_fault(self, name):
        a = self.a
        inject_after, wait_s, ckpt_every, cfg_wait, cfg_text = PLAN[name]
        expected = faultgen.FAULTS[name][1]
        job = "fault-%s-%d" % (name, os.getpid())
        duration = inject_after + wait_s + a.tail_s + 20
        print("== %s: %s" % (name, faultgen.FAULTS[name][0]), flush=True)
        p, events, reader = self.generator(job, a.ranks, name, inject_after, duration,
                                           ckpt_every, a.seed)
        seen_api, seen_am = {}, {}
        t_start = time.time()
        done_at = None
        while p.poll() is None:
            self.poll(job, seen_api, seen_am)
            fault = next((e for e in events if e.get("ev") == "fault"), None)
            if done_at is None:
                hit = [i for i in seen_am if i[0] == expected[0]]
                if hit and any(i[0] == expected[0] and "firing_poll" in e
                               for i, e in seen_api.items()):
                    done_at = time.time()
                elif fault and fault.get("t_ack") and time.time() > fault["t_ack"] + wait_s:
                    done_at = time.time()  # missed: watch the tail anyway
                elif time.time() > t_start + inject_after + wait_s + 60:
                    done_at = time.time()
            if done_at is not None and time.time() > done_at + a.tail_s:
                break
            time.sleep(0.1)
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(30)
        reader.join(5)
        self.end_job(job)
        return self.judge(name, job, expected, events, seen_api, seen_am, cfg_wait, cfg_text)

    def judge(self, name, job, expected, events, seen_api, seen_am, cfg_wait, cfg_text):
        fault = next((e for e in events if e.get("ev") == "fault"), {})
        inject = next((e for e in events if e.get("ev") == "inject"), {})
        end = next((e for e in events if e.get("ev") == "end"), {})
        t_ack = fault.get("t_ack")
        firing = {i: e for i, e in seen_api.items() if "firing_poll" in e}
        mine = [i for i in firing if i[0] == expected[0]]
        mine.sort(key=lambda i: firing[i]["alert"]["starts_at"])
        r = {"fault": name, "job": job, "t_ack": t_ack, "fault_step": fault.get("step"),
             "fault_rank": fault.get("rank", inject.get("rank")), "ref": fault.get("ref", ""),
             "expected": fmt_ident((expected[0], inject.get("rank") if expected[1] else None,
                                    expected[2], expected[3])),
             "cfg_text": cfg_text, "generator": end}
        want = (expected[0], inject.get("rank") if expected[1] else None, expected[2],
                expected[3])
        if name == "mfu_low":
            want = (expected[0], None, expected[2], expected[3])
            r["expected"] = fmt_ident(want)
        r["raised"] = bool(mine)
        others = sorted(fmt_ident(i) for i in firing if not mine or i != mine[0])
        r["others"] = others
        r["others_pending_only"] = sorted(fmt_ident(i) for i, e in seen_api.items()
                                          if "firing_poll" not in e)
        r["am_others"] = sorted(fmt_ident(i) for i in seen_am if not mine or i != mine[0])
        if not mine or t_ack is None:
            r["labels_ok"] = False
            return r
        i = mine[0]
        al = firing[i]["alert"]
        r["got"] = fmt_ident(i)
        r["labels_ok"] = i == want
        r["t_api"] = al["starts_at"] / 1e9 - t_ack
        r["t_api_poll"] = firing[i]["firing_poll"] - t_ack
        r["baseline"] = al.get("baseline")
        r["alert_step"] = al.get("step")
        r["description"] = al.get("description")
        am = seen_am.get(i)
        if am:
            r["t_am"] = (am["updatedAt"] or am["poll"]) - t_ack
            r["t_am_poll"] = am["poll"] - t_ack
        n = self.note.first(job).get(i)
        if n:
            r["t_notify"] = n - t_ack
        if cfg_wait == "window":
            cfg_wait = al.get("baseline")
        r["cfg_wait"] = cfg_wait
        if isinstance(cfg_wait, (int, float)) and "t_api" in r:
            r["beyond"] = r["t_api"] - cfg_wait
        if r.get("fault_step") is not None and al.get("step") is not None:
            r["steps"] = al["step"] - r["fault_step"] + 1
        return r

    def run_clean(self, ranks, seconds):
        job = "clean-%d-%d" % (ranks, os.getpid())
        print("== clean run: %d ranks for %d s" % (ranks, seconds), flush=True)
        cpu0 = self.cpu_s(self.rdb)
        p, events, reader = self.generator(job, ranks, None, 0, seconds, 300, self.a.seed + ranks)
        seen_api, seen_am = {}, {}
        while p.poll() is None:
            self.poll(job, seen_api, seen_am)
            time.sleep(0.5)
        reader.join(5)
        self.poll(job, seen_api, seen_am)
        cpu1 = self.cpu_s(self.rdb)
        st, body = http_req(self.port, "GET", "/api/v1/jobs/%s/health" % job)
        health = json.loads(body) if st == 200 else {}
        self.end_job(job)
        end = next((e for e in events if e.get("ev") == "end"), {})
        return {"ranks": ranks, "seconds": seconds, "job": job,
                "alerts": sorted("%s (%s)" % (fmt_ident(i), "/".join(e["states"]))
                                 for i, e in seen_api.items()),
                "firing": sorted(fmt_ident(i) for i, e in seen_api.items()
                                 if "firing_poll" in e),
                "am": sorted(fmt_ident(i) for i in seen_am), "generator": end,
                "rankdbd_cpu_s": round(cpu1 - cpu0, 1), "mfu": health.get("mfu"),
                "median_step_time_s": health.get("median_step_time_s"),
                "step": health.get("step")}


def sec(v):
    return "%.2f s" % v if isinstance(v, (int, float)) else "-"


def report(results, clean, a, meta):
    out = []
    out.append("Detection benchmark: %d ranks per fault run, rankdbd defaults except the "
               "rules file below; %s" % (a.ranks, meta))
    out.append("")
    out.append("| fault | expected alert | raised | right labels | API (starts_at) | "
               "Alertmanager (updatedAt) | AM notification | configured wait | beyond it | "
               "other alerts |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        others = ", ".join(r["others"]) or "none"
        if r["others_pending_only"]:
            others += " (pending only: %s)" % ", ".join(r["others_pending_only"])
        extra = ""
        if r.get("steps") is not None and r["fault"].startswith("straggler"):
            extra = " (%d steps)" % r["steps"]
        out.append("| %s | %s | %s | %s | %s%s | %s | %s | %s | %s | %s |" % (
            r["fault"], r["expected"], "yes" if r["raised"] else "**no**",
            "yes" if r.get("labels_ok") else "**no**" + (" (%s)" % r["got"] if r.get("got")
                                                         else ""),
            sec(r.get("t_api")), extra, sec(r.get("t_am")), sec(r.get("t_notify")),
            (sec(r["cfg_wait"]) if isinstance(r.get("cfg_wait"), (int, float)) else "") +
            " (" + r["cfg_text"] + ")", sec(r.get("beyond")), others))
    out.append("")
    for c in clean:
        g = c["generator"]
        out.append("Clean run, %d ranks, %d s: %d alerts (firing: %d, at Alertmanager: %d)%s; "
                   "%s steps, %s points, %s write errors, generator max lag %s s, "
                   "generator CPU %s s, rankdbd CPU %s s, MFU %.3f, median step %.3f s" % (
                       c["ranks"], c["seconds"], len(c["alerts"]), len(c["firing"]),
                       len(c["am"]), (": " + ", ".join(c["alerts"])) if c["alerts"] else "",
                       g.get("steps"), g.get("points"), g.get("errors"), g.get("lag_max_s"),
                       g.get("cpu_s"), c["rankdbd_cpu_s"], c.get("mfu") or 0,
                       c.get("median_step_time_s") or 0))
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rankdbd", default="build/server/rankdbd")
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--faults", default="all")
    p.add_argument("--clean", default="64:600,512:600",
                   help="RANKS:SECONDS,... clean runs after the faults ('' = none)")
    p.add_argument("--tail-s", type=float, default=30)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=os.path.join(HERE, "out"))
    p.add_argument("--keep", action="store_true")
    a = p.parse_args()
    names = list(PLAN) if a.faults == "all" else [f for f in a.faults.split(",") if f]
    for n in names:
        if n not in PLAN:
            p.error("unknown fault %s (known: %s)" % (n, ", ".join(PLAN)))
    clean = []
    for c in (x for x in a.clean.split(",") if x):
        r, s = c.split(":")
        clean.append((int(r), int(s)))
    b = Bench(a)
    # kill PID stops what it started too (SIGINT is ignored in background jobs)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results, cleans = [], []
    load0 = os.getloadavg()
    try:
        b.start_am()
        b.start_rankdbd()
        print("alertmanager 127.0.0.1:%d, rankdbd 127.0.0.1:%d, temp %s" % (
            b.am_port, b.port, b.tmp), flush=True)
        for n in names:
            r = b.run_fault(n)
            results.append(r)
            print("   %s: raised=%s labels=%s api=%s am=%s notify=%s others=%s" % (
                n, r["raised"], r.get("labels_ok"), sec(r.get("t_api")), sec(r.get("t_am")),
                sec(r.get("t_notify")), r["others"] or "none"), flush=True)
        for ranks, secs in clean:
            c = b.run_clean(ranks, secs)
            cleans.append(c)
            print("   clean %d ranks: %d alerts %s" % (ranks, len(c["alerts"]), c["alerts"]),
                  flush=True)
    finally:
        b.stop()
    meta = "load average %.1f before, %.1f after (%d CPUs, shared)" % (
        load0[0], os.getloadavg()[0], os.cpu_count())
    text = report(results, cleans, a, meta)
    os.makedirs(a.out, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with open(os.path.join(a.out, "faults-%s.md" % stamp), "w") as f:
        f.write(text)
    with open(os.path.join(a.out, "faults-%s.json" % stamp), "w") as f:
        json.dump({"faults": results, "clean": cleans, "rules": RULES, "meta": meta}, f,
                  indent=1)
    print()
    print(text)
    bad = [r for r in results if not r.get("labels_ok") or r["others"]]
    bad += [c for c in cleans if c["firing"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
