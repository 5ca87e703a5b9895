#!/usr/bin/env python3
"""Streams a bench workload (rdb-gen NDJSON) into a running rankdbd.

  bench/ui_load.py --port P --gen build/bench/rdb-gen [--ranks 512]
                   [--metrics 32] [--steps 20000] [--seed 1]
                   [--body-bytes 8000000] [--connections 2]

rdb-load builds every body in memory first, which for the dashboard's
512 x 32 x 20,000 job (10 GB of NDJSON) does not fit next to the server;
this streams rdb-gen's output instead: bodies of whole lines, at most
--body-bytes each, posted in order on keep-alive connections (one thread
each) to 127.0.0.1 only. A 503 is retried after its Retry-After; any other
non-200 stops the load with the server's message. Prints one line
"loaded points=N records=N seconds=S" at the end; exit 1 on failure.
"""

import argparse
import http.client
import json
import queue
import subprocess
import sys
import threading
import time


def post_all(port, q, failures, counters, lock):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    while True:
        body = q.get()
        if body is None:
            return
        while True:
            try:
                conn.request("POST", "/api/v1/write", body=body,
                             headers={"Content-Type": "application/x-ndjson"})
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
                failures.append("connection error: %r" % e)
                if len(failures) > 20:
                    return
                time.sleep(1)
                continue
            if resp.status == 503:
                time.sleep(float(resp.getheader("Retry-After") or 1))
                continue
            if resp.status != 200:
                failures.append("HTTP %d: %s" % (resp.status, data[:300]))
                return
            obj = json.loads(data)
            with lock:
                counters[0] += obj["accepted_points"]
                counters[1] += obj["records"]
            break


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--gen", required=True, help="path of rdb-gen")
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--metrics", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--body-bytes", type=int, default=8_000_000)
    ap.add_argument("--connections", type=int, default=2)
    a = ap.parse_args()

    gen = subprocess.Popen([a.gen, "--ranks", str(a.ranks), "--metrics", str(a.metrics),
                            "--steps", str(a.steps), "--seed", str(a.seed),
                            "--format", "ndjson"], stdout=subprocess.PIPE)
    q = queue.Queue(maxsize=2 * a.connections)
    failures, counters, lock = [], [0, 0], threading.Lock()
    threads = [threading.Thread(target=post_all, args=(a.port, q, failures, counters, lock))
               for _ in range(a.connections)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    rest = b""
    try:
        while not failures:
            block = gen.stdout.read(a.body_bytes - len(rest))
            if not block:
                break
            buf = rest + block
            cut = buf.rfind(b"\n") + 1
            if cut == 0:
                rest = buf
                continue
            q.put(buf[:cut])
            rest = buf[cut:]
        if rest.strip() and not failures:
            q.put(rest)
    finally:
        for _ in threads:
            q.put(None)
        for t in threads:
            t.join()
        if gen.poll() is None:
            gen.kill()
        gen.wait()
    secs = time.monotonic() - t0
    if failures:
        print("load failed: %s" % failures[0], file=sys.stderr)
        return 1
    print("loaded points=%d records=%d seconds=%.1f" % (counters[0], counters[1], secs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
