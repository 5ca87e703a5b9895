"""The Python SDK's UDP signer (rankdb.udp): docs/API.md's worked example
byte for byte, and UdpSender against the real rankdbd with a UDP keys file:
signed line protocol and JSON records are stored, an unsigned sender and a
sender with the wrong secret are refused and counted."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402,F401  (import paths)
import harness  # noqa: E402,F401  (the test context keyed_server uses)
from harness import T0, wait_until  # noqa: E402
from rankdb.udp import UdpSender, sign_datagram  # noqa: E402
from test_ingest import metrics_text  # noqa: E402
from test_udp_auth import keyed_server, points  # noqa: E402

# docs/API.md, "Signed datagrams": the worked example
EX = dict(key_id="team-a", secret=bytes(range(32)), ts_ms=1767225600000, nonce=42,
          payload="train,job=team-a-run1,rank=0 loss=2.25,step=100i")
EX_HEADER = "fe01060000a8da769b0100002a000000000000007465616d2d61"
EX_MAC = "076cf1d3764d065e8b40cda0d76ea4508efd1520f4c2e91f97381cf056acd61a"


def test_worked_example():
    d = sign_datagram(EX["key_id"], EX["secret"], EX["payload"], ts_ms=EX["ts_ms"],
                      nonce=EX["nonce"])
    assert len(d) == 106, len(d)
    assert d[:26].hex() == EX_HEADER, d[:26].hex()
    assert d[26:-32] == EX["payload"].encode()
    assert d[-32:].hex() == EX_MAC, d[-32:].hex()
    # the secret as hex (as rankctl prints it) signs the same
    assert sign_datagram(EX["key_id"], EX["secret"].hex(), EX["payload"], ts_ms=EX["ts_ms"],
                         nonce=EX["nonce"]) == d
    # two datagrams of the same payload get different nonces
    a = sign_datagram("k", EX["secret"], "x v=1", ts_ms=1)
    b = sign_datagram("k", EX["secret"], "x v=1", ts_ms=1)
    assert a[12:20] != b[12:20]


def test_sender_against_rankdbd():
    s, port, kf, sec = keyed_server({"sdk": "sdk-*"}, name="sdkudp")
    with UdpSender("127.0.0.1", port, key_id="sdk", secret=sec["sdk"]) as u:
        u.send_lines(["train,job=sdk-1,rank=%d loss=%d %d" % (r, r, T0 + r) for r in range(8)])
        u.send_records([{"job": "sdk-1", "rank": r, "step": 1, "timestamp": T0,
                         "metrics": {"loss": float(r)}} for r in range(4)])
    wait_until(lambda: points(s, "sdk-1") == 8 and points(s, "sdk-1", "loss") == 4,
               what="the SDK's signed datagrams stored")
    UdpSender("127.0.0.1", port).send_lines(["train,job=sdk-1,rank=9 loss=1 %d" % T0])
    UdpSender("127.0.0.1", port, key_id="sdk", secret="ab" * 32).send_lines(
        ["train,job=sdk-1,rank=9 loss=1 %d" % T0])

    def counted():
        m = metrics_text(s)
        return (m['rankdb_udp_dropped_total{reason="unsigned"}'] == 1 and
                m['rankdb_udp_dropped_total{reason="bad_mac"}'] == 1)
    wait_until(counted, what="the unsigned and the badly signed datagram counted")
    assert points(s, "sdk-1") == 8
    s.stop()

