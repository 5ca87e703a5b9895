"""The rankdb client: what the training thread calls, and the threads behind it.

Threads
- the training thread(s): log(), phase(), step_done(), log_message() only
  build a small tuple and append it to a bounded deque (no lock, no I/O, no
  JSON). A full queue drops the item and counts it; nothing ever blocks
  or raises into training.
- "rankdb-batcher": drains the deque, encodes NDJSON (_encode.py), seals a
  batch when it reaches batch_max_bytes / batch_max_records or is
  flush_interval_s old, gives it a batch id "<prefix>.<session>.<seq>" and
  hands it to the sender. The id is fixed when the batch is sealed and
  travels with it into the spool, so every resend (after a timeout, after
  an outage, by the next process of this rank) is recognised by the server.
- "rankdb-sender" (_sender.py): HTTP, retries, the on-disk spool (_spool.py).
- "rankdb-heartbeat": a `heartbeat` point every heartbeat_s (and the GPU
  gauges when NVML is present), whatever the training thread does.

Failure: the server slow, restarting or gone only ever shows up in stats()
and in rate-limited warnings on the "rankdb" logger.
"""

import atexit
import collections
import hashlib
import json
import logging
import os
import platform
import secrets
import sys
import threading
import time

from . import _encode, _env, _sender, _spool

logger = logging.getLogger("rankdb")

PHASE_WAITS = ("collective", "dataloader")  # vocabulary: waiting, not the rank's own work


def config_hash(config):
    """A stable 52-bit hash of a config (exactly representable as a double)."""
    text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return int(hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:13], 16)


class _Warn:
    """Rate-limited warnings: each key at most once per interval_s."""

    def __init__(self, interval_s=60.0):
        self.interval_s = interval_s
        self.last = {}
        self.count = collections.Counter()
        self.lock = threading.Lock()

    def __call__(self, key, msg):
        now = time.monotonic()
        with self.lock:
            self.count[key.split(":")[0]] += 1
            t = self.last.get(key)
            if t is not None and now - t < self.interval_s:
                return
            if len(self.last) > 10000:
                self.last.clear()
            self.last[key] = now
        try:
            logger.warning("rankdb: %s", msg)
        except Exception:
            pass


class _Phase:
    """Context manager of Client.phase(); also usable as a decorator-free timer."""

    __slots__ = ("c", "name", "step", "t0", "wall0")

    def __init__(self, c, name, step):
        self.c, self.name, self.step = c, name, step

    def __enter__(self):
        self.c._mark_step_start()
        self.wall0 = time.time_ns()
        self.t0 = time.perf_counter_ns()
        return self

    def __exit__(self, *exc):
        try:
            self.c._phase_end(self.name, self.step, self.wall0, time.perf_counter_ns() - self.t0)
        except Exception:
            pass
        return False


class Client:
    def __init__(self, url=None, job=None, rank=None, world_size=None, attempt=None,
                 local_rank=None, config=None, meta=None, spool_dir=None,
                 heartbeat_s=5.0, flush_interval_s=1.0, batch_max_bytes=1 << 20,
                 batch_max_records=5000, queue_max_records=100000,
                 spool_max_bytes=256 << 20, mem_max_bytes=16 << 20, http_timeout_s=10.0,
                 backoff_max_s=30.0,
                 gpu=True, capture_logging=True, finish_timeout_s=10.0, env=None):
        env = os.environ if env is None else env
        d = _env.settings_from_env(env)
        self.warn = _Warn()
        self.url = url or d["url"]
        j = job or d["job"]
        if not j:
            j = "default"
            self.warn("job", "no job id (pass job= or set RANKDB_JOB); using %r" % j)
        self.job, changed = _env.sanitize_job(j)
        if changed:
            self.warn("job", "job id %r has characters rankdb does not allow; using %r" % (j, self.job))
        self.rank = int(rank if rank is not None else d["rank"])
        self.world_size = int(world_size if world_size is not None else d["world_size"])
        self.attempt = int(attempt if attempt is not None else d["attempt"])
        self.local_rank = int(local_rank if local_rank is not None else d["local_rank"])
        self.host = d["host"]
        self.launcher = d["launcher"]
        self.config = config
        self.finish_timeout_s = finish_timeout_s
        self.flush_interval_s = flush_interval_s
        self.batch_max_bytes = batch_max_bytes
        self.batch_max_records = batch_max_records
        self.heartbeat_s = heartbeat_s
        self.session = "%x%s" % (time.time_ns() // 1000000, secrets.token_hex(4))
        jh = hashlib.sha256(self.job.encode()).hexdigest()[:8]
        self.id_prefix = "py1.%s.r%d.a%d.%s" % (jh, self.rank, self.attempt, self.session)

        # training-thread state
        self._q = collections.deque()
        self._qmax = queue_max_records
        self._wake_at = max(1, batch_max_records)
        self._step = 0
        self._step_start_ns = None
        self._last_step_done = None
        self._phase_lock = threading.Lock()
        self._phase_totals = {}
        self._phase_step = None
        self._wait_sources = []  # objects with take_wait() -> [(name, start_ns, dur_ns)]
        self.dropped_queue = 0
        self._closed = False
        self._finished = False

        self._wake = threading.Event()
        self._stop_batcher = False
        self._seq = 0
        self.encoder = _encode.Encoder(self.job, self.rank, self.attempt, self.warn)
        self.spool = _spool.Spool(spool_dir or d["spool_dir"], self.job, self.rank, self.session,
                                  spool_max_bytes, self.warn)
        self.sender = _sender.Sender(self.url, self.spool, self.warn, timeout_s=http_timeout_s,
                                     mem_max_bytes=mem_max_bytes, backoff_max_s=backoff_max_s)
        self.gpu = None
        if gpu:
            try:
                from . import nvml
                self.gpu = nvml.open_device(self.local_rank, env)
            except Exception:
                self.gpu = None
        self._batcher = threading.Thread(target=self._batch_loop, name="rankdb-batcher", daemon=True)
        self._hb_stop = threading.Event()
        self._hb = threading.Thread(target=self._heartbeat_loop, name="rankdb-heartbeat", daemon=True)
        self.log_handler = None
        self._start(meta, capture_logging)

    # ------------------------------------------------------------------ start

    def _start(self, meta, capture_logging):
        self.sender.start()
        self._batcher.start()
        start_metrics = {"world_size": self.world_size}
        if self.config is not None:
            start_metrics["config_hash"] = config_hash(self.config)
        now = time.time_ns()
        self._put(("m", now, None, start_metrics))  # the run's view, not a step's
        self._put(("l", now, None, "info",
                   "rankdb: rank %d of %d on %s (local rank %d, pid %d, attempt %d)"
                   % (self.rank, self.world_size, self.host, self.local_rank, os.getpid(),
                      self.attempt),
                   {"host": self.host, "local_rank": self.local_rank, "pid": os.getpid(),
                    "attempt": self.attempt, "launcher": self.launcher,
                    "gpu": self.gpu.name if self.gpu else None}))
        if self.rank == 0:
            self._meta = self._meta_doc(meta)
            self._send_meta()
        if self.heartbeat_s and self.heartbeat_s > 0:
            self._hb.start()
        if capture_logging:
            self.log_handler = LogHandler(self)
            logging.getLogger().addHandler(self.log_handler)
        atexit.register(self._atexit)

    def _meta_doc(self, extra):
        doc = {"world_size": self.world_size, "status": "running",
               "start_time_ns": time.time_ns(), "attempt": self.attempt,
               "launcher": self.launcher, "host_rank0": self.host,
               "python": platform.python_version(), "client": "rankdb-python 0.1.0"}
        if self.config is not None:
            doc["config"] = self.config
            doc["config_hash"] = config_hash(self.config)
        tm = sys.modules.get("torch")
        if tm is not None:
            doc["torch"] = getattr(tm, "__version__", None)
            doc["cuda"] = getattr(getattr(tm, "version", None), "cuda", None)
        if self.gpu is not None:
            doc["driver"] = self.gpu.driver
        if extra:
            doc.update(extra)
        return doc

    def _send_meta(self):
        try:
            body = json.dumps(self._meta, default=str, allow_nan=False).encode()
        except ValueError:
            body = json.dumps(json.loads(json.dumps(self._meta, default=str), parse_constant=str)).encode()
        self.sender.put_meta("/api/v1/jobs/%s/meta" % self.job, body)

    def update_meta(self, **fields):
        """Rank 0: merges fields into the job metadata and sends it again."""
        if self.rank != 0 or self._closed:
            return
        try:
            self._meta.update(fields)
            self._send_meta()
        except Exception:
            pass

    # --------------------------------------------------- the training thread

    def log(self, metrics, step=None):
        """Queues one metrics record. Never blocks, never raises."""
        try:
            q = self._q
            if len(q) >= self._qmax or self._closed:
                self.dropped_queue += 1
                return
            if step is None:
                step = self._step
            elif step != self._step:
                self._set_step(step)
            if self._step_start_ns is None:
                self._step_start_ns = time.perf_counter_ns()
            q.append(("m", time.time_ns(), step, dict(metrics)))
            if len(q) >= self._wake_at:
                self._wake.set()
        except Exception:
            self.dropped_queue += 1

    def _put(self, item):
        q = self._q
        if len(q) >= self._qmax or self._closed:
            self.dropped_queue += 1
            return
        q.append(item)

    def log_message(self, message, level="info", step=None, fields=None, ts_ns=None):
        """Queues one log record (level: debug, info, warn, error, fatal)."""
        try:
            self._put(("l", ts_ns or time.time_ns(), self._step if step is None else step,
                       level, message, dict(fields) if fields else None))
        except Exception:
            self.dropped_queue += 1

    def _set_step(self, step):
        """The training moved to another step: the old step's phase totals go out."""
        self._emit_phase_totals()
        self._step = step

    def _mark_step_start(self):
        if self._step_start_ns is None:
            self._step_start_ns = time.perf_counter_ns()

    def phase(self, name, step=None):
        """with client.phase("forward"): ... -> step_time.forward (seconds,
        summed over the step) and a span."""
        if step is not None and step != self._step:
            self._set_step(step)
        return _Phase(self, name, self._step)

    def _take_waits(self):
        out = []
        for src in self._wait_sources:
            try:
                out.extend(src.take_wait())
            except Exception:
                pass
        return out

    def _phase_end(self, name, step, wall0, dur_ns):
        waits = self._take_waits() if self._wait_sources else ()
        own_ns = dur_ns
        for wname, wstart, wdur in waits:
            # a collective wait measured inside this phase is not the phase's own work
            if 0 <= wdur <= own_ns:
                own_ns -= wdur
            self._add_phase(wname, wdur, step)
            self._put(("s", step, wname, wstart, wdur))
        self._add_phase(name, own_ns, step)
        self._put(("s", step, name, wall0, dur_ns))
        if name == "checkpoint":
            self._put(("m", time.time_ns(), step, {"checkpoint.duration": dur_ns / 1e9}))

    def add_phase_time(self, name, seconds, start_ns=None, step=None):
        """Adds time to step_time.<name> of the current step and a span;
        thread-safe (hooks call it from communication threads)."""
        try:
            step = self._step if step is None else step
            dur_ns = int(seconds * 1e9)
            self._add_phase(name, dur_ns, step)
            self._put(("s", step, name, start_ns or (time.time_ns() - dur_ns), dur_ns))
        except Exception:
            pass

    def _add_phase(self, name, dur_ns, step):
        with self._phase_lock:
            if self._phase_step != step and self._phase_totals:
                self._emit_phase_totals_locked()
            self._phase_step = step
            self._phase_totals[name] = self._phase_totals.get(name, 0) + dur_ns

    def _emit_phase_totals(self, extra=None, step=None):
        with self._phase_lock:
            self._emit_phase_totals_locked(extra, step)

    def _emit_phase_totals_locked(self, extra=None, step=None):
        m = {"step_time." + k: v / 1e9 for k, v in self._phase_totals.items()}
        st = self._phase_step
        self._phase_totals = {}
        self._phase_step = None
        if extra:
            if st is not None and st != step:
                if m:
                    self._put(("m", time.time_ns(), st, m))
                m = {}
            m.update(extra)
            st = step
        if m:
            self._put(("m", time.time_ns(), st, m))

    def step_done(self, step=None, tokens=None, samples=None, metrics=None):
        """Ends a step: step_time (since the previous step_done), the step's
        phase totals, tokens_per_sec / samples_per_sec if counts are given."""
        try:
            now = time.perf_counter_ns()
            step = self._step if step is None else step
            if self._wait_sources:  # waits outside any phase (no phase wraps backward)
                for wname, wstart, wdur in self._take_waits():
                    self._add_phase(wname, wdur, step)
                    self._put(("s", step, wname, wstart, wdur))
            extra = dict(metrics) if metrics else {}
            if self._step_start_ns is not None:
                secs = (now - self._step_start_ns) / 1e9
                extra["step_time"] = secs
                if secs > 0:
                    if tokens is not None:
                        extra["tokens_per_sec"] = float(tokens) / secs
                    if samples is not None:
                        extra["samples_per_sec"] = float(samples) / secs
            self._emit_phase_totals(extra, step)
            self._step_start_ns = now
            self._last_step_done = step
            self._step = step + 1
        except Exception:
            self.dropped_queue += 1

    def checkpoint(self, duration_s, step=None):
        """One checkpoint.duration point (and a checkpoint span) for a
        checkpoint that took duration_s seconds and just completed."""
        try:
            step = self._step if step is None else step
            dur_ns = int(duration_s * 1e9)
            self._put(("m", time.time_ns(), step, {"checkpoint.duration": float(duration_s)}))
            self._put(("s", step, "checkpoint", time.time_ns() - dur_ns, dur_ns))
        except Exception:
            pass

    # ------------------------------------------------------- background threads

    def _seal(self, lines, nrec):
        self._seq += 1
        b = _sender.Batch("%s.%d" % (self.id_prefix, self._seq), b"".join(lines), nrec, self._seq)
        self.sender.submit(b)

    def _batch_loop(self):
        lines, size, nrec, first = [], 0, 0, None
        q = self._q
        while True:
            try:
                self._wake.wait(self.flush_interval_s / 2)
                self._wake.clear()
                stopping = self._stop_batcher
                while q:
                    item = q.popleft()
                    if item[0] == "f":
                        if lines:
                            self._seal(lines, nrec)
                            lines, size, nrec, first = [], 0, 0, None
                        item[1].set()
                        continue
                    try:
                        out = self.encoder.encode(item)
                    except Exception as e:
                        self.warn("encode", "cannot encode %r: %r; dropped" % (item[0], e))
                        continue
                    for ln in out:
                        if first is None:
                            first = time.monotonic()
                        lines.append(ln)
                        size += len(ln)
                        nrec += 1
                        if size >= self.batch_max_bytes or nrec >= self.batch_max_records:
                            self._seal(lines, nrec)
                            lines, size, nrec, first = [], 0, 0, None
                if lines and (stopping or time.monotonic() - first >= self.flush_interval_s):
                    self._seal(lines, nrec)
                    lines, size, nrec, first = [], 0, 0, None
                if stopping and not q:
                    return
            except Exception as e:
                self.warn("batcher", "batcher error: %r" % (e,))
                time.sleep(0.1)

    def _heartbeat_loop(self):
        while not self._hb_stop.wait(self.heartbeat_s):
            m = {"heartbeat": 1}
            if self.gpu is not None:
                try:
                    m.update(self.gpu.sample())
                except Exception:
                    pass
            self._put(("m", time.time_ns(), self._step, m))

    # ---------------------------------------------------------------- shutdown

    def flush(self, timeout_s=5.0):
        """Waits (at most timeout_s) until everything logged before this call
        is acknowledged by the server. True if it was. Not for the training
        loop (it waits); for tests and the end of a run."""
        deadline = time.monotonic() + timeout_s
        ev = threading.Event()
        self._q.append(("f", ev))  # the batcher seals its batch when it meets this
        self._wake.set()
        if not ev.wait(timeout_s):
            return False
        while self.sender.pending():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def finish(self, status="finished", timeout_s=None):
        """Flushes (bounded by timeout_s) and stops the threads. Rank 0 sets
        the job's status in its metadata. Returns True if everything reached
        the server; what did not is in the spool for the next process."""
        if self._closed:
            return self.sender.pending() == 0
        timeout_s = self.finish_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + max(0.0, timeout_s)
        try:
            if self.log_handler is not None:
                logging.getLogger().removeHandler(self.log_handler)
            self._hb_stop.set()
            self._emit_phase_totals()
            if self.rank == 0 and status:
                self._meta["status"] = status
                self._meta["end_time_ns"] = time.time_ns()
                self._send_meta()
            self._finished = True
        except Exception:
            pass
        self._closed = True
        self._stop_batcher = True
        self._wake.set()
        self._batcher.join(max(0.0, deadline - time.monotonic()))
        ok = self.sender.close(max(0.0, deadline - time.monotonic()))
        left = self.sender.pending()
        self.spool.close()
        try:
            atexit.unregister(self._atexit)
        except Exception:
            pass
        return ok and left == 0

    def _atexit(self):
        # no finish() call: flush what is there, leave the status alone
        if not self._closed:
            try:
                self.finish(status=None)
            except Exception:
                pass

    def stats(self):
        """Counters: what was sent, retried, spooled, dropped, and why."""
        s, sp = self.sender, self.spool
        return {"queued": len(self._q), "dropped_queue_full": self.dropped_queue,
                "dropped_invalid_values": self.encoder.dropped_values,
                "batches_sealed": self._seq, "batches_sent": s.sent_batches,
                "records_sent": s.sent_records, "duplicates_acknowledged": s.duplicates,
                "retries": s.retries, "batches_refused": s.refused_batches,
                "records_refused": s.refused_records, "spool_batches": len(sp),
                "spool_bytes": sp.bytes, "spool_dropped_batches": sp.dropped_batches,
                "spool_dropped_records": sp.dropped_records,
                "spool_adopted_batches": sp.adopted_batches,
                "lost_batches": s.lost_batches, "lost_records": s.lost_records,
                "warnings": dict(self.warn.count)}


class LogHandler(logging.Handler):
    """logging.Handler sending records to rankdb with the rank and current step.
    Records of the "rankdb" logger itself are not sent (no feedback loop)."""

    def __init__(self, client=None, level=logging.NOTSET):
        super().__init__(level)
        self.client = client

    def emit(self, record):
        try:
            if record.name == "rankdb" or record.name.startswith("rankdb."):
                return
            c = self.client
            if c is None:
                from . import _current
                c = _current()
                if c is None:
                    return
            fields = {"logger": record.name, "file": "%s:%d" % (record.filename, record.lineno)}
            if record.exc_info:
                fields["exception"] = logging.Formatter().formatException(record.exc_info)[-4000:]
            c.log_message(record.getMessage() if self.formatter is None else self.format(record),
                          level=_encode.level_name(record.levelno),
                          step=getattr(record, "step", None), fields=fields,
                          ts_ns=int(record.created * 1e9))
        except Exception:
            pass
