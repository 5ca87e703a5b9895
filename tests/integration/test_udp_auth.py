"""Authenticated UDP and TLS certificate reload (issue 17): datagrams signed
with the Python SDK's helper are stored; a bad MAC, an unknown key, a stale
timestamp, a replayed datagram, a job outside the key's patterns, an
unsigned datagram (keys configured) and a malformed envelope are each
dropped and counted under their reason in /metrics; revoking and adding
keys takes effect on SIGHUP and on the admin reload; the non-loopback rule
follows the keys file; and a replaced TLS certificate is served after
SIGHUP while a bad one is refused."""
import os
import signal
import socket
import ssl
import subprocess
import sys
import time

from harness import T0, Server, ServerError, wait_until
from test_ingest import free_udp_port, metrics_text, udp_send
from test_security import rankctl_bin, spawn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "clients", "python"))
from rankdb.udp import UdpSender, sign_datagram  # noqa: E402

REASONS = ["bad_mac", "unknown_key", "stale", "replay", "job_not_allowed", "unsigned",
           "malformed"]


def udp_key_add(path, kid, jobs=None):
    p = subprocess.run([rankctl_bin(), "udp-key", "add", path, kid] + ([jobs] if jobs else []),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got_id, secret = p.stdout.split()
    assert got_id == kid and len(secret) == 64, p.stdout
    return secret


def udp_key_revoke(path, kid):
    p = subprocess.run([rankctl_bin(), "udp-key", "revoke", path, kid], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def keyed_server(keys, flags=(), name="udpauth"):
    """A server with the UDP listener and a keys file of keys {id: jobs}.
    -> (server, udp port, keys file, {id: secret})"""
    last = None
    for _ in range(5):
        s = Server(name=name, flags=list(flags))
        kf = os.path.join(s.workdir, "udp_keys")
        secrets = {k: udp_key_add(kf, k, j) for k, j in keys.items()}
        port = free_udp_port()
        s.flags += ["--udp-port", str(port), "--udp-keys-file", kf]
        try:
            return s.start(), port, kf, secrets
        except ServerError as e:
            last = e
    raise last


def drops(s):
    m = metrics_text(s)
    return {r: m.get('rankdb_udp_dropped_total{reason="%s"}' % r) for r in REASONS}


def points(s, job, metric="train.loss"):
    st, obj = s.query(job=job, metric=metric)
    return obj["points"] if st == 200 else 0


def lp(job, step, value=1.0):
    return "train,job=%s,rank=0 loss=%r,step=%di %d" % (job, value, step, T0 + step)


def test_signed_datagrams_stored_and_each_refusal_counted():
    s, port, kf, sec = keyed_server({"team-a": "team-a-*", "other": "*"})
    assert all(v == 0 for v in drops(s).values()), drops(s)
    good = UdpSender("127.0.0.1", port, key_id="team-a", secret=sec["team-a"])
    good.send_lines([lp("team-a-1", 1), lp("team-a-1", 2)])
    good.send_records([{"job": "team-a-1", "rank": 1, "step": 3, "timestamp": T0 + 3,
                        "metrics": {"loss": 0.5}}])
    wait_until(lambda: points(s, "team-a-1") == 2 and points(s, "team-a-1", "loss") == 1,
               what="the good line-protocol and JSON datagrams")

    now_ms = int(time.time() * 1000)
    replayed = sign_datagram("team-a", sec["team-a"], lp("team-a-1", 4))
    bad = [
        ("bad_mac", sign_datagram("team-a", "00" * 32, lp("team-a-1", 5))),
        ("unknown_key", sign_datagram("nosuch", sec["team-a"], lp("team-a-1", 6))),
        ("stale", sign_datagram("team-a", sec["team-a"], lp("team-a-1", 7), ts_ms=now_ms - 120000)),
        ("stale", sign_datagram("team-a", sec["team-a"], lp("team-a-1", 8), ts_ms=now_ms + 120000)),
        ("job_not_allowed", sign_datagram("team-a", sec["team-a"],
                                          lp("team-a-1", 9) + "\n" + lp("team-b-1", 9))),
        ("unsigned", lp("team-a-1", 10).encode()),
        ("malformed", b"\xfe\x01\x06\x00" + b"x" * 10),
    ]
    udp_send(port, [replayed])
    wait_until(lambda: points(s, "team-a-1") == 3, what="the datagram before its replay")
    udp_send(port, [replayed] + [d for _, d in bad])
    want = {r: 0 for r in REASONS}
    want["replay"] = 1
    for r, _ in bad:
        want[r] += 1
    wait_until(lambda: drops(s) == want, what="every refusal counted: %r" % want)
    assert points(s, "team-a-1") == 3  # nothing of the refused datagrams was stored
    assert points(s, "team-b-1") == 0
    # the key "other" (any job) may write team-b-1
    UdpSender("127.0.0.1", port, key_id="other", secret=sec["other"]).send_lines([lp("team-b-1", 1)])
    wait_until(lambda: points(s, "team-b-1") == 1, what="a datagram of the wildcard key")
    log = s.log_text()
    assert "job_not_allowed (key 'team-a')" in log and "bad_mac" in log, s.log_tail()
    assert sec["team-a"] not in log and sec["other"] not in log  # secrets are never logged
    s.stop()


def test_key_revoke_and_reload():
    s, port, kf, sec = keyed_server({"k1": "*"}, flags=["--admin-token", "adm1n"], name="udpreload")
    k1 = UdpSender("127.0.0.1", port, key_id="k1", secret=sec["k1"])
    k1.send_lines([lp("rl", 1)])
    wait_until(lambda: points(s, "rl") == 1, what="k1 before the revoke")
    udp_key_revoke(kf, "k1")
    sec2 = udp_key_add(kf, "k2")
    os.kill(s.pid(), signal.SIGHUP)
    def reloaded():
        parts = s.log_text().split("received SIGHUP")
        return len(parts) > 1 and "1 UDP keys loaded" in parts[-1]
    wait_until(reloaded, what="the keys reloaded on SIGHUP")
    k1.send_lines([lp("rl", 2)])
    wait_until(lambda: drops(s)["unknown_key"] == 1, what="the revoked key refused")
    UdpSender("127.0.0.1", port, key_id="k2", secret=sec2).send_lines([lp("rl", 3)])
    wait_until(lambda: points(s, "rl") == 2, what="the added key taken")
    # the admin endpoint reloads too, and a bad file is refused (the keys stay)
    with open(kf, "a") as f:
        f.write("k3 * nothex\n")
    st, obj = s.post_json("/api/v1/admin/udp-keys/reload", {},
                          headers={"Authorization": "Bearer adm1n"})
    assert st == 422 and ":2:" in obj["error"] and "nothex" not in obj["error"], (st, obj)
    UdpSender("127.0.0.1", port, key_id="k2", secret=sec2).send_lines([lp("rl", 4)])
    wait_until(lambda: points(s, "rl") == 3, what="k2 still in force after a refused reload")
    udp_key_revoke(kf, "k3")
    st, obj = s.post_json("/api/v1/admin/udp-keys/reload", {},
                          headers={"Authorization": "Bearer adm1n"})
    assert st == 200 and obj["reloaded"] is True, (st, obj)
    s.stop()


def test_unsigned_rule_and_non_loopback():
    # keys configured but udp_allow_unauthenticated = on: unsigned datagrams are stored
    s, port, kf, sec = keyed_server({"k": "*"}, flags=["--udp-allow-unauthenticated", "on"],
                                    name="udpunsigned")
    udp_send(port, [lp("un", 1)])
    UdpSender("127.0.0.1", port, key_id="k", secret=sec["k"]).send_lines([lp("un", 2)])
    wait_until(lambda: points(s, "un") == 2, what="an unsigned and a signed datagram")
    UdpSender("127.0.0.1", port, key_id="k", secret="11" * 32).send_lines([lp("un", 3)])
    wait_until(lambda: drops(s)["bad_mac"] == 1, what="a bad signature still refused")
    s.stop()
    # non-loopback udp_addr: refused with keys when unsigned datagrams are allowed,
    # accepted when every datagram must be signed
    base = Server(name="udpbind").workdir
    kf2 = os.path.join(base, "keys")
    udp_key_add(kf2, "k")
    port = free_udp_port()
    p, pf, logf = spawn(os.path.join(base, "a"), "--udp-port", str(port), "--udp-addr", "0.0.0.0",
                        "--udp-keys-file", kf2, "--udp-allow-unauthenticated", "on")
    assert p.wait(timeout=60) != 0
    assert "for UDP storing unsigned datagrams" in open(logf).read()
    p, pf, logf = spawn(os.path.join(base, "b"), "--udp-port", str(port), "--udp-addr", "0.0.0.0",
                        "--udp-keys-file", kf2)
    wait_until(lambda: os.path.exists(pf) or p.poll() is not None, timeout=60)
    assert p.poll() is None, open(logf).read()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 0


def make_cert(base, name, cn):
    cert, key = os.path.join(base, name + ".pem"), os.path.join(base, name + ".key")
    p = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=" + cn, "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cert], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return cert, key


def served_cert(port):
    """The DER certificate a new TLS connection gets."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        with ctx.wrap_socket(raw) as tls:
            return tls.getpeercert(binary_form=True)


def der(cert):
    with open(cert) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def test_tls_certificate_reload_on_sighup():
    base = Server(name="tlsreload").workdir
    cert_a, key_a = make_cert(base, "a", "rankdb-a")
    cert_b, key_b = make_cert(base, "b", "rankdb-b")
    cert, key = os.path.join(base, "cert.pem"), os.path.join(base, "key.pem")

    def install(c, k):
        for src, dst in ((c, cert), (k, key)):
            with open(src, "rb") as f, open(dst + ".tmp", "wb") as g:
                g.write(f.read())
            os.replace(dst + ".tmp", dst)
    install(cert_a, key_a)
    proc, pf, logf = spawn(os.path.join(base, "srv"), "--tls-cert-file", cert, "--tls-key-file", key,
                           "--admin-token", "adm1n")
    wait_until(lambda: os.path.exists(pf) and open(pf).read().endswith("\n") or
               proc.poll() is not None, timeout=60)
    assert proc.poll() is None, open(logf).read()
    port = int(open(pf).read().split()[0])
    assert served_cert(port) == der(cert_a)
    # a kept-alive connection made before the reload goes on working
    keep = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    keep.load_verify_locations(cert_a)
    import http.client
    old = http.client.HTTPSConnection("127.0.0.1", port, context=keep, timeout=30)
    old.request("GET", "/healthz")
    assert old.getresponse().read() is not None

    install(cert_b, key_b)
    proc.send_signal(signal.SIGHUP)
    wait_until(lambda: served_cert(port) == der(cert_b), what="the new certificate served")
    # the server logs the reload just after new connections get the new pair
    wait_until(lambda: "TLS certificate reloaded" in open(logf).read(), what="the reload logged")
    old.request("GET", "/healthz")
    assert old.getresponse().status == 200
    old.close()

    # a key that does not match the certificate: refused, the previous one stays
    install(cert_a, key_b)
    proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "reload REFUSED" in open(logf).read(), what="the bad pair refused")
    assert served_cert(port) == der(cert_b)
    with open(cert, "w") as f:
        f.write("not a certificate\n")
    proc.send_signal(signal.SIGHUP)
    wait_until(lambda: open(logf).read().count("reload REFUSED") == 2, what="garbage refused")
    assert served_cert(port) == der(cert_b)

    # the admin endpoint: 422 for the bad file, 200 once the files are good again
    def admin_reload():
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(cert_b)
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
        c.request("POST", "/api/v1/admin/tls/reload", body="",
                  headers={"Authorization": "Bearer adm1n"})
        st = c.getresponse().status
        c.close()
        return st
    assert admin_reload() == 422
    install(cert_a, key_a)
    assert admin_reload() == 200
    assert served_cert(port) == der(cert_a)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
