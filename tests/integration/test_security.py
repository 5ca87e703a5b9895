"""Scoped tokens (issue 17): every scope x endpoint family allowed and
refused, job patterns (URL and per record in write bodies), reload and
revoke, the legacy admin_token, the insecure-bind refusal, the audit lines,
the failure counters in /metrics, and the real InfluxDB Python client
authenticating with a token."""
import base64
import json
import os
import signal
import subprocess
import time
import urllib.parse

from harness import T0, Server, wait_until


def rankctl_bin():
    return os.path.join(os.path.dirname(os.path.dirname(os.environ.get("RDB_BIN") or
                                                        "build/server/rankdbd")), "tools", "rankctl")


def token_add(path, tid, scopes, jobs=None):
    args = [rankctl_bin(), "token", "add", path, tid, scopes] + ([jobs] if jobs else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    tok = p.stdout.strip()
    assert tok.startswith(tid + "."), tok
    return tok


def bearer(tok):
    return {"Authorization": "Bearer " + tok} if tok else {}


def rec(job, step=1):
    return {"job": job, "rank": 0, "step": step, "timestamp": T0 + step, "metrics": {"loss": 1.0}}


def secured(tmp_name="sec"):
    s = Server(name=tmp_name)
    tf = os.path.join(s.workdir, "tokens")
    toks = {
        "ing": token_add(tf, "ing", "ingest"),
        "qry": token_add(tf, "qry", "query"),
        "adm": token_add(tf, "adm", "admin"),
        "teama": token_add(tf, "teama", "ingest,query", "team-a-*"),
    }
    s.flags += ["--tokens-file", tf]
    s.start()
    return s, tf, toks


# endpoint families: (method, path, body, content type, scope)
FAMILIES = [
    ("POST", "/api/v1/write", json.dumps([rec("j1")]), "application/json", "ingest"),
    ("POST", "/write?db=j1", "train,job=j1,rank=0 loss=1 %d" % T0, "text/plain", "ingest"),
    ("POST", "/api/v2/write?bucket=j1", "train,job=j1,rank=0 loss=2 %d" % (T0 + 1), "text/plain", "ingest"),
    ("GET", "/api/v1/jobs", None, None, "query"),
    ("GET", "/api/v1/query/range?job=j1&metric=loss", None, None, "query"),
    ("GET", "/query?q=SHOW+DATABASES", None, None, "query"),
    ("GET", "/grafana/", None, None, "query"),
    ("GET", "/ui/", None, None, "query"),
    ("GET", "/api/v1/admin/stats", None, None, "admin"),
]
WHO = {"ingest": "ing", "query": "qry", "admin": "adm"}


def call(s, method, path, body, ctype, headers):
    h = dict(headers)
    if ctype:
        h["Content-Type"] = ctype
    return s.request(method, path, body=body, headers=h)


def test_scope_by_endpoint_family():
    s, tf, toks = secured()
    for method, path, body, ctype, scope in FAMILIES:
        st, h, data = call(s, method, path, body, ctype, {})
        assert st == 401, (path, st, data)
        st, h, data = call(s, method, path, body, ctype, bearer("ing.nottherightsecret"))
        assert st == 403, (path, st, data)
        for who in ("ing", "qry", "adm"):
            st, h, data = call(s, method, path, body, ctype, bearer(toks[who]))
            if WHO[scope] == who:
                assert st < 300 or (st == 404 and "grafana" in path), (path, who, st, data)
            else:
                assert st == 403, (path, who, st, data)
                assert b"forbidden" in data and b"scope" not in data, data
    # public endpoints stay open
    assert s.get("/healthz")[0] == 200
    assert s.get("/metrics")[0] == 200
    assert s.request("GET", "/ping")[0] == 204
    s.stop()


def test_influx_credential_forms():
    s, tf, toks = secured()
    ing, qry = toks["ing"], toks["qry"]
    lp = "train,job=j2,rank=0 loss=3 %d" % T0
    # InfluxDB 2 clients: "Token ..."
    assert s.post("/api/v2/write?bucket=j2", lp, "text/plain",
                  headers={"Authorization": "Token " + ing})[0] == 204
    # v1 u / p parameters: user = id, password = secret; or password = whole token
    tid, sec = ing.split(".", 1)
    q = urllib.parse.urlencode({"db": "j2", "u": tid, "p": sec})
    assert s.post("/write?" + q, lp, "text/plain")[0] == 204
    q = urllib.parse.urlencode({"db": "j2", "u": "whoever", "p": ing})
    assert s.post("/write?" + q, lp, "text/plain")[0] == 204
    # basic auth (Grafana's InfluxDB datasource with user and password)
    b = base64.b64encode(("%s:%s" % tuple(qry.split(".", 1))).encode()).decode()
    assert s.get("/query?q=SHOW+DATABASES", headers={"Authorization": "Basic " + b})[0] == 200
    b = base64.b64encode(("%s:%s" % tuple(ing.split(".", 1))).encode()).decode()
    assert s.get("/query?q=SHOW+DATABASES", headers={"Authorization": "Basic " + b})[0] == 403
    # a browser gets asked (WWW-Authenticate) when it sends nothing
    st, h, _ = s.get("/ui/")
    assert st == 401 and h.get("www-authenticate", "").startswith("Basic"), (st, h)
    assert s.get("/ui/", headers={"Authorization": "Basic !!!"})[0] == 403
    s.stop()


def test_job_patterns():
    s, tf, toks = secured()
    t = bearer(toks["teama"])
    st, body = s.write([rec("team-a-run1")], headers=t)
    assert st == 200, body
    # a body naming another job is refused whole, nothing of it stored
    st, body = s.write([rec("team-a-run1", 2), rec("team-b-run1")], headers=t)
    assert st == 403, body
    lp = "train,job=team-a-x,rank=0 loss=1 %d\ntrain,job=team-b-x,rank=0 loss=1 %d\n" % (T0, T0)
    assert s.post("/write?db=team-a-x", lp, "text/plain", headers=t)[0] == 403
    lp = "train,job=team-a-x,rank=0 loss=1 %d\n" % T0
    assert s.post("/write?db=team-a-x", lp, "text/plain", headers=t)[0] == 204
    # job-limited tokens cannot use endpoints that do not name one job in the URL
    assert s.get("/query?q=SHOW+DATABASES", headers=t)[0] == 403
    # reads: only its jobs, and no listing it cannot filter
    st, _, data = s.get("/api/v1/query/range?job=team-a-run1&metric=loss", headers=t)
    assert st == 200, data
    rows = json.loads(data)
    assert "team-a-run1" in json.dumps(rows) and "team-b" not in json.dumps(rows)
    assert s.get("/api/v1/query/range?job=team-b-run1&metric=loss", headers=t)[0] == 403
    # every job parameter counts, whichever one the endpoint reads
    for q in ("job=team-b-run1&job=team-a-run1", "job=team-a-run1&job=team-b-run1",
              "job=team-a-*", "job=team-a-x%7Cteam-b-run1"):
        assert s.get("/api/v1/query/range?%s&metric=loss" % q, headers=t)[0] == 403, q
    assert s.get("/api/v1/jobs/team-b-run1/metrics", headers=t)[0] == 403
    assert s.get("/api/v1/jobs/team-a-run1/metrics", headers=t)[0] == 200
    assert s.get("/api/v1/jobs", headers=t)[0] == 403
    # the unlimited query token sees that nothing of the refused write was stored
    st, _, data = s.get("/api/v1/jobs", headers=bearer(toks["qry"]))
    assert st == 200 and b"team-b-run1" not in data, data
    st, _, data = s.get("/api/v1/query/range?job=team-a-run1&metric=loss",
                        headers=bearer(toks["qry"]))
    assert st == 200 and json.dumps(json.loads(data)).count("%d" % (T0 + 2)) == 0, data
    s.stop()


def test_reload_and_revoke():
    s, tf, toks = secured()
    assert s.get("/api/v1/jobs", headers=bearer(toks["qry"]))[0] == 200
    p = subprocess.run([rankctl_bin(), "token", "revoke", tf, "qry"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    # the file changed: re-read within about a second
    wait_until(lambda: s.get("/api/v1/jobs", headers=bearer(toks["qry"]))[0] == 403, timeout=15)
    new = token_add(tf, "qry2", "query")
    s.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: s.get("/api/v1/jobs", headers=bearer(new))[0] == 200, timeout=15)
    # the admin endpoint re-reads it too
    assert s.post("/api/v1/admin/tokens/reload", "", headers=bearer(new))[0] == 403
    st, _, data = s.post("/api/v1/admin/tokens/reload", "", headers=bearer(toks["adm"]))
    assert st == 200 and b"4 tokens" in data, data
    lines = [json.loads(l) for l in open(os.path.join(s.data_dir, "audit.log"))]
    assert any(l["action"] == "tokens_reload" and l["result"] == "ok" and l.get("token_id") == "adm"
               for l in lines), lines
    # a broken file is refused; the tokens in force stay
    with open(tf, "a") as f:
        f.write("broken line\n")
    s.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "tokens file refused" in s.log_text(), timeout=15)
    assert s.get("/api/v1/jobs", headers=bearer(new))[0] == 200
    p = subprocess.run([rankctl_bin(), "token", "list", tf], capture_output=True, text=True,
                       timeout=60)
    assert "qry2\tquery\t*" in p.stdout and new.split(".", 1)[1] not in open(tf).read(), p.stdout
    s.stop()


def test_legacy_admin_token_with_tokens_file():
    s = Server(name="legacy")
    tf = os.path.join(s.workdir, "tokens")
    qry = token_add(tf, "qry", "query")
    s.flags += ["--tokens-file", tf, "--admin-token", "legacy-secret-123"]
    s.start()
    assert s.get("/api/v1/admin/stats", headers=bearer("legacy-secret-123"))[0] == 200
    assert s.get("/api/v1/jobs", headers=bearer("legacy-secret-123"))[0] == 403
    assert s.get("/api/v1/admin/stats", headers=bearer(qry))[0] == 403
    s.stop()


def test_audit_and_metrics():
    s, tf, toks = secured()
    s.get("/api/v1/jobs")
    s.get("/api/v1/jobs", headers=bearer("ing.wrongsecret"))
    s.get("/api/v1/jobs", headers=bearer(toks["ing"]))
    s.get("/api/v1/admin/stats", headers=bearer(toks["qry"]))
    assert s.get("/api/v1/admin/stats", headers=bearer(toks["adm"]))[0] == 200
    lines = [json.loads(l) for l in open(os.path.join(s.data_dir, "audit.log"))]
    refused = [l for l in lines if l["result"] == "refused"]
    assert any(l["status"] == 401 and l["target"] == "/api/v1/jobs" and
               l.get("reason") == "missing" for l in refused), refused
    assert any(l.get("token_id") == "ing" and l.get("reason") == "bad_token" for l in refused)
    assert any(l.get("token_id") == "ing" and l.get("reason") == "scope" for l in refused)
    assert any(l["action"] == "admin" and l.get("token_id") == "qry" for l in refused), refused
    assert any(l["action"] == "stats" and l.get("token_id") == "adm" and l["result"] == "ok"
               for l in lines), lines
    text = open(os.path.join(s.data_dir, "audit.log")).read()
    for tok in toks.values():
        assert tok.split(".", 1)[1] not in text
    assert "wrongsecret" not in text
    assert all(l["client"].startswith("127.0.0.1:") for l in lines)
    # a flood is rate-limited in the log but fully counted
    for _ in range(30):
        s.get("/api/v1/jobs")
    lines2 = open(os.path.join(s.data_dir, "audit.log")).read().splitlines()
    assert len(lines2) < len(lines) + 30, len(lines2)
    st, _, m = s.get("/metrics")
    m = m.decode()
    missing = [l for l in m.splitlines() if l.startswith('rankdb_auth_failures_total{reason="missing"}')]
    assert missing and int(missing[0].split()[-1]) >= 31, missing
    assert 'rankdb_auth_failures_total{reason="scope"} 2' in m, m
    s.stop()


def spawn(workdir, *flags):
    """rankdbd started directly (the harness pins --http-addr to loopback)."""
    from harness import ctx
    os.makedirs(workdir, exist_ok=True)
    pf = os.path.join(workdir, "port")
    log = open(os.path.join(workdir, "stderr.log"), "ab")
    p = subprocess.Popen([os.environ.get("RDB_BIN") or "build/server/rankdbd", "--data-dir",
                          os.path.join(workdir, "data"), "--http-port", "0", "--port-file", pf]
                         + list(flags), stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    log.close()
    ctx().note_pid(p.pid)
    return p, pf, os.path.join(workdir, "stderr.log")


def test_insecure_bind_refused():
    base = Server(name="insecure").workdir
    p, pf, logf = spawn(os.path.join(base, "a"), "--http-addr", "0.0.0.0")
    assert p.wait(timeout=60) != 0
    text = open(logf).read()
    assert "without a tokens_file" in text and "allow_insecure" in text, text
    p, pf, logf = spawn(os.path.join(base, "u"), "--udp-port", "0", "--udp-addr", "0.0.0.0")
    # udp_port 0 means no UDP listener: nothing to refuse
    wait_until(lambda: os.path.exists(pf) or p.poll() is not None, timeout=60)
    assert p.poll() is None, open(logf).read()
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    # UDP has no credential: a non-loopback udp_addr is refused even with tokens
    tf0 = os.path.join(base, "tokens0")
    token_add(tf0, "q", "query")
    p, pf, logf = spawn(os.path.join(base, "u2"), "--udp-port", "18089", "--udp-addr", "0.0.0.0",
                        "--tokens-file", tf0)
    assert p.wait(timeout=60) != 0
    assert "for UDP" in open(logf).read()
    p, pf, logf = spawn(os.path.join(base, "b"), "--http-addr", "0.0.0.0", "--allow-insecure", "on")
    wait_until(lambda: os.path.exists(pf) or p.poll() is not None, timeout=60)
    assert p.poll() is None and "allow_insecure = on" in open(logf).read()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 0
    tf = os.path.join(base, "tokens")
    token_add(tf, "q", "query")
    p, pf, logf = spawn(os.path.join(base, "c"), "--http-addr", "0.0.0.0", "--tokens-file", tf)
    wait_until(lambda: os.path.exists(pf) and open(pf).read().endswith("\n") or p.poll() is not None,
               timeout=60)
    assert p.poll() is None, open(logf).read()
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", int(open(pf).read().split()[0]), timeout=30)
    c.request("GET", "/api/v1/jobs")
    assert c.getresponse().status == 401
    c.close()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 0


INFLUX_CLIENT = r'''
import json, sys
from influxdb import InfluxDBClient
port, t0, user, pw = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
t0 -= t0 % (10 * 10**9)
c = InfluxDBClient(host="127.0.0.1", port=port, username=user, password=pw, database="secjob")
pts = [{"measurement": "train", "tags": {"job": "secjob", "rank": "0"},
        "time": t0 + i * 10**9, "fields": {"loss": float(i)}} for i in range(10)]
out = {}
try:
    out["write"] = c.write_points(pts, time_precision="n")
except Exception as e:
    out["write"] = "%s: %s" % (type(e).__name__, getattr(e, "code", e))
try:
    rs = c.query("SELECT mean(loss) FROM train WHERE time >= %d AND time < %d GROUP BY time(10s)"
                 % (t0, t0 + 10 * 10**9), epoch="ns")
    out["points"] = list(rs.get_points())
except Exception as e:
    out["points"] = "%s: %s" % (type(e).__name__, getattr(e, "code", e))
print(json.dumps(out))
'''


def test_influxdb_python_client_with_token():
    s = Server(name="influxsec")
    tf = os.path.join(s.workdir, "tokens")
    tok = token_add(tf, "py", "ingest,query")
    s.flags += ["--tokens-file", tf]
    s.start()

    def run(user, pw):
        p = subprocess.run(["/usr/bin/python3", "-c", INFLUX_CLIENT, str(s.port), str(T0), user, pw],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout.strip().splitlines()[-1])
    tid, sec = tok.split(".", 1)
    out = run(tid, sec)
    assert out["write"] is True, out
    assert isinstance(out["points"], list) and out["points"][0]["mean"] == 4.5, out
    bad = run(tid, "0" * 64)
    assert "403" in str(bad["write"]) and "403" in str(bad["points"]), bad
    s.stop()


def test_grafana_datasource_authenticates():
    """What Grafana's JSON datasource sends: with "Basic auth" on, an
    Authorization: Basic header on "Save & test" (GET /grafana/) and on every
    metric/query call; with a custom header, Authorization: Bearer."""
    s, tf, toks = secured()
    s.write_ok([rec("gj", 1)], headers=bearer(toks["ing"]))
    basic = {"Authorization": "Basic " + base64.b64encode(
        ("%s:%s" % tuple(toks["qry"].split(".", 1))).encode()).decode()}
    for h in (basic, bearer(toks["qry"])):
        assert s.get("/grafana/", headers=h)[0] == 200
        st, _, data = s.post("/grafana/metrics", "{}", headers=h)
        assert st == 200 and "loss" in [m["value"] for m in json.loads(data)], data
        q = {"range": {"from": "2023-01-01T00:00:00Z", "to": "2030-01-01T00:00:00Z"},
             "maxDataPoints": 100, "intervalMs": 1000,
             "targets": [{"refId": "A", "target": "loss", "payload": {"job": "gj"}}]}
        st, _, data = s.post("/grafana/query", json.dumps(q), headers=h)
        assert st == 200 and json.loads(data), data
    assert s.post("/grafana/metrics", "{}")[0] == 401
    assert s.post("/grafana/metrics", "{}", headers=bearer(toks["ing"]))[0] == 403
    s.stop()


def test_tls_with_curl_and_python():
    """HTTPS with a self-signed certificate made here: curl and Python's ssl
    verify it against the certificate itself, and a token still decides."""
    import http.client
    import ssl
    base = Server(name="tls").workdir
    cert, key = os.path.join(base, "cert.pem"), os.path.join(base, "key.pem")
    p = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cert], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    tf = os.path.join(base, "tokens")
    q = token_add(tf, "q", "query")
    proc, pf, logf = spawn(os.path.join(base, "srv"), "--tls-cert-file", cert, "--tls-key-file", key,
                           "--tokens-file", tf)
    wait_until(lambda: os.path.exists(pf) and open(pf).read().endswith("\n") or
               proc.poll() is not None, timeout=60)
    assert proc.poll() is None, open(logf).read()
    port = int(open(pf).read().split()[0])
    assert "listening on https://" in open(logf).read()
    url = "https://127.0.0.1:%d/api/v1/jobs" % port
    c = subprocess.run(["curl", "-sS", "--cacert", cert, "-H", "Authorization: Bearer " + q,
                        "-o", "/dev/null", "-w", "%{http_code}", url],
                       capture_output=True, text=True, timeout=60)
    assert c.stdout == "200", (c.stdout, c.stderr)
    c = subprocess.run(["curl", "-sS", "--cacert", cert, "-o", "/dev/null", "-w", "%{http_code}",
                        url], capture_output=True, text=True, timeout=60)
    assert c.stdout == "401", (c.stdout, c.stderr)
    # without the certificate as a trust anchor curl refuses the server
    c = subprocess.run(["curl", "-sS", "-o", "/dev/null", url], capture_output=True, text=True,
                       timeout=60)
    assert c.returncode != 0
    sc = ssl.create_default_context(cafile=cert)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=sc, timeout=30)
    conn.request("GET", "/api/v1/jobs", headers={"Authorization": "Bearer " + q})
    r = conn.getresponse()
    assert r.status == 200 and "jobs" in json.loads(r.read()), r.status
    conn.close()
    # plain HTTP to the TLS port gets no HTTP answer
    plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        plain.request("GET", "/healthz")
        st = plain.getresponse().status
    except (http.client.HTTPException, OSError):
        st = None
    assert st != 200
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
