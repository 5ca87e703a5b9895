#!/usr/bin/env python3
"""query_ab.py - two rankdbd builds and VictoriaMetrics answering the same
single-series queries, interleaved (never run by tests).

  bench/peers.sh --size large --systems rankdb,vm --no-install --keep
  python3 bench/query_ab.py --kept /tmp/rankdb-peers.XXXXXX \\
      --before OLD/server/rankdbd --after build-rel/server/rankdbd \\
      [--queries ab] [--reps 3000] [--block 50]

Takes the data dirs a `peers.sh --keep` run left (rankdb/data and vm/data
of one workload), copies rankdb's twice and VictoriaMetrics' once into a
fresh temp dir, starts the three servers on free 127.0.0.1 ports, and
times bench/peers.py's queries (a) raw range and (b) downsample (--queries
picks among a, b, c, d) with peers.py's timed_get, one keep-alive
connection per server. After 30 warm-ups each, the servers take turns in
blocks of --block queries until each answered --reps: load from other
processes falls on all three alike, which peers.sh (every rankdb query,
then every VictoriaMetrics query) cannot promise.

Prints per query the median latency of each, the VictoriaMetrics/rankdb
ratios, the server CPU per query (rankdb: its HTTP worker threads, from
/proc/PID/task/*/schedstat; VictoriaMetrics: every thread), the answer
sizes, and whether before and after answered byte for byte alike.
Only the PIDs it started are signalled; the temp dir is removed.
"""

import argparse
import http.client
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import peers  # noqa: E402
from answers import free_port  # noqa: E402


def cpu_ns(pid, workers_only):
    """Run time of the process's threads (for rankdb the threads that serve
    queries: HTTP workers and the query helper pool, rdb-query)."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        base = "/proc/%d/task/%s/" % (pid, tid)
        try:
            if workers_only:
                with open(base + "comm") as f:
                    if not f.read().startswith(("MHD", "rdb-query")):
                        continue
            with open(base + "schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # the thread ended meanwhile
    return total


def wait_ok(port, path, proc, timeout_s=60):
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        if proc.poll() is not None:
            raise SystemExit("query_ab: server exited (status %d)" % proc.returncode)
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("query_ab: server on port %d not ready" % port)


def start_rankdb(binary, data, log):
    port = free_port()
    proc = subprocess.Popen([binary, "--data-dir", data, "--http-port", str(port),
                             "--log-level", "warn"], stdout=log, stderr=log)
    wait_ok(port, "/api/v1/jobs", proc)
    return proc, port


def start_vm(data, log):
    port = free_port()
    proc = subprocess.Popen(["victoria-metrics", "-storageDataPath", data,
                             "-httpListenAddr", "127.0.0.1:%d" % port, "-retentionPeriod", "100y",
                             "-search.disableCache", "-search.maxUniqueTimeseries", "10000000",
                             "-search.maxPointsPerTimeseries", "1000000", "-loggerLevel", "ERROR"],
                            stdout=log, stderr=log)
    wait_ok(port, "/health", proc)
    return proc, port


def measure(servers, k, reps, block):
    for s in servers:
        for _ in range(30):
            peers.timed_get(s["conn"], s["paths"][k])
    lat = {s["name"]: [] for s in servers}
    cpu = {s["name"]: 0 for s in servers}
    body = {}
    while len(lat[servers[-1]["name"]]) < reps:
        for s in servers:
            c0 = cpu_ns(s["proc"].pid, s["rankdb"])
            for _ in range(block):
                dt, status, b = peers.timed_get(s["conn"], s["paths"][k])
                if status != 200:
                    raise SystemExit("query_ab: %s answered %d to (%s): %s" %
                                     (s["name"], status, k, b[:200]))
                lat[s["name"]].append(dt * 1e3)
            cpu[s["name"]] += cpu_ns(s["proc"].pid, s["rankdb"]) - c0
            body[s["name"]] = b
    n = len(lat["vm"])
    med = {name: statistics.median(v) for name, v in lat.items()}
    print("(%s) %d queries each, median: before %.3f ms, after %.3f ms, VictoriaMetrics %.3f ms;"
          " VM/rankdb before %.2fx, after %.2fx" %
          (k, n, med["before"], med["after"], med["vm"], med["vm"] / med["before"],
           med["vm"] / med["after"]))
    print("    server CPU per query: before %.1f us, after %.1f us, VictoriaMetrics %.1f us;"
          " answer bytes rankdb %d, VM %d; before and after identical: %s" %
          (cpu["before"] / 1e3 / n, cpu["after"] / 1e3 / n, cpu["vm"] / 1e3 / n,
           len(body["after"]), len(body["vm"]), body["before"] == body["after"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kept", required=True, help="a dir peers.sh --keep left")
    ap.add_argument("--before", required=True, help="rankdbd binary (old)")
    ap.add_argument("--after", required=True, help="rankdbd binary (new)")
    ap.add_argument("--queries", default="ab")
    ap.add_argument("--reps", type=int, default=3000)
    ap.add_argument("--block", type=int, default=50)
    ap.add_argument("--metric-prefix", default="train.")
    a = ap.parse_args()
    if not a.queries or set(a.queries) - set("abcd"):
        ap.error("--queries: letters among a, b, c, d")
    info = peers.read_kv(os.path.join(a.kept, "info"))
    tmp = tempfile.mkdtemp(prefix="rankdb-query-ab.")
    procs = []
    try:
        for name in ("before", "after"):
            shutil.copytree(os.path.join(a.kept, "rankdb", "data"), os.path.join(tmp, name))
        shutil.copytree(os.path.join(a.kept, "vm", "data"), os.path.join(tmp, "vm"))
        log = open(os.path.join(tmp, "servers.log"), "ab")
        servers = []
        rq = peers.rankdb_queries(info, a.metric_prefix)
        for name in ("before", "after"):
            binary = a.before if name == "before" else a.after
            proc, port = start_rankdb(binary, os.path.join(tmp, name), log)
            procs.append((proc, signal.SIGTERM))
            servers.append({"name": name, "proc": proc, "rankdb": True, "paths": rq,
                            "conn": http.client.HTTPConnection("127.0.0.1", port, timeout=600)})
        proc, port = start_vm(os.path.join(tmp, "vm"), log)
        procs.append((proc, signal.SIGINT))
        servers.append({"name": "vm", "proc": proc, "rankdb": False,
                        "paths": peers.vm_queries(info),
                        "conn": http.client.HTTPConnection("127.0.0.1", port, timeout=600)})
        print("query_ab: %s ranks x %s metrics x %s steps; before %s, after %s" %
              (info["ranks"], info["metrics"], info["steps"], a.before, a.after))
        for k in a.queries:
            measure(servers, k, a.reps, a.block)
    finally:
        for p, sig in procs:  # VictoriaMetrics stops cleanly on SIGINT
            if p.poll() is None:
                p.send_signal(sig)
        for p, _ in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
