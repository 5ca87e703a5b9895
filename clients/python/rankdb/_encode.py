"""Turns queued items into NDJSON lines of POST /api/v1/write (docs/API.md).

Runs on the batcher thread only, never on the training thread. The server
validates a request all-or-nothing, so one bad value would cost a whole
batch: everything the server would refuse (bad metric names, non-numeric
values, negative steps, invalid UTF-8, oversized messages) is dropped or
repaired here, and counted, before it can reach a batch.

Queue items (tuples built by the training thread, see _client.py):
  ("m", ts_ns, step, {name: value})             metrics record
  ("l", ts_ns, step, level, message, fields)    log record
  ("s", step, name, start_ns, duration_ns)      span
"""

import json
import math
import re

MAX_METRICS_PER_RECORD = 1000  # the server's default limit is 1024
MAX_TEXT_BYTES = 60000  # messages and fields: the server takes 64 KiB
NAME_RE = re.compile(r'^[!#-+\x2d-\x5b\x5d-\x7a|~]{1,256}$')  # printable ASCII minus space " , \ { }
LEVELS = ("debug", "info", "warn", "error", "fatal")

_dumps = json.JSONEncoder(allow_nan=True, separators=(",", ":"), ensure_ascii=True).encode


def level_name(levelno_or_name):
    """Python logging levelno or a name -> a rankdb level."""
    if isinstance(levelno_or_name, str):
        s = levelno_or_name.lower()
        aliases = {"warning": "warn", "err": "error", "critical": "fatal", "exception": "error"}
        s = aliases.get(s, s)
        return s if s in LEVELS else "info"
    n = int(levelno_or_name)
    if n < 20:
        return "debug"
    if n < 30:
        return "info"
    if n < 40:
        return "warn"
    if n < 50:
        return "error"
    return "fatal"


def clean_text(s, limit=MAX_TEXT_BYTES):
    """Valid UTF-8 (lone surrogates replaced), at most limit bytes."""
    if not isinstance(s, str):
        s = str(s)
    b = s.encode("utf-8", "replace")
    if len(b) > limit:
        b = b[:limit]
        return b.decode("utf-8", "ignore") + "...[truncated]"
    return b.decode("utf-8")


class Encoder:
    """Per-client encoder: knows job/rank/attempt, counts what it drops."""

    def __init__(self, job, rank, attempt, warn):
        self.prefix = '{"job":%s,"rank":%d,"attempt":%d' % (_dumps(job), rank, attempt)
        self.warn = warn  # warn(key, message): rate-limited warning
        self.good_names = set()
        self.dropped_values = 0

    def name_ok(self, name):
        if name in self.good_names:
            return True
        if isinstance(name, str) and NAME_RE.match(name):
            if len(self.good_names) < 100000:
                self.good_names.add(name)
            return True
        return False

    def value(self, name, v):
        """-> a JSON-able number/None, or raises ValueError."""
        t = type(v)
        if t is float:
            return v
        if t is int:
            return v if -(1 << 53) <= v <= (1 << 53) else float(v)
        if t is bool:
            return int(v)
        if v is None:
            return None
        # numpy scalars, 0-d / 1-element tensors (converted here, off the
        # training thread), Decimal, Fraction ...
        try:
            f = float(v)
        except (TypeError, ValueError, OverflowError, RuntimeError) as e:
            raise ValueError("value of %r is not a number (%s)" % (name, type(v).__name__)) from e
        return f

    def step(self, step):
        if step is None:
            return None
        try:
            s = int(step)
        except (TypeError, ValueError, OverflowError):
            s = -1
        if s < 0 or s > (1 << 62):
            self.warn("step", "step %r is not an integer >= 0; sent without a step" % (step,))
            return None
        return s

    def _head(self, ts_ns, step, kind):
        h = self.prefix
        if kind:
            h += ',"type":"%s"' % kind
        if ts_ns is not None:
            h += ',"timestamp":%d' % ts_ns
        if step is not None:
            h += ',"step":%d' % step
        return h

    def metrics(self, ts_ns, step, metrics):
        """-> list of NDJSON lines (bytes), possibly empty."""
        clean = {}
        for k, v in metrics.items():
            if not self.name_ok(k):
                self.dropped_values += 1
                self.warn("name:%r" % (k,), "metric name %r is not 1..256 printable ASCII "
                          "characters without space, quote, comma, backslash or braces; dropped" % (k,))
                continue
            try:
                clean[k] = self.value(k, v)
            except ValueError as e:
                self.dropped_values += 1
                self.warn("value:%s" % k, "%s; dropped" % e)
        if not clean:
            return []
        head = self._head(ts_ns, self.step(step), None) + ',"metrics":'
        if len(clean) <= MAX_METRICS_PER_RECORD:
            return [(head + _dumps(clean) + "}\n").encode()]
        items = list(clean.items())
        return [(head + _dumps(dict(items[i:i + MAX_METRICS_PER_RECORD])) + "}\n").encode()
                for i in range(0, len(items), MAX_METRICS_PER_RECORD)]

    def log(self, ts_ns, step, level, message, fields):
        rec = self._head(ts_ns, self.step(step), "log")
        rec += ',"level":"%s","message":%s' % (level_name(level), _dumps(clean_text(message)))
        if fields:
            flat = {}
            for k, v in fields.items():
                if not (v is None or isinstance(v, (bool, int, float, str))):
                    v = str(v)
                if isinstance(v, str):
                    v = clean_text(v, 4096)
                elif isinstance(v, int) and not isinstance(v, bool) and abs(v) > (1 << 53):
                    v = float(v)
                elif isinstance(v, float) and not math.isfinite(v):
                    v = repr(v)
                flat[clean_text(k, 256)] = v
            text = _dumps(flat)
            if len(text) > MAX_TEXT_BYTES:
                text = '{"fields_truncated":true}'
            rec += ',"fields":' + text
        return [(rec + "}\n").encode()]

    def span(self, step, name, start_ns, duration_ns):
        step = self.step(step)
        if step is None or not self.name_ok(name):
            self.dropped_values += 1
            self.warn("span:%r" % (name,), "span %r without a valid step or name; dropped" % (name,))
            return []
        return [(self.prefix + ',"type":"span","step":%d,"name":%s,"start":%d,"duration_ns":%d}\n'
                 % (step, _dumps(name), start_ns, max(0, int(duration_ns)))).encode()]

    def encode(self, item):
        kind = item[0]
        if kind == "m":
            return self.metrics(item[1], item[2], item[3])
        if kind == "l":
            return self.log(item[1], item[2], item[3], item[4], item[5])
        if kind == "s":
            return self.span(item[1], item[2], item[3], item[4])
        return []
