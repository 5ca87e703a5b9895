"""Bit-exact value round trips: through the head, sealed chunks and WAL replay."""

import json
import math
import random

from harness import (NAN_BITS, NULL, T0, Server, assert_series_equal, bits, expected_series,
                     f32, fmt_bits, from_bits, series_map)

# (value as written, exact JSON text expected in the response or None to
# check bits only)
SPECIAL = [
    (float("nan"), "NaN"),            # json.dumps -> bare NaN literal
    ("NaN", "NaN"),
    (float("inf"), "+Inf"),           # bare Infinity
    (float("-inf"), "-Inf"),          # bare -Infinity
    ("Inf", "+Inf"),
    ("+Inf", "+Inf"),
    ("-Inf", "-Inf"),
    ("Infinity", "+Inf"),
    ("-Infinity", "-Inf"),
    (None, None),                     # null reads back as null
    (-0.0, None),
    (0.0, None),
    (5e-324, None),                   # smallest denormal
    (2.225073858507201e-308, None),   # largest denormal
    (2.2250738585072014e-308, None),  # smallest normal
    (1.7976931348623157e308, None),
    (-1.7976931348623157e308, None),
    (0.1, None),
    (0.30000000000000004, None),
    (1e23, None),
    (-123.456e-7, None),
    (2 ** 53, None),                  # written as a JSON integer
    (-(2 ** 53), None),
    (2 ** 53 + 1, None),              # integer that rounds to 2**53 as a double
    (0, None),
    (1, None),
    (-1, None),
    (4294967296, None),
    (f32(0.1), None),
    (f32(3.14159265), None),
    (f32(1e-30), None),
    (f32(-65504.0), None),
    (f32(1.4e-45), None),             # float32 denormal
    (f32(3.4028234663852886e38), None),
    ("0x7ff8000000000123", "0x7ff8000000000123"),  # NaN with payload
    ("0xfff8000000000000", "0xfff8000000000000"),  # negative quiet NaN
    ("0x7ff0000000000001", "0x7ff0000000000001"),  # signalling NaN: must not be quieted
    ("0x7fffffffffffffff", "0x7fffffffffffffff"),
    ("0x7ff8000000000000", "NaN"),
    ("0x7ff0000000000000", "+Inf"),
    ("0xfff0000000000000", "-Inf"),
    ("0x0000000000000001", None),     # = 5e-324
    ("0x8000000000000000", None),     # = -0.0
    ("0x3ff0000000000000", None),     # = 1.0
    ("0x400921FB54442D18", None),     # pi, upper-case hex digits
]


def _records(job, values):
    return [{"job": job, "rank": 0, "step": i, "timestamp": T0 + i, "metrics": {"v": v}}
            for i, v in enumerate(values)]


def _check_special(s, job):
    obj = s.query_ok(job=job, metric="v")
    (ser,) = obj["series"]
    assert ser["steps"] == list(range(len(SPECIAL))), ser["steps"]
    raw = ser["values"]
    errors = []
    for i, (v, text) in enumerate(SPECIAL):
        want = _want_bits(v)
        if text is not None and raw[i] != text:
            errors.append("value #%d %r: response has %r, expected %r" % (i, v, raw[i], text))
            continue
        if v is None and raw[i] is not None:
            errors.append("value #%d null: response has %r" % (i, raw[i]))
            continue
        got = _got_bits(raw[i])
        if got != want:
            errors.append("value #%d %r: read back %s (raw %r), expected %s"
                          % (i, v, fmt_bits(got), raw[i], fmt_bits(want)))
        finite = want != NULL and math.isfinite(from_bits(want))
        if finite and (isinstance(raw[i], bool) or not isinstance(raw[i], (int, float))):
            errors.append("value #%d %r: finite value not written as a JSON number: %r" % (i, v, raw[i]))
    assert not errors, "\n".join(errors)


def _want_bits(v):
    if v is None:
        return NULL
    if isinstance(v, str):
        if v.startswith("0x"):
            return int(v[2:], 16)
        return {"NaN": NAN_BITS, "Inf": bits(math.inf), "+Inf": bits(math.inf), "Infinity": bits(math.inf),
                "-Inf": bits(-math.inf), "-Infinity": bits(-math.inf)}[v]
    if isinstance(v, float) and math.isnan(v):
        return NAN_BITS
    return bits(v)


def _got_bits(r):
    if r is None:
        return NULL
    if isinstance(r, str):
        if r == "NaN":
            return NAN_BITS
        if r == "+Inf":
            return bits(math.inf)
        if r == "-Inf":
            return bits(-math.inf)
        if r.startswith("0x") and len(r) == 18:
            return int(r[2:], 16)
        return "bad string %r" % r
    return bits(r)


def test_bit_exact_special_values():
    # tiny chunks so that the values go through the chunk codecs after restart
    s = Server(["--chunk-max-points", "8"]).start()
    body = json.dumps(_records("bits", [v for v, _ in SPECIAL]))
    assert "NaN" in body and "Infinity" in body  # bare literals, as json.dumps writes them
    st, obj = s.post_json("/api/v1/write", body)
    assert st == 200 and obj == {"accepted_points": len(SPECIAL), "accepted_events": 0, "records": len(SPECIAL)}, (st, obj)
    _check_special(s, "bits")                      # from the head
    # -0.0 must be spelled -0.0 (or another form that keeps the sign)
    st, _, raw = s.get("/api/v1/query/range?job=bits&metric=v&step_from=10&step_to=10")
    assert st == 200 and b"-0" in raw, raw
    s.restart()
    _check_special(s, "bits")                      # from sealed chunks
    # same values through the WAL: written, then kill -9, then replayed
    s.write_ok(_records("bits2", [v for v, _ in SPECIAL]))
    s.kill9()
    s.start()
    _check_special(s, "bits2")
    _check_special(s, "bits")
    s.stop()


def test_values_ndjson_literals():
    # the same literals on NDJSON lines, mixed in one record's metrics object
    s = Server().start()
    line = ('{"job":"lit","rank":0,"step":1,"timestamp":%d,"metrics":{"a":NaN,"b":Infinity,"c":-Infinity,'
            '"d":null,"e":-0.0,"f":"0x7ff8000000000123","g":5e-324,"h":1.7976931348623157e308,"i":"Inf"}}' % T0)
    st, obj = s.post_json("/api/v1/write", line + "\n", content_type="application/x-ndjson")
    assert st == 200 and obj == {"accepted_points": 9, "accepted_events": 0, "records": 1}, (st, obj)
    obj = s.query_ok(job="lit", metric="a,b,c,d,e,f,g,h,i")
    got = {ser["metric"]: ser["values"][0] for ser in obj["series"]}
    assert got["a"] == "NaN" and got["b"] == "+Inf" and got["c"] == "-Inf", got
    assert got["d"] is None, got
    assert isinstance(got["e"], float) and bits(got["e"]) == bits(-0.0), got
    assert got["f"] == "0x7ff8000000000123", got
    assert bits(got["g"]) == bits(5e-324) and bits(got["h"]) == bits(1.7976931348623157e308), got
    assert got["i"] == "+Inf", got
    s.stop()


def test_large_integer_literals():
    # JSON numbers beyond int64 are still numbers
    s = Server().start()
    vals = [10 ** 20, -(10 ** 20), 2 ** 63, 2 ** 64 + 1, 123456789012345678901234567890]
    body = "[" + ",".join('{"job":"big","rank":0,"step":%d,"timestamp":%d,"metrics":{"v":%d}}' % (i, T0 + i, v)
                          for i, v in enumerate(vals)) + "]"
    st, obj = s.post_json("/api/v1/write", body)
    assert st == 200, (st, obj)
    obj = s.query_ok(job="big", metric="v")
    got = [bits(v) for v in obj["series"][0]["values"]]
    assert got == [bits(float(v)) for v in vals], [from_bits(b) for b in got]
    s.stop()


def test_realistic_codec_series_roundtrip():
    """float32-widened series, integers, full float64 and NaN gaps, with many
    chunks; identical from the head, from chunks, and after WAL replay."""
    s = Server(["--chunk-max-points", "100", "--max-query-points", "10000000"]).start()
    rnd = random.Random(1234)
    recs = []
    n = 1500
    loss = 5.0
    for step in range(n):
        loss = loss * 0.999 + rnd.gauss(0, 0.01)
        m = {
            "loss": f32(loss),
            "grad_norm": f32(abs(rnd.gauss(1.0, 0.3))) if step % 97 else float("nan"),
            "mem_bytes": 30_000_000_000 + rnd.randrange(0, 1 << 20),
            "temp": rnd.randrange(60, 85),
            "lr": 3e-4 * min(1.0, step / 100) * (0.5 + 0.5 * math.cos(math.pi * step / n)),
            "step_time": rnd.uniform(0.2, 0.4),
            "const": 1.0,
            "bits": "0x%016x" % rnd.getrandbits(64),
        }
        if step % 211 == 0:
            m["loss"] = None
        recs.append({"job": "codec", "rank": step % 3, "step": step // 3, "timestamp": T0 + step * 7919,
                     "metrics": m})
    for i in range(0, n, 250):
        s.write_ok(recs[i:i + 250])
    want = expected_series(recs)
    metrics = ",".join(sorted(recs[0]["metrics"]))
    assert_series_equal(series_map(s.query_ok(job="codec", metric=metrics)), want, "head")
    s.restart()
    assert_series_equal(series_map(s.query_ok(job="codec", metric=metrics)), want, "after restart")
    more = [dict(r, job="codec2") for r in recs]
    for i in range(0, n, 250):
        s.write_ok(more[i:i + 250])
    s.kill9()
    s.start()
    assert_series_equal(series_map(s.query_ok(job="codec2", metric=metrics)), expected_series(more),
                        "after kill -9")
    s.stop()
