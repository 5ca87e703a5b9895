/* util.js - what every page of the dashboard shares: the HTTP API client
 * (token, errors), value and number formatting, a DOM builder that only
 * ever sets text (never HTML built from data), a bounded request pool, the
 * metric vocabulary, and the per-job summary that the jobs page and the run
 * page header show. Classic script: everything hangs off window.RDB. */
"use strict";
(function () {
const RDB = (window.RDB = {});

/* ---- API ---------------------------------------------------------------- */

const TOKEN_KEY = "rankdb.token";
RDB.token = function () {
	try {
		return localStorage.getItem(TOKEN_KEY) || "";
	} catch (e) {
		return "";
	}
};
RDB.setToken = function (t) {
	try {
		if (t) localStorage.setItem(TOKEN_KEY, t);
		else localStorage.removeItem(TOKEN_KEY);
	} catch (e) {
		/* storage disabled: the token lives for this page only */
	}
};

class ApiError extends Error {
	constructor(status, message, path) {
		super(message);
		this.status = status;
		this.path = path;
	}
}
RDB.ApiError = ApiError;

RDB.qs = function (params) {
	const parts = [];
	for (const k of Object.keys(params || {})) {
		const v = params[k];
		if (v === undefined || v === null || v === "") continue;
		parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(String(v)));
	}
	return parts.length ? "?" + parts.join("&") : "";
};

/* GET (or another method) of an API path; resolves to the parsed JSON,
 * rejects with ApiError(status, the server's "error" text). A request is
 * abandoned after 60 s. */
RDB.api = async function (path, params, opts) {
	opts = opts || {};
	const headers = {};
	const tok = RDB.token();
	if (tok) headers.Authorization = "Bearer " + tok;
	const url = path + RDB.qs(params);
	const ctl = new AbortController();
	const timer = setTimeout(() => ctl.abort(), 60000);
	let r;
	try {
		r = await fetch(url, {headers, signal: opts.signal || ctl.signal, cache: "no-store"});
	} catch (e) {
		throw new ApiError(0, "server unreachable (" + e.message + ")", path);
	} finally {
		clearTimeout(timer);
	}
	const text = await r.text();
	let body = null;
	try {
		body = text ? JSON.parse(text) : null;
	} catch (e) {
		body = null;
	}
	if (!r.ok) {
		const msg = (body && (body.error || body.message)) || r.status + " " + r.statusText;
		throw new ApiError(r.status, msg, path);
	}
	return body;
};

/* The same, but a 404 resolves to null (an optional resource). */
RDB.apiOptional = async function (path, params) {
	try {
		return await RDB.api(path, params);
	} catch (e) {
		if (e.status === 404) return null;
		throw e;
	}
};

/* Runs async thunks with at most n in flight; resolves to their results in
 * order (a rejected thunk gives its Error in its slot). */
RDB.pool = async function (thunks, n) {
	const out = new Array(thunks.length);
	let next = 0;
	async function worker() {
		while (next < thunks.length) {
			const i = next++;
			try {
				out[i] = await thunks[i]();
			} catch (e) {
				out[i] = e instanceof Error ? e : new Error(String(e));
			}
		}
	}
	const ws = [];
	for (let i = 0; i < Math.min(n, thunks.length); i++) ws.push(worker());
	await Promise.all(ws);
	return out;
};

/* ---- values and formatting ------------------------------------------------ */

/* A value as rankdb writes it -> a JS number (NaN for "NaN" and other NaN
 * payloads, +-Infinity, null for "no value"). */
RDB.num = function (v) {
	if (typeof v === "number") return v;
	if (v === null || v === undefined) return null;
	if (v === "+Inf") return Infinity;
	if (v === "-Inf") return -Infinity;
	return NaN;
};
/* For charts: finite numbers only, anything else a gap. */
RDB.finite = function (v) {
	const x = RDB.num(v);
	return x !== null && isFinite(x) ? x : null;
};

RDB.fmt = function (v, digits) {
	if (v === null || v === undefined) return "—";
	if (typeof v !== "number") v = RDB.num(v);
	if (v === null) return "—";
	if (!isFinite(v)) return isNaN(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
	const a = Math.abs(v);
	if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(Math.max(1, (digits || 3) - 1));
	return Number(v.toPrecision(digits || 4)).toString();
};
RDB.fmtInt = function (v) {
	return v === null || v === undefined ? "—" : Math.round(v).toLocaleString("en-US");
};
RDB.fmtTime = function (ns) {
	if (ns === null || ns === undefined) return "—";
	const d = new Date(ns / 1e6);
	const p = (x) => String(x).padStart(2, "0");
	return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " +
		p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
};
RDB.fmtAge = function (s) {
	if (s === null || s === undefined || !isFinite(s)) return "—";
	if (s < 1) return "<1 s";
	if (s < 120) return Math.round(s) + " s";
	if (s < 7200) return Math.round(s / 60) + " min";
	if (s < 172800) return Math.round(s / 3600) + " h";
	return Math.round(s / 86400) + " d";
};

/* ---- DOM ---------------------------------------------------------------- */

/* el("td", {class: "x", title: "..", onclick: fn}, child, "text", ...):
 * strings become text nodes; attributes are set as attributes except on*
 * (listeners) and dataset. */
RDB.el = function (tag, attrs) {
	const e = document.createElement(tag);
	if (attrs) {
		for (const k of Object.keys(attrs)) {
			const v = attrs[k];
			if (v === undefined || v === null || v === false) continue;
			if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
			else if (k === "dataset") Object.assign(e.dataset, v);
			else e.setAttribute(k, v === true ? "" : String(v));
		}
	}
	for (let i = 2; i < arguments.length; i++) RDB.append(e, arguments[i]);
	return e;
};
RDB.append = function (e, c) {
	if (c === null || c === undefined || c === false) return;
	if (Array.isArray(c)) c.forEach((x) => RDB.append(e, x));
	else e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
};
RDB.clear = function (e) {
	while (e.firstChild) e.removeChild(e.firstChild);
	return e;
};
/* A panel's placeholder text: "note" (muted) or "error". */
RDB.note = function (text, kind) {
	return RDB.el("p", {class: kind === "error" ? "error" : "muted"}, text);
};

/* ---- metric vocabulary ------------------------------------------------------ */

/* Canonical names first (shared/DESIGN.md, "Metric vocabulary"), then the
 * spellings clients actually send (line protocol's train.*, bench's *_s). */
RDB.VOCAB = {
	loss: ["loss", "train.loss"],
	grad_norm: ["grad_norm", "train.grad_norm"],
	lr: ["lr", "train.lr", "learning_rate"],
	throughput: ["tokens_per_sec", "tokens_per_s", "samples_per_sec", "samples_per_s",
		"train.tokens_per_sec", "train.tokens_per_s", "train.samples_per_sec",
		"train.samples_per_s", "throughput.tflops"],
	step_time: ["step_time", "train.step_time"],
};
RDB.pickMetric = function (metrics, key) {
	const have = new Set(metrics);
	for (const m of RDB.VOCAB[key] || [key]) if (have.has(m)) return m;
	return null;
};
/* The phases of a step-time metric present in the job: <m>.<phase>. */
RDB.phasesOf = function (metrics, stepMetric) {
	if (!stepMetric) return [];
	const pre = stepMetric + ".";
	return metrics.filter((m) => m.startsWith(pre) && m.indexOf(".", pre.length) < 0)
		.map((m) => m.slice(pre.length));
};
/* Phases that are waiting rather than own work (outliers' wait_phases). */
RDB.WAIT_PHASES = ["allreduce", "data", "wait", "dataloader", "collective"];

/* ---- job summary -------------------------------------------------------------- */

/* Where a job stands: from /api/v1/jobs/<job>/health when the server has
 * detection, from the job listing's own fields when it has them, else
 * measured from one series (first/last point of one rank's step metric).
 * Resolves to {job, state, stateSource, step, stepsPerS, mfu, ranksAlive,
 * ranksSeen, worldSize, firstNs, lastNs, firing:[alerts]|null, health,
 * meta, metrics, ranks, detection: bool}. prev: this job's previous
 * summary (a refresh re-reads only what moves); known: {metrics, ranksObj}
 * the caller already has. */
RDB.jobSummary = async function (job, entry, prev, known) {
	const enc = encodeURIComponent(job);
	const s = {job, health: null, detection: false, firing: null};
	const [health, meta, metrics, ranks] = await Promise.all([
		RDB.apiOptional("/api/v1/jobs/" + enc + "/health").catch(() => null),
		prev ? Promise.resolve(prev.meta) : RDB.apiOptional("/api/v1/jobs/" + enc + "/meta").catch(() => null),
		prev ? Promise.resolve(prev.metrics) : known && known.metrics ? Promise.resolve(known.metrics) : RDB.api("/api/v1/jobs/" + enc + "/metrics").then((r) => r.metrics, () => []),
		prev ? Promise.resolve(prev.ranksObj) : known && known.ranksObj ? Promise.resolve(known.ranksObj) : RDB.api("/api/v1/jobs/" + enc + "/ranks").catch(() => ({ranks: [], job_level: false})),
	]);
	s.meta = meta;
	s.metrics = metrics;
	s.ranksObj = ranks;
	s.ranks = ranks.ranks || [];
	s.ranksSeen = s.ranks.length;
	s.worldSize = meta && typeof meta.world_size === "number" ? meta.world_size : null;
	if (health) {
		s.detection = true;
		s.health = health;
		s.state = health.state;
		s.stateSource = "health";
		s.step = health.step;
		s.stepsPerS = health.steps_per_s;
		s.mfu = health.mfu;
		s.ranksAlive = health.ranks_alive;
		s.ranksSeen = health.ranks_seen;
		if (health.world_size !== null && health.world_size !== undefined) s.worldSize = health.world_size;
		/* first_seen is when the detector first saw the job (server
		 * time); the run's start is its first data point: from the
		 * listing or the data below */
		s.lastNs = health.last_seen;
		s.firing = (health.alerts || []).filter((a) => a.state === "firing");
	}
	if (entry && entry.last_step !== undefined) {
		if (s.step === undefined) s.step = entry.last_step;
		if (s.firstNs === undefined) s.firstNs = entry.first_ts;
		if (s.lastNs === undefined) s.lastNs = entry.last_ts;
		if (!s.state && entry.state) {
			s.state = entry.state;
			s.stateSource = "listing";
		}
		if (s.firing === null && Array.isArray(entry.firing_alerts)) s.firing = entry.firing_alerts;
	}
	if (s.step === undefined || s.firstNs === undefined) await measureExtent(s, prev);
	if (!s.state) {
		s.stateSource = "derived";
		if (meta && typeof meta.status === "string") s.state = meta.status;
		else if (s.lastNs) s.state = Date.now() * 1e6 - s.lastNs < 120e9 ? "running" : "idle";
		else s.state = "unknown";
	}
	if (s.mfu === undefined) s.mfu = await jobLevelLast(s, "mfu");
	return s;
};

/* The rank and metric whose single series stands for the job's progress. */
function progressSeries(s) {
	const m = RDB.pickMetric(s.metrics, "step_time") || RDB.pickMetric(s.metrics, "loss") || s.metrics[0];
	return m && s.ranks.length ? {metric: m, rank: s.ranks[0]} : null;
}

/* First/last timestamp and last step of one series, in two or three small
 * reads: a downsample of ~1000 buckets finds the first and last buckets,
 * then raw points of the first and of the last 10 give exact times, steps
 * and the recent steps/s. A refresh
 * (prev given) reads only the points from the last known step on. */
async function measureExtent(s, prev) {
	const ps = progressSeries(s);
	if (!ps) return;
	const base = {job: s.job, metric: ps.metric, rank: ps.rank};
	try {
		let first = prev && prev.firstNs !== undefined ? {ts: prev.firstNs} : null;
		let lastRange;
		if (prev && prev.step !== undefined && prev.step !== null) {
			lastRange = {step_from: prev.step};
		} else {
			const ds = await RDB.api("/api/v1/query/downsample", Object.assign({points: 1000, agg: "count"}, base));
			const ser = ds.series && ds.series[0];
			if (!ser || !ser.start.length) return;
			const n = ser.start.length;
			const key = ds.axis === "step" ? ["step_from", "step_to"] : ["from", "to"];
			/* the last 10 buckets: enough points for a rate */
			lastRange = {[key[0]]: ser.start[Math.max(0, n - 10)], [key[1]]: ser.end[n - 1]};
			const fr = await RDB.api("/api/v1/query/range", Object.assign({[key[0]]: ser.start[0], [key[1]]: ser.end[0]}, base));
			const f = fr.series[0];
			if (f) first = {ts: f.timestamps[0]};
		}
		const lr = await RDB.api("/api/v1/query/range", Object.assign(lastRange, base));
		const l = lr.series[0];
		if (first) s.firstNs = first.ts;
		if (l && l.timestamps.length) {
			const n = l.timestamps.length;
			s.lastNs = l.timestamps[n - 1];
			let st = null;
			for (let i = n - 1; i >= 0 && st === null; i--) st = l.steps[i];
			s.step = st;
			/* steps per second over the last points (at most the last 50) */
			const i0 = Math.max(0, n - 50);
			const dt = (l.timestamps[n - 1] - l.timestamps[i0]) / 1e9;
			if (dt > 0 && l.steps[i0] !== null && st !== null) s.stepsPerS = (st - l.steps[i0]) / dt;
		} else if (prev) {
			s.lastNs = prev.lastNs;
			s.step = prev.step;
		}
	} catch (e) {
		s.extentError = e.message;
	}
}

/* The last value of a job-level series (rank "job"), or null. */
async function jobLevelLast(s, metric) {
	if (!s.ranksObj.job_level || s.metrics.indexOf(metric) < 0) return null;
	try {
		const r = await RDB.api("/api/v1/query/downsample", {job: s.job, metric, rank: "job", points: 1, agg: "last"});
		const ser = r.series && r.series[0];
		return ser ? RDB.finite(ser.last[ser.last.length - 1]) : null;
	} catch (e) {
		return null;
	}
}

/* CSS class of a state word (ok/degraded/hung/down/finished/failed/...). */
RDB.stateClass = function (state) {
	const bad = ["hung", "down", "failed", "straggler", "critical"];
	const warn = ["degraded", "idle", "unknown", "warning", "pending"];
	if (bad.indexOf(state) >= 0) return "st-bad";
	if (warn.indexOf(state) >= 0) return "st-warn";
	if (state === "finished" || state === "resolved") return "st-done";
	return "st-ok";
};
})();
