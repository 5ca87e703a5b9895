"""Fire-and-forget UDP to rankdbd, optionally signed with a UDP key.

    from rankdb.udp import UdpSender
    s = UdpSender("rankdb-host", 8089, key_id="team-a", secret="<hex from rankctl udp-key add>")
    s.send_lines(["train,job=team-a-run1,rank=0 loss=2.25,step=100i"])
    s.send_records([{"job": "team-a-run1", "rank": 0, "step": 100, "metrics": {"loss": 2.25}}])

A signed datagram is the envelope of docs/API.md ("Signed datagrams"):
magic 0xFE, version 1, key id length, flags 0, ts_ms and nonce (uint64
little-endian), the key id, the payload unchanged, then HMAC-SHA256 over
everything before it. The nonce is random (64 bits), so any number of
senders may share a key. Standard library only; UDP gives no answer, so
whatever rankdbd refuses is only visible in its /metrics
(rankdb_udp_dropped_total{reason=...}).
"""

import hashlib
import hmac
import json
import os
import socket
import struct
import time

__all__ = ["sign_datagram", "UdpSender", "MAGIC", "VERSION"]

MAGIC = 0xFE
VERSION = 1
_HEADER = struct.Struct("<BBBBQQ")
MAC_BYTES = 32


def _secret_bytes(secret):
    if isinstance(secret, (bytes, bytearray)):
        return bytes(secret)
    return bytes.fromhex(secret)


def sign_datagram(key_id, secret, payload, ts_ms=None, nonce=None):
    """The signed envelope of payload (bytes or str) as bytes.

    key_id: 1..64 of [A-Za-z0-9._-]; secret: bytes, or hex as
    `rankctl udp-key add` prints it; ts_ms defaults to now, nonce to 64
    random bits."""
    kid = key_id.encode("ascii")
    if not 1 <= len(kid) <= 64:
        raise ValueError("key id must be 1..64 bytes")
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    if ts_ms is None:
        ts_ms = time.time_ns() // 1000000
    if nonce is None:
        nonce = struct.unpack("<Q", os.urandom(8))[0]
    head = _HEADER.pack(MAGIC, VERSION, len(kid), 0, ts_ms, nonce) + kid
    signed = head + payload
    return signed + hmac.new(_secret_bytes(secret), signed, hashlib.sha256).digest()


class UdpSender:
    """Sends line protocol or JSON records to rankdbd's UDP listener,
    signed when key_id and secret are given. Never blocks on the server;
    a send error (no route, message too long) raises OSError."""

    def __init__(self, host="127.0.0.1", port=8089, key_id=None, secret=None,
                 max_datagram_bytes=60000):
        if (key_id is None) != (secret is None):
            raise ValueError("key_id and secret go together")
        self.addr = (host, int(port))
        self.key_id = key_id
        self._secret = _secret_bytes(secret) if secret is not None else None
        self.max_datagram_bytes = max_datagram_bytes
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def datagram(self, payload, ts_ms=None, nonce=None):
        """The bytes send() puts on the wire for payload."""
        if self.key_id is None:
            return payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
        return sign_datagram(self.key_id, self._secret, payload, ts_ms, nonce)

    def send(self, payload):
        """One datagram of payload (bytes or str)."""
        d = self.datagram(payload)
        if len(d) > self.max_datagram_bytes:
            raise ValueError("datagram of %d bytes is over %d" % (len(d), self.max_datagram_bytes))
        self.sock.sendto(d, self.addr)

    def send_lines(self, lines):
        """Line-protocol lines, as many per datagram as fit."""
        self._send_packed([ln.rstrip("\n") for ln in lines], "\n")

    def send_records(self, records):
        """JSON records (docs/API.md), as NDJSON, as many per datagram as fit."""
        self._send_packed([json.dumps(r, separators=(",", ":")) for r in records], "\n")

    def _send_packed(self, items, sep):
        room = self.max_datagram_bytes - 100  # envelope: header, key id, MAC
        cur, size = [], 0
        for it in items:
            n = len(it.encode("utf-8")) + 1
            if cur and size + n > room:
                self.send(sep.join(cur))
                cur, size = [], 0
            cur.append(it)
            size += n
        if cur:
            self.send(sep.join(cur))

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
