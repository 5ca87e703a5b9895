#!/usr/bin/env python3
"""What the rankdb clients cost the training loop (never run by tests).

  python3 bench/client_overhead.py [--rankdbd build/server/rankdbd] [--calls 100000]
                                   [--steps 1000] [--work-ms 2] [--rdbc build/bench/rdbc-overhead]

1. log() of 32 metrics, timed call by call on the training thread
   (median, p90, p99, max), with rankdbd running and with rankdbd stopped
   (connections refused: batches go to the spool). Same for the C client's
   rdbc_log() when build/bench/rdbc-overhead exists.
2. A training loop (a fixed amount of pure-Python CPU work per step,
   calibrated to work-ms, four phases, 32 metrics, step_done) timed step
   by step: without rankdb, with rankdb and the server running, with rankdb
   and the server unreachable, in alternating rounds. Prints the median and
   p90 step time of each and the difference to "without".

Starts its own rankdbd in a temp dir on a free loopback port and stops it
by PID. Prints a markdown table (docs/BENCHMARKS.md, "Client overhead").
"""

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "clients", "python"))

import rankdb  # noqa: E402

METRICS = 32


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary, tmp):
    pf = os.path.join(tmp, "port")
    proc = subprocess.Popen([binary, "--data-dir", os.path.join(tmp, "data"), "--http-addr", "127.0.0.1",
                             "--http-port", "0", "--port-file", pf, "--log-level", "warn"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(tmp, "rankdbd.log"), "wb"))
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with open(pf) as f:
                s = f.read()
            if s.endswith("\n"):
                return proc, "http://127.0.0.1:%d" % int(s)
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("rankdbd did not start")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def bench_log(url, spool, calls):
    c = rankdb.Client(url=url, job="bench-py", rank=0, world_size=1, spool_dir=spool,
                      capture_logging=False, gpu=False, queue_max_records=calls + 100)
    names = ["loss"] + ["metric.%02d" % i for i in range(1, METRICS)]
    t = [0] * calls
    clock = time.perf_counter_ns
    for s in range(calls):
        m = {n: s * 0.001 + i for i, n in enumerate(names)}
        t0 = clock()
        c.log(m, step=s)
        t[s] = clock() - t0
    st = c.stats()
    c.finish(timeout_s=10)
    return {"median_ns": pct(t, 0.5), "p90_ns": pct(t, 0.9), "p99_ns": pct(t, 0.99), "max_ns": max(t),
            "dropped": st["dropped_queue_full"]}


_ITERS_PER_MS = []


def work(ms):
    """A fixed amount of pure-Python CPU work (calibrated once to ~ms):
    time stolen by the client's threads shows up as a longer step."""
    if not _ITERS_PER_MS:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 0.2:
            for _ in range(1000):
                n += 1
        _ITERS_PER_MS.append(n / 200.0)
    x = 0
    for _ in range(int(_ITERS_PER_MS[0] * ms)):
        x += 1
    return x


def loop_steps(c, steps, work_ms, first_step):
    names = ["loss"] + ["metric.%02d" % i for i in range(1, METRICS)]
    times = []
    for s in range(first_step, first_step + steps):
        t0 = time.perf_counter()
        if c:
            for ph in ("dataloader", "forward", "backward", "optimizer"):
                with c.phase(ph):
                    work(work_ms / 4)
            c.log({n: s * 0.001 + i for i, n in enumerate(names)}, step=s)
            c.step_done(s)
        else:
            for ph in range(4):
                work(work_ms / 4)
            {n: s * 0.001 + i for i, n in enumerate(names)}  # the same dict work without rankdb
        times.append(time.perf_counter() - t0)
    return times


def bench_loops(url, dead, tmp, steps, work_ms, rounds=5):
    """The three loops in alternating rounds, so machine noise hits all alike."""
    clients = {"without rankdb": None}
    for name, u in (("rankdb, server running", url), ("rankdb, server stopped", dead)):
        clients[name] = rankdb.Client(url=u, job="bench-loop", rank=0, world_size=1,
                                      spool_dir=os.path.join(tmp, "spool-" + name[-7:]),
                                      capture_logging=False, gpu=False)
    times = {k: [] for k in clients}
    for r in range(rounds):
        for k, c in clients.items():
            times[k] += loop_steps(c, steps // rounds, work_ms, r * steps)
    for c in clients.values():
        if c:
            c.finish(timeout_s=10)
    return [(k, {"median_ms": statistics.median(v) * 1e3, "p90_ms": pct(v, 0.9) * 1e3})
            for k, v in times.items()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rankdbd", default=os.path.join(REPO, "build", "server", "rankdbd"))
    ap.add_argument("--rdbc", default=os.path.join(REPO, "build", "bench", "rdbc-overhead"))
    ap.add_argument("--calls", type=int, default=100000)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--work-ms", type=float, default=2.0)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rankdb-clientbench.")
    proc = None
    try:
        proc, url = start_server(args.rankdbd, tmp)
        dead = "http://127.0.0.1:%d" % free_port()  # nothing listens there
        rows = []
        for name, u in (("running", url), ("stopped", dead)):
            r = bench_log(u, os.path.join(tmp, "spool-py-" + name), args.calls)
            rows.append(("Python `rankdb.log()`", name, r))
            if os.path.exists(args.rdbc):
                out = subprocess.run([args.rdbc, u, os.path.join(tmp, "spool-c-" + name), str(args.calls)],
                                     capture_output=True, text=True, check=True).stdout
                rows.append(("C `rdbc_log()`", name, json.loads(out.strip().splitlines()[-1])))
        print("## log() of %d metrics on the training thread (%d calls, %s, %s)\n"
              % (METRICS, args.calls, platform.python_version(), platform.machine()))
        print("| client | server | median | p90 | p99 | max | dropped |")
        print("|---|---|---|---|---|---|---|")
        for cl, name, r in rows:
            print("| %s | %s | %.2f us | %.2f us | %.2f us | %.0f us | %d |" % (
                cl, name, r["median_ns"] / 1e3, r["p90_ns"] / 1e3, r["p99_ns"] / 1e3, r["max_ns"] / 1e3,
                r.get("dropped", r.get("dropped_queue_full", 0))))
        loops = bench_loops(url, dead, tmp, args.steps, args.work_ms)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        proc = None
        base = loops[0][1]["median_ms"]
        print("\n## training loop: %d steps of %.1f ms CPU work, 4 phases, %d metrics per step\n"
              % (args.steps, args.work_ms, METRICS))
        print("| loop | median step | p90 step | median vs without |")
        print("|---|---|---|---|")
        for name, r in loops:
            print("| %s | %.3f ms | %.3f ms | %+.1f us |" % (name, r["median_ms"], r["p90_ms"],
                                                          (r["median_ms"] - base) * 1e3))
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
