#!/usr/bin/env python3
"""How fast the dashboard's run page becomes usable on a big job.

  bench/ui_bench.py [--bin build/server/rankdbd] [--gen build/bench/rdb-gen]
                    [--ranks 512] [--metrics 32] [--steps 20000] [--seed 1]
                    [--data /tmp/rankdb-uibench/data] [--runs 7]
                    [--screenshots DIR] [--out bench/out/ui-<ranks>x<steps>.md]

1. Loads the bench workload (bench/gen.c: R ranks x M metrics x S steps, one
   straggler rank) into --data unless a rankdbd on it already holds the job
   (bench/ui_load.py streams it; ~6 minutes for 512 x 32 x 20,000 on 2 cores),
   plus the job's metadata document, a few log lines of the straggler, and
   two small jobs (bench-2: 64 x 1,000 steps, bench-3: 8 x 300) so the jobs
   page has more than one row.
2. Starts rankdbd on it (default configuration, 127.0.0.1, a free port) and
   headless Chromium (tests/integration/cdp.py) at 1400 x 900.
3. Loads the run page once to warm up, then --runs times from about:blank,
   reading the page's own marks (ms since navigation start): first chart
   drawn, all five cross-rank charts drawn, every panel ready; the main
   thread's long tasks (> 50 ms); bytes fetched. "Interactive" is when the
   five charts are drawn and no long task is running.
4. Zooms (a mouse drag over the step-time chart) and times the re-query of
   every panel; loads the jobs page; clicks "whole run".
5. Prints a markdown table (median and worst of the runs) and writes it to
   --out; with --screenshots, saves the jobs page, the run page and the logs
   of the straggler there.

Only processes it started are stopped (by PID). Timings are for this
machine and are never asserted anywhere.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import cdp  # noqa: E402

LONGTASKS_JS = """window.__rdbLong = [];
try { new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__rdbLong.push([e.startTime, e.duration]); })
  .observe({type: "longtask", buffered: true}); } catch (e) {}"""


def http(port, method, path, body=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Rankdbd:
    def __init__(self, binary, data):
        self.binary, self.data = binary, data
        self.proc = None

    def start(self):
        os.makedirs(self.data, exist_ok=True)
        portfile = os.path.join(os.path.dirname(self.data), "port")
        if os.path.exists(portfile):
            os.unlink(portfile)
        log = open(os.path.join(os.path.dirname(self.data), "rankdbd.log"), "ab")
        self.proc = subprocess.Popen([self.binary, "--data-dir", self.data, "--http-addr", "127.0.0.1",
                                      "--http-port", "0", "--port-file", portfile, "--log-level", "warn"],
                                     stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                sys.exit("rankdbd exited with %s (see rankdbd.log beside the data dir)" % self.proc.returncode)
            try:
                with open(portfile) as f:
                    s = f.read()
                if s.endswith("\n"):
                    self.port = int(s)
                    break
            except FileNotFoundError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                sys.exit("rankdbd did not start within 120 s")
            time.sleep(0.1)
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def ensure_loaded(srv, a, job):
    st, body = http(srv.port, "GET", "/api/v1/jobs")
    have = {j["job"]: j["series"] for j in json.loads(body)["jobs"]}
    if have.get(job) == a.ranks * a.metrics:
        print("data: %s already holds %s (%d series)" % (a.data, job, have[job]), flush=True)
    else:
        print("data: loading %d ranks x %d metrics x %d steps into %s ..." % (a.ranks, a.metrics, a.steps, a.data),
              flush=True)
        r = subprocess.run([sys.executable, os.path.join(HERE, "ui_load.py"), "--port", str(srv.port), "--gen", a.gen,
                            "--ranks", str(a.ranks), "--metrics", str(a.metrics), "--steps", str(a.steps),
                            "--seed", str(a.seed)])
        if r.returncode:
            sys.exit("loading failed")
    info = dict(l.split("=", 1) for l in subprocess.run(
        [a.gen, "--ranks", str(a.ranks), "--metrics", str(a.metrics), "--steps", str(a.steps), "--seed", str(a.seed),
         "--info"], capture_output=True, text=True, check=True).stdout.split())
    strag = int(info["straggler"])
    meta = {"world_size": a.ranks, "model": "llama-7b (synthetic, bench/gen.c)", "global_batch": a.ranks * 4,
            "micro_batch": 4, "grad_accum": 1, "status": "finished", "seed": a.seed}
    http(srv.port, "PUT", "/api/v1/jobs/%s/meta" % job, json.dumps(meta).encode())
    st, body = http(srv.port, "GET", "/api/v1/logs?job=%s&limit=1" % job)
    if st == 200 and json.loads(body)["logs"]:
        return
    t_last = int(info["t_last_ns"])
    step_ns = (t_last - int(info["t_first_ns"])) // max(1, a.steps - 1)
    logs = []
    for s in range(a.steps - 400, a.steps, 50):
        logs.append({"type": "log", "job": job, "rank": strag, "step": s, "timestamp": t_last - (a.steps - s) * step_ns,
                     "level": "warn", "message": "rank %d: backward 15%% slower than the median of its peers" % strag,
                     "fields": {"host": "node%03d" % (strag // 8), "gpu": strag % 8}})
    st, body = http(srv.port, "POST", "/api/v1/write", json.dumps(logs).encode())
    if st != 200:
        sys.exit("writing the straggler's logs failed: %d %s" % (st, body[:200]))


EXTRA_JOBS = ((2, 64, 1000), (3, 8, 300))  # (seed, ranks, steps): more rows on the jobs page


def ensure_extra_jobs(srv, a):
    st, body = http(srv.port, "GET", "/api/v1/jobs")
    have = {j["job"] for j in json.loads(body)["jobs"]}
    for seed, ranks, steps in EXTRA_JOBS:
        if "bench-%d" % seed in have or seed == a.seed:
            continue
        r = subprocess.run([sys.executable, os.path.join(HERE, "ui_load.py"), "--port", str(srv.port), "--gen", a.gen,
                            "--ranks", str(ranks), "--metrics", str(a.metrics), "--steps", str(steps),
                            "--seed", str(seed)], stdout=subprocess.DEVNULL)
        if r.returncode:
            sys.exit("loading bench-%d failed" % seed)


def run_page(b, url):
    b.navigate("about:blank")
    b.navigate(url)
    b.wait_for("document.body.dataset.ready === 'run'", timeout=120)
    time.sleep(0.3)  # let long-task entries arrive
    m = b.eval("window.__rdbMarks")
    longs = b.eval("window.__rdbLong || []")
    res = b.eval("performance.getEntriesByType('resource').reduce((a, e) => a + (e.transferSize || e.encodedBodySize || 0), 0)")
    charts = m["charts-drawn"]
    interactive = charts
    for start, dur in longs:
        if start < charts:
            interactive = max(interactive, start + dur)
    return {"first": m["first-chart"], "charts": charts, "interactive": interactive, "ready": m["run-ready"],
            "longest": max([d for _, d in longs] or [0]), "bytes": res}


def fmt_ms(v):
    return "%.0f ms" % v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "server", "rankdbd"))
    ap.add_argument("--gen", default=os.path.join(REPO, "build", "bench", "rdb-gen"))
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--metrics", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default="/tmp/rankdb-uibench/data")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--screenshots")
    ap.add_argument("--out")
    a = ap.parse_args()
    job = "bench-%d" % a.seed
    out = a.out or os.path.join(HERE, "out", "ui-%dx%d.md" % (a.ranks, a.steps))
    srv = Rankdbd(a.bin, a.data).start()
    b = None
    try:
        ensure_loaded(srv, a, job)
        ensure_extra_jobs(srv, a)
        srv.stop()
        srv.start()  # as an operator would find it: restarted on its data
        tmp = os.path.dirname(a.data)
        b = cdp.Browser(tmp, width=1400, height=900)
        b.call("Page.addScriptToEvaluateOnNewDocument", {"source": LONGTASKS_JS})
        base = "http://127.0.0.1:%d/ui/" % srv.port
        url = base + "#/run/" + job
        run_page(b, url)  # warm-up: the browser's own start-up and the server's first reads
        load_before = os.getloadavg()[0]
        runs = [run_page(b, url) for _ in range(a.runs)]
        load_after = os.getloadavg()[0]
        info = b.eval("RDB.debug()")
        strag = b.eval("document.querySelector('#straggler-table tbody tr').dataset.rank")
        view = info["view"]
        # zoom: drag over the middle fifth of the step-time chart
        zooms = []
        for _ in range(3):
            b.navigate("about:blank")
            b.navigate(url)
            b.wait_for("document.body.dataset.ready === 'run'", timeout=120)
            r = b.eval("(() => { const e = document.querySelector('.chart[data-chart=step_time] .u-over');"
                       " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
                       " return [r.left, r.top, r.width, r.height]; })()")
            b.drag(r[0] + r[2] * 0.4, r[1] + r[3] / 2, r[0] + r[2] * 0.6)
            b.wait_for("document.body.dataset.zoomed === '1'", timeout=120)
            m = b.eval("window.__rdbMarks")
            zooms.append(m["zoom-drawn"] - m["zoom-start"])
        if a.screenshots:
            os.makedirs(a.screenshots, exist_ok=True)
            b.navigate("about:blank")
            b.navigate(url)
            b.wait_for("document.body.dataset.ready === 'run'", timeout=120)
            b.screenshot(os.path.join(a.screenshots, "run-straggler.png"), full_page=True)
            b.eval("document.querySelector('#straggler-table tbody tr').click()")
            b.wait_for("document.getElementById('logs').dataset.state === 'drawn'")
            b.eval("window.scrollTo(0, document.getElementById('strag-panel').offsetTop - 80)")
            b.screenshot(os.path.join(a.screenshots, "run-logs.png"))
        # jobs page
        jobs = []
        for _ in range(3):
            b.navigate("about:blank")
            b.navigate(base)
            b.wait_for("document.body.dataset.ready === 'jobs'", timeout=120)
            jobs.append(b.eval("window.__rdbMarks['jobs-ready']"))
        if a.screenshots:
            b.screenshot(os.path.join(a.screenshots, "jobs.png"))
        # the whole run at once (20,000 steps x 512 ranks per chart)
        b.navigate("about:blank")
        b.navigate(url + "?all=1")
        b.wait_for("document.body.dataset.ready === 'run'", timeout=300)
        whole = b.eval("window.__rdbMarks['charts-drawn']")
        whole_states = b.eval("Array.from(document.querySelectorAll('.chart')).map(c => c.dataset.state)")
        whole_err = b.eval("(document.querySelector('.chart .error') || {}).textContent || ''")
    finally:
        if b:
            b.close()
        srv.stop()

    def row(name, key):
        v = [r[key] for r in runs]
        return "| %s | %s | %s |" % (name, fmt_ms(statistics.median(v)), fmt_ms(max(v)))
    lines = [
        "Run page of `%s`: %d ranks x %d metrics x %d steps (%s points), rankdbd default configuration, "
        "headless Chromium 1400x900 on the same machine; %d loads after one warm-up." % (
            job, a.ranks, a.metrics, a.steps, "{:,}".format(a.ranks * a.metrics * a.steps), a.runs),
        "First view: %s. Load average (1 min) before/after the timed loads: %.2f / %.2f (2 cores; "
        "other work on the machine shows up here)." % (
            "last %d of %d steps" % (view["recent"]["steps"], view["recent"]["of"]) if view.get("recent") else "whole run",
            load_before, load_after),
        "",
        "| measure | median | worst |",
        "|---|---|---|",
        row("first chart drawn", "first"),
        row("all five cross-rank charts drawn", "charts"),
        row("**interactive** (charts drawn, main thread free)", "interactive"),
        row("every panel ready (heatmap, stragglers, health, alerts, metadata)", "ready"),
        row("longest main-thread task", "longest"),
        "| bytes fetched per load | %s | |" % "{:,}".format(int(statistics.median(r["bytes"] for r in runs))),
        "| zoom to a fifth of the view, every panel re-queried | %s | %s |" % (fmt_ms(statistics.median(zooms)),
                                                                          fmt_ms(max(zooms))),
        "| jobs page ready | %s | %s |" % (fmt_ms(statistics.median(jobs)), fmt_ms(max(jobs))),
        "| whole run (`?all=1`): charts settled | %s | |" % fmt_ms(whole),
        "",
        "Top straggler in the table: rank %s. Whole-run chart states: %s%s" % (
            strag, ", ".join(whole_states), (" (%s)" % whole_err.strip()[:200]) if whole_err else ""),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
