"""A fake rankdb write endpoint for client tests, misbehaving on request.

Implements what the clients use of the real server: POST /api/v1/write
(NDJSON, X-Rankdb-Batch-Id: a batch seen before is acknowledged with
"duplicate":true and not applied again) and PUT /api/v1/jobs/<job>/meta.
`mode` says how the next requests are answered:

  "ok"           200 (applies the batch)
  "503", "429"   that status with Retry-After: <retry_after> (nothing applied)
  "delay"        sleeps delay_s, then answers as "ok"
  "block"        waits until release() (or 60 s), then answers as "ok"
  "drop_before"  closes the connection without reading the body (nothing applied)
  "drop_after"   applies the batch, then closes without an answer (the
                 client must retry; the retry is a duplicate)
  "refuse"       use stop_listening(): connections are refused

Every record applied is kept in `records` (parsed JSON) with its batch id;
`requests` counts the POSTs. Python standard library only.
"""

import http.server
import json
import socket
import threading
import time


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def setup(self):
        super().setup()
        with self.server.fake.lock:
            self.server.fake.conns.add(self.connection)

    def finish(self):
        try:
            super().finish()
        finally:
            with self.server.fake.lock:
                self.server.fake.conns.discard(self.connection)

    def _answer(self, status, obj, headers=()):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _drop(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def do_PUT(self):
        fs = self.server.fake
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        mode = fs.mode
        if mode in ("503", "429"):
            return self._answer(int(mode), {"error": "busy"}, [("Retry-After", fs.retry_after)])
        if mode.startswith("drop"):
            return self._drop()
        with fs.lock:
            fs.meta[self.path] = json.loads(body)
        self._answer(200, {"bytes": n})

    def do_POST(self):
        fs = self.server.fake
        mode = fs.mode
        with fs.lock:
            fs.requests += 1
        if mode == "drop_before":
            return self._drop()
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        bid = self.headers.get("X-Rankdb-Batch-Id")
        if mode in ("503", "429"):
            return self._answer(int(mode), {"error": "saturated"}, [("Retry-After", fs.retry_after)])
        if mode == "delay":
            time.sleep(fs.delay_s)
        elif mode == "block":
            fs.unblock.wait(60)
        if self.path != "/api/v1/write":
            return self._answer(404, {"error": "unknown endpoint"})
        try:
            recs = [json.loads(ln) for ln in body.decode("utf-8").splitlines() if ln.strip()]
        except ValueError as e:
            return self._answer(400, {"error": "bad json: %s" % e})
        with fs.lock:
            dup = bid is not None and bid in fs.batch_ids
            if not dup:
                if bid is not None:
                    fs.batch_ids.add(bid)
                fs.batches.append((bid, len(recs)))
                for r in recs:
                    fs.records.append((bid, r))
            else:
                fs.duplicates += 1
        if mode == "drop_after":
            return self._drop()
        self._answer(200, {"records": len(recs), "duplicate": dup} if dup else {"records": len(recs)})


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # clients that time out and go away are part of the tests


class FakeServer:
    def __init__(self, port=0):
        self.lock = threading.Lock()
        self.mode = "ok"
        self.retry_after = "1"
        self.delay_s = 0.5
        self.unblock = threading.Event()
        self.records = []  # [(batch id, record dict)]
        self.batches = []
        self.batch_ids = set()
        self.requests = 0
        self.duplicates = 0
        self.meta = {}
        self.conns = set()  # open client connections
        self.port = port
        self.srv = None
        self.listen()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def listen(self):
        self.srv = _Server(("127.0.0.1", self.port), _Handler)
        self.srv.fake = self
        self.port = self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def stop_listening(self):
        """Closes the listening socket and every open connection: the server
        is gone, connections are refused."""
        self.srv.shutdown()
        self.srv.server_close()
        self.srv = None
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def release(self):
        self.unblock.set()

    def close(self):
        self.unblock.set()
        if self.srv is not None:
            self.stop_listening()

    def metric_points(self, metric):
        """[(rank, step, value)] of every applied point of `metric`."""
        with self.lock:
            return [(r["rank"], r.get("step"), r["metrics"][metric]) for _, r in self.records
                    if r.get("type", "metrics") == "metrics" and metric in r.get("metrics", {})]

    def of_type(self, t):
        with self.lock:
            return [r for _, r in self.records if r.get("type", "metrics") == t]
