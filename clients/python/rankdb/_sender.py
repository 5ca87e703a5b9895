"""The sender thread: POSTs sealed batches over one keep-alive connection.

Batches arrive from the batcher thread (submit()). They are kept in memory
(bounded by mem_max_bytes) while the server takes them; from the first
failed send on, and whenever memory is full, they go to the on-disk spool
instead, and the spool is sent first, oldest batch first, until it is empty
again: order is kept and nothing waits in memory for a dead server.

Answers: 2xx done (also a duplicate batch id). 429/503 and other 5xx,
timeouts, refused or dropped connections: retried later with the same
batch id, after Retry-After (capped) or an exponential backoff with jitter.
400/404/413/422: the server will never take this body; dropped, counted,
warned (the encoder keeps such records out of batches in the first place).

Never raises out of its thread; every wait is interruptible by close().
"""

import collections
import http.client
import random
import ssl
import threading
import time
import urllib.parse

RETRYABLE = (429, 500, 502, 503, 504)


class Batch:
    """seq: the batcher's sequence number (sealing order); the spool keeps
    batches in this order whichever thread puts them there first."""
    __slots__ = ("batch_id", "body", "records", "seq")

    def __init__(self, batch_id, body, records, seq):
        self.batch_id, self.body, self.records, self.seq = batch_id, body, records, seq


class Http:
    """One keep-alive HTTP/1.1 connection to the server."""

    def __init__(self, url, timeout_s):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("rankdb url must be http://host:port or https://..., got %r" % url)
        self.https = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.https else 80)
        self.base = u.path.rstrip("/")
        self.timeout_s = timeout_s
        self.conn = None

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None

    def _connect(self):
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout_s,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)

    def request(self, method, path, body, headers):
        """-> (status, headers dict lower-case, body bytes). Raises OSError or
        http.client.HTTPException when no answer came."""
        for attempt in (0, 1):
            reused = self.conn is not None
            if self.conn is None:
                self.conn = self._connect()
            try:
                self.conn.request(method, self.base + path, body=body, headers=headers)
                resp = self.conn.getresponse()
                data = resp.read()
                if resp.will_close:
                    self.close()
                return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    http.client.CannotSendRequest, http.client.BadStatusLine):
                self.close()
                # an idle keep-alive connection the server closed: one fresh try
                # (safe: every write carries its batch id)
                if not reused or attempt:
                    raise
            except BaseException:
                self.close()
                raise
        raise OSError("unreachable")


def retry_after_s(headers):
    v = headers.get("retry-after")
    if not v:
        return None
    try:
        return max(0.0, float(v.strip()))
    except ValueError:
        return None  # an HTTP date: use the backoff


class Sender:
    def __init__(self, url, spool, warn, timeout_s=10.0, mem_max_bytes=16 << 20,
                 backoff_min_s=0.2, backoff_max_s=30.0, retry_after_max_s=60.0):
        self.http = Http(url, timeout_s)
        self.spool = spool
        self.warn = warn
        self.mem = collections.deque()
        self.mem_bytes = 0
        self.mem_max_bytes = mem_max_bytes
        self.spool_mode = len(spool) > 0
        self.cv = threading.Condition()
        self.meta = None  # (path, body bytes) of a PUT not yet acknowledged
        self.backoff_min_s, self.backoff_max_s = backoff_min_s, backoff_max_s
        self.retry_after_max_s = retry_after_max_s
        self.failures = 0
        self.not_before = 0.0  # monotonic time before which nothing is sent
        self.stopping = False
        self.deadline = None  # monotonic: give up sending (flush at exit)
        self.inflight = None  # the memory batch being POSTed now
        # counters (read by stats(); written by this thread only)
        self.sent_batches = self.sent_records = self.duplicates = 0
        self.refused_batches = self.refused_records = 0
        self.retries = 0
        self.lost_batches = self.lost_records = 0  # memory only: no spool
        self.thread = threading.Thread(target=self._run, name="rankdb-sender", daemon=True)

    def start(self):
        self.thread.start()

    # -- called by the batcher thread -----------------------------------------

    def submit(self, batch):
        with self.cv:
            to_mem = not self.spool_mode and self.mem_bytes + len(batch.body) <= self.mem_max_bytes
            if to_mem:
                self.mem.append(batch)
                self.mem_bytes += len(batch.body)
            else:
                self.spool_mode = True
            self.cv.notify()
        if not to_mem:
            self._to_spool(batch)

    def put_meta(self, path, body):
        with self.cv:
            self.meta = (path, body)
            self.cv.notify()

    def _to_spool(self, b):
        if not self.spool.put(b.batch_id, b.body, b.records, b.seq):
            with self.cv:  # no usable spool: keep in memory as long as it is bounded
                if self.mem_bytes + len(b.body) <= 4 * self.mem_max_bytes:
                    self.mem.append(b)
                    self.mem_bytes += len(b.body)
                    return
            self.lost_batches += 1
            self.lost_records += b.records
            self.warn("lost", "no spool and memory full: batch %s (%d records) dropped"
                      % (b.batch_id, b.records))

    # -- the thread -------------------------------------------------------------

    def pending(self):
        with self.cv:
            return len(self.mem) + len(self.spool) + (1 if self.meta else 0) + \
                (1 if self.inflight is not None else 0)

    def _wait(self, timeout):
        with self.cv:
            self.cv.wait(timeout)

    def _run(self):
        try:
            adopted = self.spool.adopt_orphans()
            if adopted:
                with self.cv:
                    self.spool_mode = True
                self.warn("adopted", "replaying %d batches a previous process of this rank left "
                          "in %s" % (adopted, self.spool.dir))
        except Exception as e:  # never let the thread die on a spool problem
            self.warn("adopt", "cannot adopt old spool batches: %r" % (e,))
        while True:
            try:
                if not self._step():
                    break
            except Exception as e:  # a bug must not kill sending for good
                self.warn("sender", "sender error: %r" % (e,))
                self._wait(1.0)
        self.http.close()

    def _step(self):
        """One unit of work. False when the thread should end."""
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            return False
        if now < self.not_before:
            left = self.not_before - now
            if self.deadline is not None:
                left = min(left, self.deadline - now)
            self._wait(left)
            return not (self.stopping and self.deadline is None)
        item = self.spool.oldest()
        if item is not None:
            if self.mem:  # the spool goes first: what waits behind it waits on disk
                self._spill()
            entry, body = item
            res = self._post(Batch(entry.batch_id, body, entry.records, entry.seq))
            if res != "retry":
                self.spool.remove(entry)
            with self.cv:
                if len(self.spool) == 0:
                    self.spool_mode = False
            return True
        with self.cv:
            b = self.mem.popleft() if self.mem else None
            meta = self.meta
            if b is not None:
                self.mem_bytes -= len(b.body)
                self.inflight = b
            elif meta is None:
                if self.stopping:
                    return False
                self.cv.wait(0.5)
                return True
        if b is None:  # the job metadata, when no batch waits
            if self._put_meta(meta):
                with self.cv:
                    if self.meta is meta:
                        self.meta = None
            return True
        res = self._post(b)
        with self.cv:
            self.inflight = None
        if res == "retry":
            self._spill(b)
        return True

    def _spill(self, first=None):
        """From now on everything goes through the spool, oldest first."""
        with self.cv:
            self.spool_mode = True
            rest = list(self.mem)
            self.mem.clear()
            self.mem_bytes = 0
        for x in ([first] if first is not None else []) + rest:
            self._to_spool(x)

    def _backoff(self, retry_after):
        self.failures += 1
        self.retries += 1
        if retry_after is not None:
            delay = min(retry_after, self.retry_after_max_s)
        else:
            delay = min(self.backoff_max_s, self.backoff_min_s * (2 ** min(self.failures - 1, 16)))
            delay *= 0.5 + random.random() / 2
        self.not_before = time.monotonic() + delay

    def _post(self, b):
        """-> "ok", "refused" (dropped for good) or "retry"."""
        headers = {"Content-Type": "application/x-ndjson", "X-Rankdb-Batch-Id": b.batch_id}
        try:
            st, hdrs, data = self.http.request("POST", "/api/v1/write", b.body, headers)
        except (OSError, http.client.HTTPException, ValueError) as e:
            self._backoff(None)
            self.warn("unreachable", "rankdb server %s:%d unreachable (%s); batches are kept "
                      "and retried" % (self.http.host, self.http.port, e.__class__.__name__))
            return "retry"
        if 200 <= st < 300:
            self.failures = 0
            self.sent_batches += 1
            self.sent_records += b.records
            if b'"duplicate":true' in data:
                self.duplicates += 1
            return "ok"
        if st in RETRYABLE:
            self._backoff(retry_after_s(hdrs))
            self.warn("busy", "rankdb server answered %d to batch %s; retrying later" % (st, b.batch_id))
            return "retry"
        self.refused_batches += 1
        self.refused_records += b.records
        self.warn("refused:%d" % st, "rankdb server refused batch %s (%d records) with %d: %s; "
                  "dropped" % (b.batch_id, b.records, st, data[:300].decode("utf-8", "replace")))
        return "refused"

    def _put_meta(self, meta):
        path, body = meta
        try:
            st, hdrs, data = self.http.request("PUT", path, body, {"Content-Type": "application/json"})
        except (OSError, http.client.HTTPException, ValueError):
            self._backoff(None)
            return False
        if st in RETRYABLE:
            self._backoff(retry_after_s(hdrs))
            return False
        if not 200 <= st < 300:
            self.warn("meta:%d" % st, "rankdb server refused the job metadata with %d: %s"
                      % (st, data[:300].decode("utf-8", "replace")))
        return True

    # -- shutdown -----------------------------------------------------------------

    def close(self, timeout_s):
        """Sends what it can until timeout_s, then stops; what is left in
        memory goes to the spool for the next process of this rank."""
        with self.cv:
            self.stopping = True
            self.deadline = time.monotonic() + max(0.0, timeout_s)
            # a long Retry-After must not eat the whole flush budget
            self.not_before = min(self.not_before, time.monotonic() + 0.2)
            self.cv.notify_all()
        self.thread.join(max(0.0, timeout_s) + 0.5)
        with self.cv:
            rest = list(self.mem)
            self.mem.clear()
            self.mem_bytes = 0
            alive = self.thread.is_alive()
            if alive and self.inflight is not None:
                # still waiting for an answer: spool it too; if the answer was
                # a 2xx after all, the replay is a duplicate the server ignores
                rest.insert(0, self.inflight)
        for b in rest:
            self._to_spool(b)
        return not alive
