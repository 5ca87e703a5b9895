"""The built-in dashboard (/ui/): how rankdbd serves it, and what a person
sees in a real browser (headless Chromium over the DevTools protocol,
cdp.py) on a seeded job with an injected straggler.

Screenshots are written to <test temp dir>/artifacts/ (kept when a test
fails, or with RDB_KEEP_TMP=1) and, when RDB_UI_SCREENSHOTS names a
directory, copied there too (that is how docs/img/ is refreshed).
"""

import json
import os
import re
import shutil

import cdp
import harness
from harness import T0, Server

RANKS = 8
STEPS = 120
STRAGGLER = 5      # its backward pass is 60 % slower
HIGH_LOSS = 3      # its loss is the highest of every step
STEP_NS = 1_000_000_000


def seed_job(srv, job, ranks, steps, t0, straggler=None, high_loss=None, logs=True):
    """A data-parallel run: loss/grad norm/lr/throughput/step time and its
    phases per rank and step; the straggler's backward is slow and the
    others wait for it in the collective, so step_time is equal everywhere
    (as in real runs) and only the phases tell who is slow."""
    recs = []
    for s in range(steps):
        ts = t0 + s * STEP_NS
        fwd = [0.100 + 0.001 * ((r * 7 + s) % 5) for r in range(ranks)]
        bwd = [0.200 * (1.6 if r == straggler else 1.0) + 0.001 * ((r * 3 + s) % 4) for r in range(ranks)]
        opt = [0.020 for _ in range(ranks)]
        work = [f + b + o for f, b, o in zip(fwd, bwd, opt)]
        slowest = max(work)
        for r in range(ranks):
            coll = slowest - work[r] + 0.010
            loss = 4.0 * (0.97 ** (s / 4)) + 0.01 * r + (0.5 if r == high_loss else 0.0)
            recs.append({"job": job, "rank": r, "step": s, "timestamp": ts + r * 1000,
                         "metrics": {"loss": loss, "grad_norm": 1.0 + 0.1 * (s % 7), "lr": 3e-4 * min(1.0, (s + 1) / 20),
                                     "tokens_per_sec": 40000.0 / (slowest + 0.010) / 1000.0 + r,
                                     "step_time": slowest + 0.010, "step_time.forward": fwd[r],
                                     "step_time.backward": bwd[r], "step_time.optimizer": opt[r],
                                     "step_time.collective": coll}})
            if logs:
                recs.append({"type": "log", "job": job, "rank": r, "step": s, "timestamp": ts + r * 1000 + 500,
                             "level": "info", "message": "rank %d finished step %d" % (r, s)})
        if logs and straggler is not None and s == steps // 2:
            recs.append({"type": "log", "job": job, "rank": straggler, "step": s, "timestamp": ts + 900,
                         "level": "warn", "message": "backward took 320 ms (peers 200 ms)",
                         "fields": {"host": "node%d" % straggler}})
    for i in range(0, len(recs), 2000):
        st, obj = srv.write(recs[i:i + 2000])
        assert st == 200, "seed write failed: %d %r" % (st, obj)


def seeded_server():
    srv = Server().start()
    seed_job(srv, "ui-run-a", RANKS, STEPS, T0, straggler=STRAGGLER, high_loss=HIGH_LOSS)
    seed_job(srv, "ui-run-b", 4, 100, T0 + 3600 * STEP_NS, logs=False)  # started an hour later
    st, _, _ = srv.request("PUT", "/api/v1/jobs/ui-run-a/meta",
                           body=json.dumps({"world_size": RANKS, "model": "tiny-llama", "global_batch": 64}))
    assert st == 200
    return srv


def artifacts_dir():
    d = os.path.join(harness.ctx().dir, "artifacts")
    os.makedirs(d, exist_ok=True)
    return d


def screenshot(b, name, full_page=True):
    path = b.screenshot(os.path.join(artifacts_dir(), name), full_page=full_page)
    assert os.path.getsize(path) > 5000, "screenshot %s is nearly empty" % name
    out = os.environ.get("RDB_UI_SCREENSHOTS")
    if out:
        os.makedirs(out, exist_ok=True)
        shutil.copy(path, os.path.join(out, name))
    return path


def test_ui_assets_http():
    """Served from the binary, with the caching headers the docs promise."""
    srv = Server().start()
    st, h, body = srv.get("/ui/")
    assert st == 200, st
    assert h["content-type"].startswith("text/html"), h
    assert h["cache-control"] == "no-cache", h
    assert "script-src 'self'" in h["content-security-policy"], h
    etag = h["etag"]
    assert re.fullmatch(r'"[0-9a-f]{16}"', etag), etag
    html = body.decode()
    # index.html refers to content-hashed names, which are cacheable forever
    refs = re.findall(r'(?:src|href)="([^"#]+\.(?:js|css))"', html)
    assert len(refs) >= 8 and all(re.search(r"\.[0-9a-f]{16}\.(js|css)$", r) for r in refs), refs
    for ref in refs:
        st, h2, data = srv.get("/ui/" + ref)
        assert st == 200, (ref, st)
        assert h2["cache-control"] == "public, max-age=31536000, immutable", (ref, h2)
        assert len(data) > 0
    # revalidation: same ETag -> 304 without a body; another -> 200
    st, h, body = srv.get("/ui/", headers={"If-None-Match": etag})
    assert st == 304 and body == b"", (st, body[:100])
    assert h["etag"] == etag
    st, _, _ = srv.get("/ui/", headers={"If-None-Match": '"0000000000000000", W/' + etag})
    assert st == 304
    st, _, _ = srv.get("/ui/", headers={"If-None-Match": '"0000000000000000"'})
    assert st == 200
    # gzip only when asked for, and it inflates to the same bytes
    js = [r for r in refs if "uPlot" in r and r.endswith(".js")][0]
    st, h, plain = srv.get("/ui/" + js)
    h2_etag = h["etag"]
    assert "content-encoding" not in h and h["vary"] == "Accept-Encoding"
    assert b"uPlot" in plain[:200]
    st, h, gz = srv.get("/ui/" + js, headers={"Accept-Encoding": "gzip, deflate"})
    import gzip
    assert h.get("content-encoding") == "gzip" and gzip.decompress(gz) == plain and len(gz) < len(plain)
    assert h["etag"] == h2_etag[:-1] + '-gz"', (h["etag"], h2_etag)  # another representation, another tag
    st, _, _ = srv.get("/ui/" + js, headers={"Accept-Encoding": "gzip", "If-None-Match": h["etag"]})
    assert st == 304
    st, h, _ = srv.get("/ui/" + js, headers={"Accept-Encoding": "gzip;q=0"})
    assert "content-encoding" not in h
    # the licence of the bundled charting library ships inside the binary
    st, h, lic = srv.get("/ui/vendor/uPlot.LICENSE")
    assert st == 200 and b"MIT License" in lic and b"Leon Sorokin" in lic
    # redirects, unknown files, methods
    st, h, _ = srv.get("/ui")
    assert st == 301 and h["location"] == "/ui/"
    st, h, _ = srv.get("/")
    assert st == 302 and h["location"] == "/ui/"
    st, obj = srv.get_json("/ui/nope.js")
    harness.assert_error(st, obj, 404, what="unknown dashboard file")
    st, h, _ = srv.request("POST", "/ui/", body="x")
    assert st == 405 and h["allow"] == "GET"
    # the API is untouched by the new routes
    st, obj = srv.get_json("/api/v1/jobs")
    assert st == 200 and obj == {"jobs": []}


def chart(info, key_metric):
    for c in info["charts"]:
        if c["metric"] == key_metric:
            return c
    raise AssertionError("no chart of %s in %r" % (key_metric, [c["metric"] for c in info["charts"]]))


def nonwhite_pixels(b, selector):
    """How many of the canvas's pixels are not background (it really drew)."""
    return b.eval("""(() => { const c = document.querySelector(%s); if (!c) return -1;
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] < 230 || d[i + 1] < 230 || d[i + 2] < 230)) n++;
        return n; })()""" % json.dumps(selector))


def center_of(b, selector):
    """[left, top, width, height] in viewport pixels, after scrolling it into view."""
    r = b.eval("(() => { const e = document.querySelector(%s); if (!e) return null; e.scrollIntoView({block: 'center'});"
               " const r = e.getBoundingClientRect();"
               " return [r.left, r.top, r.width, r.height]; })()" % json.dumps(selector))
    assert r, "no element %s" % selector
    return r


def test_ui_browser_jobs_run_logs():
    """Jobs page, run page with an injected straggler, click-through to
    logs, zoom, compare and token, in headless Chromium."""
    srv = seeded_server()
    b = cdp.Browser(harness.ctx().dir, width=1400, height=900)
    try:
        base = "http://127.0.0.1:%d/ui/" % srv.port
        # ---- jobs page
        b.navigate(base)
        b.wait_for("document.body.dataset.ready === 'jobs'")
        rows = b.eval("Array.from(document.querySelectorAll('#jobs-table tbody tr')).map(tr =>"
                      " [tr.dataset.job].concat(Array.from(tr.cells).map(td => td.textContent)))")
        assert [r[0] for r in rows] == ["ui-run-b", "ui-run-a"], "newest first: %r" % rows
        a = rows[1]
        assert a[3] == "8 / 8", a           # ranks alive (detection) / declared world size (metadata)
        assert a[4] == "119", a             # current step
        assert a[5] not in ("", "—"), a     # steps/s measured from the data
        assert a[8].startswith("2023-11-14"), a
        b.eval("(() => { const f = document.getElementById('filter'); f.focus(); })()")
        b.call("Input.insertText", {"text": "run-a"})
        b.wait_for("document.querySelectorAll('#jobs-table tbody tr').length === 1")
        assert b.eval("document.querySelector('#jobs-table tbody tr').dataset.job") == "ui-run-a"
        screenshot(b, "jobs.png", full_page=False)

        # ---- run page, reached by clicking the job's link
        x, y, w, h = center_of(b, "#jobs-table a.job-link")
        b.click(x + w / 2, y + h / 2)
        b.wait_for("document.body.dataset.ready === 'run'")
        assert b.eval("location.hash") == "#/run/ui-run-a"
        info = b.eval("RDB.debug()")
        assert [c["metric"] for c in info["charts"]] == ["loss", "grad_norm", "lr", "tokens_per_sec", "step_time"]
        for c in info["charts"]:
            assert c["state"] == "drawn", c
            assert c["series"][1:] == ["min", "max", "median"] and c["bands"] == 1, c
            assert c["points"] == STEPS, "one bucket per step for %d steps: %r" % (STEPS, c["points"])
            for lo, hi, med in zip(c["min"], c["max"], c["median"]):
                assert lo <= med <= hi, (c["metric"], lo, med, hi)
        loss = chart(info, "loss")
        assert loss["spread"] == STEPS, "the loss band has width at every step"
        assert set(loss["argmax"]) == {HIGH_LOSS}, "rank %d has the highest loss: %r" % (HIGH_LOSS, loss["argmax"])
        assert set(loss["argmin"]) == {0}
        for i in range(len(info["charts"])):
            n = nonwhite_pixels(b, ".chart:nth-child(%d) canvas" % (i + 1))
            assert n > 500, "chart %d drew only %d pixels" % (i, n)

        # straggler table: rank 5 on top, flagged, blamed on its backward pass
        strag = b.eval("Array.from(document.querySelectorAll('#straggler-table tbody tr')).map(tr =>"
                       " Array.from(tr.cells).map(td => td.textContent))")
        assert strag and strag[0][0] == str(STRAGGLER), strag
        assert strag[0][-1] == "straggler" and strag[0][4].startswith("backward +"), strag[0]
        assert all(r[-1] == "" for r in strag[1:]), "only the injected straggler is flagged: %r" % strag

        # heatmap of step_time.backward: every rank; the straggler's row saturated red (far above its peers)
        heat = info["heat"]
        assert heat["metric"] == "step_time.backward" and heat["ranks"] == RANKS, heat
        p = heat["plot"]
        def row_rgb(rank):
            return b.eval("(() => { const c = document.querySelector('.heat-canvas'); const dpr = c.width / c.clientWidth;"
                          " const px = c.getContext('2d').getImageData(Math.round((%f) * dpr), Math.round((%f) * dpr), 1, 1).data;"
                          " return [px[0], px[1], px[2]]; })()" % (p["x"] + p["w"] / 2, p["y"] + (rank + 0.5) * p["h"] / RANKS))
        assert heat["mode"] == "deviation"
        hot, cold = row_rgb(STRAGGLER), row_rgb(0)
        assert hot[0] > 150 and hot[1] < 80 and hot[2] < 80, "the straggler's row should be red: %r" % hot
        assert cold[1] > 150, "a normal rank's row should be near white: %r" % cold

        # metadata and (until detection lands: says so) health and alerts
        meta = json.loads(b.eval("document.getElementById('meta-doc').textContent"))
        assert meta["world_size"] == RANKS and meta["model"] == "tiny-llama"
        st, _ = srv.get_json("/api/v1/jobs/ui-run-a/health")
        health_text = b.eval("document.getElementById('health').textContent")
        if st == 404:
            assert "detection not available" in health_text, health_text
        else:
            assert b.eval("document.querySelectorAll('#health-table tbody tr').length") > 0
        st, _ = srv.get_json("/api/v1/alerts?job=ui-run-a")
        alerts_text = b.eval("document.getElementById('alerts').textContent")
        assert ("detection not available" in alerts_text) == (st == 404), alerts_text
        screenshot(b, "run.png")

        # ---- click a point of the loss chart above the median: logs of the max rank at that step
        ox, oy, ow, oh = center_of(b, ".chart[data-chart=loss] .u-over")
        cx = ox + ow * 0.5
        b.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": cx, "y": oy + 2})
        b.click(cx, oy + 2)
        b.wait_for("document.getElementById('logs').dataset.state === 'drawn'")
        title = b.eval("document.getElementById('logs-title').textContent")
        m = re.search(r"rank (\d+) · step (\d+)", title)
        assert m and int(m.group(1)) == HIGH_LOSS, title
        step = int(m.group(2))
        at = b.eval("Array.from(document.querySelectorAll('#log-list .at-step .msg')).map(e => e.textContent)")
        assert at == ["rank %d finished step %d" % (HIGH_LOSS, step)], at
        assert int(b.eval("document.getElementById('logs').dataset.count")) > 20
        screenshot(b, "run-logs.png", full_page=False)
        b.eval("document.getElementById('logs-close').click()")

        # ---- the straggler's row opens its logs, with its warning
        b.eval("document.querySelector('#straggler-table tbody tr').click()")
        b.wait_for("document.getElementById('logs').dataset.state === 'drawn'")
        assert "rank %d" % STRAGGLER in b.eval("document.getElementById('logs-title').textContent")
        b.eval("document.getElementById('logs-close').click()")
        msgs = b.eval("fetch('/api/v1/logs/around?job=ui-run-a&rank=%d&step=%d&window_steps=0').then(r => r.json())"
                      ".then(o => o.logs.map(l => l.message))" % (STRAGGLER, STEPS // 2))
        assert "backward took 320 ms (peers 200 ms)" in msgs

        # ---- zoom: drag across the middle of the step-time chart; every panel re-queries the range
        ox, oy, ow, oh = center_of(b, ".chart[data-chart=step_time] .u-over")
        b.drag(ox + ow * 0.25, oy + oh / 2, ox + ow * 0.5)
        b.wait_for("document.body.dataset.zoomed === '1'")
        info = b.eval("RDB.debug()")
        lo, hi = info["view"]["lo"], info["view"]["hi"]
        assert 20 <= lo < hi <= 70, (lo, hi)
        for c in info["charts"]:
            assert c["x0"] >= int(lo) - 1 and c["x1"] <= hi + 1, (c["metric"], c["x0"], c["x1"], lo, hi)
        assert "lo=" in b.eval("location.hash") and "steps" in b.eval("document.getElementById('range').textContent")
        b.eval("document.getElementById('reset-zoom').click()")
        b.wait_for("document.body.dataset.zoomed === '2'")
        assert b.eval("RDB.debug().charts[0].points") == STEPS

        # ---- compare two runs' loss on one chart
        b.eval("(() => { const s = document.getElementById('compare-job'); s.value = 'ui-run-b';"
               " s.dispatchEvent(new Event('change')); })()")
        b.wait_for("document.getElementById('compare').querySelector('.chart-plot') &&"
                   " RDB.debug().compare && RDB.debug().compare.points > 0")
        cmp_info = b.eval("RDB.debug().compare")
        assert cmp_info["bands"] == 2 and cmp_info["series"][1:] == [
            "ui-run-a min", "ui-run-a max", "ui-run-a median", "ui-run-b min", "ui-run-b max", "ui-run-b median"], cmp_info

        # ---- the token is kept in the browser and sent as a bearer token (harmless without tokens)
        b.eval("(() => { document.getElementById('token').value = 'tok-123';"
               " document.getElementById('tokenform').requestSubmit(); })()")
        b.wait_for("document.body.dataset.ready === 'run'")
        assert b.eval("localStorage.getItem('rankdb.token')") == "tok-123"
        sent = b.eval("(async () => { const r = await RDB.api('/api/v1/jobs'); return r.jobs.length; })()")
        assert sent == 2
        assert any(h.get("Authorization") == "Bearer tok-123" for h in b.request_headers), \
            "no request carried the bearer token"
        assert not b.exceptions, "JavaScript errors: %r" % b.exceptions
    finally:
        b.close()
