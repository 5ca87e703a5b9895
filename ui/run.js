/* run.js - the run page of one job (#/run/<job>?axis=step&lo=..&hi=..).
 *
 * What a person needs when a run goes wrong, top to bottom: the job's
 * state; loss, grad norm, LR, throughput and step time across ranks
 * (charts.js); a rank x step heatmap of any metric (heatmap.js); the
 * straggler table with the phase that makes each straggler slow; per-rank
 * health; the alert timeline; a second run's loss on the same chart; the
 * metadata document. Clicking a chart, a heatmap cell or a table row opens
 * that rank's logs around that step (app.js, RDB.showLogs).
 *
 * Loading order is what makes it fast: the charts need only the metric
 * list, so they are requested at once (the browser runs 6 requests at a
 * time); the summary, stragglers, heatmap, health and alerts follow. Every
 * query is downsampled on the server to about one bucket per pixel. A zoom
 * (drag on any chart) re-queries every panel for the new range; the range
 * lives in the URL, so a reload or a shared link shows the same view. */
"use strict";
(function () {
const RDB = window.RDB;
const REFRESH_MS = 10000;
const CHARTS = [
	{key: "loss", label: "loss"},
	{key: "grad_norm", label: "grad norm"},
	{key: "lr", label: "learning rate"},
	{key: "throughput", label: "throughput"},
	{key: "step_time", label: "step time (s)"},
];
const STRAGGLER_WINDOW = 500; /* steps, when the view is the whole run */
/* A rank is flagged when its robust score is high (>= 3.5, the usual MAD
 * outlier cut) and it is materially slower (>= 5 % more own work than the
 * median rank): with 500 ranks and tiny jitter, a score alone flags noise. */
const STRAGGLER_SCORE = 3.5, STRAGGLER_EXCESS = 0.05;
/* Points one cross-rank query may read for the first view of a run: ranks x
 * steps past it open on the most recent steps that fit (what is happening
 * now), with the whole run one click away. The server reads every point of
 * the range per chart (~10 M points/s on this machine, docs/BENCHMARKS.md),
 * so this is what keeps the first view of a 512-rank, 20,000-step run under
 * a second. */
const FIRST_VIEW_POINTS = 1000000;

class RunPage {
	constructor(main, job, query) {
		this.main = main;
		this.job = job;
		this.enc = encodeURIComponent(job);
		this.view = {axis: query.axis === "time" ? "time" : "step"};
		if (query.lo !== undefined && query.hi !== undefined && isFinite(+query.lo) && isFinite(+query.hi)) {
			this.view.lo = +query.lo;
			this.view.hi = +query.hi;
		}
		this.wholeRun = query.all === "1";
		this.heatMetric = query.heat || null;
		this.compareJob = query.compare || "";
		this.charts = [];
		this.dead = false;
		this.timer = null;
		RDB.mark("run-start");
	}

	/* ---- layout ------------------------------------------------------------ */

	async show() {
		const el = RDB.el;
		this.headEl = el("div", {class: "run-head"}, el("h1", null, this.job), el("span", {class: "muted"}, "loading…"));
		this.rangeEl = el("span", {class: "muted", id: "range"});
		const axisSel = el("select", {id: "axis", onchange: (e) => this.setAxis(e.target.value)},
			el("option", {value: "step", selected: this.view.axis === "step"}, "step axis"),
			el("option", {value: "time", selected: this.view.axis === "time"}, "time axis"));
		const reset = el("button", {type: "button", id: "reset-zoom", onclick: () => {
			this.wholeRun = true;
			this.zoom(undefined, undefined);
		}}, "whole run");
		this.toolbar = el("div", {class: "toolbar"}, axisSel, reset, this.rangeEl,
			el("span", {class: "muted small"}, "drag across a chart to zoom · click a point for that rank's logs"));
		this.chartsEl = el("section", {class: "charts", id: "charts"});
		this.heatSel = el("select", {id: "heat-metric", onchange: (e) => this.setHeatMetric(e.target.value)});
		this.heatEl = el("div", {class: "panel-body", id: "heatmap"});
		this.stragEl = el("div", {class: "panel-body", id: "stragglers"});
		this.stragTitle = el("span", {class: "muted small"});
		this.healthEl = el("div", {class: "panel-body", id: "health"});
		this.alertsEl = el("div", {class: "panel-body", id: "alerts"});
		this.compareSel = el("select", {id: "compare-job", onchange: (e) => this.setCompare(e.target.value)},
			el("option", {value: ""}, "compare loss with…"));
		this.compareEl = el("div", {class: "panel-body", id: "compare"});
		this.metaEl = el("div", {class: "panel-body", id: "meta"});
		const panel = (title, body, extra, id) => el("section", {class: "panel", id}, el("h2", null, title, extra ? [" ", extra] : null), body);
		RDB.append(RDB.clear(this.main), [this.headEl, this.toolbar, this.chartsEl,
			panel("Rank × step heatmap", this.heatEl, this.heatSel, "heat-panel"),
			el("div", {class: "two"},
				panel("Stragglers", this.stragEl, this.stragTitle, "strag-panel"),
				panel("Per-rank health", this.healthEl, null, "health-panel")),
			panel("Alerts", this.alertsEl, null, "alert-panel"),
			panel("Compare runs", this.compareEl, this.compareSel, "compare-panel"),
			panel("Metadata", this.metaEl, null, "meta-panel")]);
		this.onResize = () => {
			clearTimeout(this.resizeTimer);
			this.resizeTimer = setTimeout(() => {
				this.charts.forEach((c) => c.resize());
				if (this.heat && this.heat.g) this.heat.draw();
			}, 150);
		};
		window.addEventListener("resize", this.onResize);
		this.updateRangeLabel();

		let metrics, ranks;
		try {
			[metrics, this.ranksObj] = await Promise.all([RDB.api("/api/v1/jobs/" + this.enc + "/metrics").then((r) => r.metrics),
				RDB.api("/api/v1/jobs/" + this.enc + "/ranks")]);
			ranks = this.ranksObj.ranks;
		} catch (e) {
			RDB.clear(this.chartsEl).appendChild(RDB.note(e.status === 404 ? "no job named " + this.job : e.message, "error"));
			return;
		}
		this.metrics = metrics;
		this.ranks = ranks;
		this.stepMetric = RDB.pickMetric(metrics, "step_time");
		this.buildCharts();
		if (this.view.lo === undefined && !this.wholeRun && this.view.axis === "step") await this.recentWindow();
		const summary = RDB.jobSummary(this.job, null, null, {metrics, ranksObj: this.ranksObj}).then((s) => {
			this.summary = s;
			this.renderHead();
			this.renderHealth();
			this.renderMeta();
			return s;
		});
		if (this.view.axis === "time") await summary;
		/* the charts first: the other panels' queries would share the
		 * server's cores with them */
		this.buildHeatSelect();
		const light = [this.loadAlerts(), this.loadJobList()];
		await this.loadCharts();
		RDB.mark("charts-drawn");
		await Promise.all([this.loadStragglers(), this.loadHeat()].concat(light, [summary]));
		RDB.mark("run-ready");
		document.body.dataset.ready = "run";
		this.schedule();
	}

	/* A run too big for one quick read opens on its last steps: the share
	 * FIRST_VIEW_POINTS / (ranks x points per series) of its extent, from
	 * one downsampled series (a few ms). */
	async recentWindow() {
		const metric = this.stepMetric || RDB.pickMetric(this.metrics, "loss") || this.metrics[0];
		if (!metric || !this.ranks.length) return;
		let ds;
		try {
			ds = await RDB.api("/api/v1/query/downsample", {job: this.job, metric, rank: this.ranks[0], points: 1000, agg: "count"});
		} catch (e) {
			return;
		}
		const ser = ds.series && ds.series[0];
		if (!ser || !ser.start.length || ds.axis !== "step") return;
		const total = ser.count.reduce((a, b) => a + b, 0);
		const share = FIRST_VIEW_POINTS / (this.ranks.length * total);
		if (share >= 1) return;
		const first = ser.start[0], last = ser.end[ser.end.length - 1];
		const span = Math.max(2, Math.floor((last - first + 1) * share));
		this.view.recent = {steps: span, of: last - first + 1};
		this.view.lo = last - span + 1;
		this.view.hi = undefined;
		this.updateRangeLabel();
	}

	updateRangeLabel() {
		const v = this.view;
		if (v.recent) this.rangeEl.textContent = "last " + RDB.fmtInt(v.recent.steps) + " of " + RDB.fmtInt(v.recent.of) +
			" steps (ranks × steps past " + RDB.fmtInt(FIRST_VIEW_POINTS) + " points; 'whole run' reads all)";
		else if (v.lo === undefined) this.rangeEl.textContent = "whole run";
		else if (v.axis === "time") this.rangeEl.textContent = RDB.fmtTime(v.lo) + " – " + RDB.fmtTime(v.hi);
		else this.rangeEl.textContent = "steps " + RDB.fmtInt(v.lo) + " – " + RDB.fmtInt(v.hi);
	}

	setUrl() {
		const zoomed = this.view.lo !== undefined && !this.view.recent;
		const q = {axis: this.view.axis === "time" ? "time" : undefined, lo: zoomed ? this.view.lo : undefined,
			hi: zoomed ? this.view.hi : undefined, all: this.wholeRun && !zoomed ? "1" : undefined,
			heat: this.heatMetric || undefined, compare: this.compareJob || undefined};
		if (zoomed) {
			q.lo = Math.floor(q.lo);
			q.hi = Math.ceil(q.hi);
		}
		RDB.replaceHash("#/run/" + this.enc + RDB.qs(q));
	}

	/* ---- head ------------------------------------------------------------------ */

	renderHead() {
		const s = this.summary, el = RDB.el;
		const fact = (k, v, title) => el("span", {class: "fact", title}, el("span", {class: "k"}, k), " ", el("span", {class: "v"}, v));
		const age = s.lastNs ? (Date.now() * 1e6 - s.lastNs) / 1e9 : null;
		const alive = s.ranksAlive !== undefined ? RDB.fmtInt(s.ranksAlive) : RDB.fmtInt(s.ranksSeen) + " seen";
		RDB.append(RDB.clear(this.headEl), [el("h1", null, this.job),
			el("span", {class: "pill " + RDB.stateClass(s.state), title: "from " + s.stateSource, id: "job-state"}, s.state),
			fact("step", RDB.fmtInt(s.step)),
			fact("steps/s", RDB.fmt(s.stepsPerS, 3)),
			fact("ranks", alive + " / " + (s.worldSize !== null ? RDB.fmtInt(s.worldSize) : "—"), "alive / declared world size"),
			fact("MFU", s.mfu === null || s.mfu === undefined ? "—" : (100 * s.mfu).toFixed(1) + " %"),
			fact("started", RDB.fmtTime(s.firstNs)),
			fact("last data", age === null ? "—" : RDB.fmtAge(age) + " ago", s.lastNs ? RDB.fmtTime(s.lastNs) : ""),
			s.detection ? null : el("span", {class: "muted small"}, "detection not available")]);
	}

	/* ---- charts ---------------------------------------------------------------- */

	buildCharts() {
		RDB.clear(this.chartsEl);
		this.charts.forEach((c) => c.destroy());
		this.charts = [];
		CHARTS.forEach((spec, i) => {
			const metric = RDB.pickMetric(this.metrics, spec.key);
			const box = RDB.el("div", {class: "chart", dataset: {chart: spec.key}});
			this.chartsEl.appendChild(box);
			if (!metric) {
				box.dataset.state = "absent";
				box.appendChild(RDB.note(spec.label + ": this job has no " + RDB.VOCAB[spec.key].join(" / ") + " metric"));
				return;
			}
			this.charts.push(new RDB.CrossChart(box, {job: this.job, metric, label: spec.label, color: RDB.COLORS[i],
				syncKey: "run", onZoom: (lo, hi) => this.zoom(lo, hi), onPick: (p) => this.pick(p)}));
		});
	}

	viewFor() {
		const s = this.summary || {};
		return Object.assign({firstNs: s.firstNs, lastNs: s.lastNs}, this.view);
	}

	loadCharts() {
		let first = true;
		return Promise.all(this.charts.map((c) => c.load(this.viewFor()).then(() => {
			if (first) RDB.mark("first-chart");
			first = false;
		})));
	}

	async zoom(lo, hi) {
		if (lo !== undefined && hi !== undefined && hi < lo) [lo, hi] = [hi, lo];
		if (lo !== undefined && this.view.axis === "step" && hi - lo < 2) hi = lo + 2;
		this.view.lo = lo;
		this.view.hi = hi;
		this.view.recent = null;
		this.updateRangeLabel();
		this.setUrl();
		RDB.mark("zoom-start");
		delete document.body.dataset.zoomed;
		await Promise.all([this.loadCharts(), this.loadHeat(), this.loadStragglers()]);
		RDB.mark("zoom-drawn");
		document.body.dataset.zoomed = String((this.zooms = (this.zooms || 0) + 1));
	}

	async setAxis(axis) {
		if (axis === this.view.axis) return;
		if (axis === "time" && !this.summary) await RDB.jobSummary(this.job, null, null).then((s) => (this.summary = s));
		this.view = {axis};
		if (axis === "step" && !this.wholeRun) await this.recentWindow();
		this.updateRangeLabel();
		this.setUrl();
		await Promise.all([this.loadCharts(), this.loadHeat(), this.loadStragglers()]);
	}

	pick(p) {
		RDB.showLogs(Object.assign({job: this.job}, p));
	}

	/* ---- heatmap ---------------------------------------------------------------- */

	buildHeatSelect() {
		const prefer = [this.stepMetric && this.stepMetric + ".backward", this.stepMetric && this.stepMetric + ".forward",
			this.stepMetric, RDB.pickMetric(this.metrics, "loss")];
		if (!this.heatMetric || this.metrics.indexOf(this.heatMetric) < 0) {
			this.heatMetric = prefer.find((m) => m && this.metrics.indexOf(m) >= 0) || this.metrics[0];
		}
		RDB.clear(this.heatSel);
		for (const m of this.metrics) this.heatSel.appendChild(RDB.el("option", {value: m, selected: m === this.heatMetric}, m));
	}

	setHeatMetric(m) {
		this.heatMetric = m;
		this.setUrl();
		this.loadHeat();
	}

	loadHeat() {
		if (!this.heatMetric) return Promise.resolve();
		if (!this.heat) this.heat = new RDB.Heatmap(this.heatEl, {job: this.job, ranks: this.ranks.length, onPick: (p) => this.pick(p)});
		return this.heat.load(this.viewFor(), this.heatMetric);
	}

	/* ---- stragglers ---------------------------------------------------------- */

	/* The window of the straggler report: the zoomed steps, else the last
	 * STRAGGLER_WINDOW steps (a whole 20,000-step run of every phase is more
	 * points than one query may read). */
	stragglerWindow() {
		const v = this.view;
		if (v.lo !== undefined && v.hi !== undefined && v.axis === "step") return {step_from: Math.max(0, Math.floor(v.lo)), step_to: Math.ceil(v.hi)};
		if (v.lo !== undefined && v.hi !== undefined) return {from: Math.floor(v.lo), to: Math.ceil(v.hi)};
		return {last_steps: STRAGGLER_WINDOW};
	}

	async loadStragglers() {
		const body = this.stragEl;
		if (!this.stepMetric) {
			RDB.clear(body).appendChild(RDB.note("no step_time metric: nothing to rank ranks by"));
			body.dataset.state = "absent";
			return;
		}
		const seq = (this.stragSeq = (this.stragSeq || 0) + 1);
		const phases = RDB.phasesOf(this.metrics, this.stepMetric);
		const win = this.stragglerWindow();
		const params = Object.assign({job: this.job, metric: this.stepMetric, direction: "high", limit: 4096}, win);
		let r, mode = "value";
		body.dataset.state = "loading";
		try {
			if (phases.length) {
				mode = "phases";
				r = await RDB.api("/api/v1/query/outliers", Object.assign({mode: "phases", phases: phases.join(","),
					wait_phases: phases.filter((p) => RDB.WAIT_PHASES.indexOf(p) >= 0).join(",") || undefined}, params));
			} else {
				r = await RDB.api("/api/v1/query/outliers", params);
			}
		} catch (e) {
			if (seq !== this.stragSeq) return;
			RDB.clear(body).appendChild(RDB.note("straggler report: " + e.message, "error"));
			body.dataset.state = "error";
			return;
		}
		if (seq !== this.stragSeq) return;
		this.renderStragglers(r, mode);
	}

	renderStragglers(r, mode) {
		const el = RDB.el, body = this.stragEl;
		const w = r.window || {};
		this.stragTitle.textContent = (mode === "phases" ? "own work (non-wait phases) of " : "") + r.metric +
			(w.step_from !== undefined ? ", steps " + RDB.fmtInt(w.step_from) + "–" + RDB.fmtInt(w.step_to) : "") +
			" · median " + RDB.fmt(RDB.num(r.median)) + " s" + (r.mad_zero ? " · MAD 0: scores only order" : "");
		const all = r.outliers || [];
		/* per-phase medians over every scored rank, for the attribution */
		const phaseMed = {};
		const work = (r.phases || []).filter((p) => (r.wait_phases || []).indexOf(p) < 0);
		for (const p of r.phases || []) {
			const v = all.map((o) => RDB.num(o.phases && o.phases[p])).filter((x) => x !== null && isFinite(x)).sort((a, b) => a - b);
			phaseMed[p] = v.length ? v[v.length >> 1] : null;
		}
		const top = all.slice(0, 10);
		const rows = top.map((o) => {
			let attr = "—";
			if (mode === "phases" && o.phases) {
				let best = null, excess = -Infinity;
				for (const p of work) {
					const v = RDB.num(o.phases[p]), m = phaseMed[p];
					if (v === null || m === null || !isFinite(v)) continue;
					if (v - m > excess) {
						excess = v - m;
						best = p;
					}
				}
				if (best !== null) {
					const m = phaseMed[best];
					attr = best + " +" + RDB.fmt(excess * 1000, 3) + " ms" + (m > 0 ? " (+" + (100 * excess / m).toFixed(1) + " %)" : "");
				}
			}
			const score = RDB.num(o.score), value = RDB.num(o.value), median = RDB.num(r.median);
			const slow = score !== null && score >= STRAGGLER_SCORE && value !== null && median > 0 &&
				(value - median) / median >= STRAGGLER_EXCESS;
			const tr = el("tr", {class: slow ? "slow" : null, dataset: {rank: o.rank}, title: "click: logs of rank " + o.rank,
				onclick: () => this.pickRankLatest(o.rank)},
				el("td", {class: "num"}, String(o.rank)),
				el("td", {class: "num"}, RDB.fmt(score, 3)),
				el("td", {class: "num"}, RDB.fmt(RDB.num(o.value), 4)),
				mode === "phases" ? el("td", {class: "num"}, RDB.fmt(RDB.num(o.total), 4)) : null,
				mode === "phases" ? el("td", null, slow ? el("strong", null, attr) : attr) : null,
				el("td", null, slow ? el("span", {class: "pill st-bad"}, "straggler") : ""));
			return tr;
		});
		const head = ["rank", "score", mode === "phases" ? "own work (s)" : "value", mode === "phases" ? "step time (s)" : null,
			mode === "phases" ? "slowest phase vs median" : null, ""].filter((h) => h !== null);
		RDB.append(RDB.clear(body), [
			el("table", {class: "strag", id: "straggler-table"}, el("thead", null, el("tr", null, head.map((h) => el("th", null, h)))),
				el("tbody", null, rows)),
			el("p", {class: "muted small"}, r.ranks_scored + " of " + r.ranks + " ranks scored; score = (x − median) / (1.4826 · MAD); flagged at score ≥ " +
				STRAGGLER_SCORE + " and ≥ " + 100 * STRAGGLER_EXCESS + " % slower than the median")]);
		body.dataset.state = "drawn";
		body.dataset.top = top.length ? String(top[0].rank) : "";
	}

	pickRankLatest(rank) {
		const v = this.view;
		if (v.hi !== undefined && v.axis === "step") RDB.showLogs({job: this.job, rank, step: Math.ceil(v.hi), stepEnd: Math.ceil(v.hi)});
		else if (this.summary && this.summary.step !== null && this.summary.step !== undefined)
			RDB.showLogs({job: this.job, rank, step: this.summary.step, stepEnd: this.summary.step});
		else RDB.showLogs({job: this.job, rank});
	}

	/* ---- health, alerts, metadata ----------------------------------------------- */

	renderHealth() {
		const el = RDB.el, body = this.healthEl, s = this.summary;
		const h = s && s.health;
		if (!h) {
			RDB.clear(body).appendChild(RDB.note("detection not available on this server (no /api/v1/jobs/" + this.job + "/health)"));
			body.dataset.state = "absent";
			return;
		}
		const order = {down: 0, hung: 1, straggler: 2, ok: 3};
		const ranks = (h.ranks || []).slice().sort((a, b) => (order[a.state] ?? 3) - (order[b.state] ?? 3) || a.rank - b.rank);
		const limit = this.healthAll ? ranks.length : 20;
		const counts = {};
		ranks.forEach((r) => (counts[r.state] = (counts[r.state] || 0) + 1));
		RDB.append(RDB.clear(body), [
			el("p", {class: "small"}, Object.keys(counts).sort().map((k) => el("span", {class: "pill " + RDB.stateClass(k)}, counts[k] + " " + k))),
			el("table", {class: "health", id: "health-table"},
				el("thead", null, el("tr", null, ["rank", "state", "last seen", "step", "steps/s", "last phase", "alerts"].map((x) => el("th", null, x)))),
				el("tbody", null, ranks.slice(0, limit).map((r) => el("tr", {dataset: {rank: r.rank}, onclick: () => this.pickRankLatest(r.rank)},
					el("td", {class: "num"}, String(r.rank)),
					el("td", null, el("span", {class: "pill " + RDB.stateClass(r.state)}, r.state)),
					el("td", {class: "num"}, RDB.fmtAge(r.last_seen_age_s) + " ago"),
					el("td", {class: "num"}, RDB.fmtInt(r.last_step)),
					el("td", {class: "num"}, RDB.fmt(r.steps_per_s, 3)),
					el("td", null, r.last_phase || "—"),
					el("td", null, (r.alerts || []).join(", ")))))),
			ranks.length > limit ? el("button", {type: "button", onclick: () => {
				this.healthAll = true;
				this.renderHealth();
			}}, "show all " + ranks.length + " ranks") : null]);
		body.dataset.state = "drawn";
	}

	async loadAlerts() {
		const body = this.alertsEl, el = RDB.el;
		let r;
		try {
			r = await RDB.apiOptional("/api/v1/alerts", {job: this.job});
		} catch (e) {
			RDB.clear(body).appendChild(RDB.note("alerts: " + e.message, "error"));
			return;
		}
		if (r === null) {
			RDB.clear(body).appendChild(RDB.note("detection not available on this server (no /api/v1/alerts)"));
			body.dataset.state = "absent";
			return;
		}
		const alerts = r.alerts || [];
		if (!alerts.length) {
			RDB.clear(body).appendChild(RDB.note("no alerts for this job"));
			body.dataset.state = "drawn";
			return;
		}
		const now = Date.now() * 1e6;
		const s = this.summary || {};
		let t0 = s.firstNs || Infinity, t1 = s.lastNs || -Infinity;
		for (const a of alerts) {
			t0 = Math.min(t0, a.active_at || a.starts_at);
			t1 = Math.max(t1, a.ends_at || (a.state === "resolved" ? a.updated_at : now));
		}
		if (!(t1 > t0)) t1 = t0 + 1;
		const lanes = new Map();
		for (const a of alerts.slice().reverse()) {
			const key = a.alertname + (a.rank !== null && a.rank !== undefined ? " · rank " + a.rank : "") + (a.phase ? " · " + a.phase : "") + (a.metric ? " · " + a.metric : "");
			if (!lanes.has(key)) lanes.set(key, []);
			lanes.get(key).push(a);
		}
		const rows = [];
		for (const [key, list] of lanes) {
			const track = el("div", {class: "track"});
			for (const a of list) {
				const start = a.active_at || a.starts_at, end = a.ends_at || (a.state === "resolved" ? a.updated_at : now);
				const bar = el("div", {class: "bar " + (a.state === "firing" ? (a.severity === "critical" ? "st-bad" : "st-warn") : a.state === "pending" ? "st-pend" : "st-done"),
					title: a.state + " · " + (a.summary || "") + " · " + RDB.fmtTime(start) + (a.ends_at ? " – " + RDB.fmtTime(a.ends_at) : " – now") +
						(a.step !== undefined && a.step !== null ? " · step " + a.step : ""),
					onclick: () => a.rank !== null && a.rank !== undefined && a.step !== null && a.step !== undefined ?
						RDB.showLogs({job: this.job, rank: a.rank, step: a.step, stepEnd: a.step}) : null});
				bar.style.left = (100 * (start - t0) / (t1 - t0)).toFixed(3) + "%";
				bar.style.width = Math.max(0.4, 100 * (end - start) / (t1 - t0)).toFixed(3) + "%";
				track.appendChild(bar);
			}
			rows.push(el("div", {class: "lane"}, el("div", {class: "lane-label"}, key), track));
		}
		RDB.append(RDB.clear(body), [el("div", {class: "timeline", id: "alert-timeline"}, rows),
			el("div", {class: "timeline-axis muted small"}, el("span", null, RDB.fmtTime(t0)), el("span", null, RDB.fmtTime(t1)))]);
		body.dataset.state = "drawn";
	}

	renderMeta() {
		const m = this.summary && this.summary.meta;
		const body = this.metaEl;
		if (!m) {
			RDB.clear(body).appendChild(RDB.note("no metadata document (PUT /api/v1/jobs/" + this.job + "/meta)"));
			return;
		}
		RDB.clear(body).appendChild(RDB.el("pre", {class: "meta", id: "meta-doc"}, JSON.stringify(m, null, 2)));
	}

	/* ---- compare ------------------------------------------------------------------ */

	async loadJobList() {
		try {
			const r = await RDB.api("/api/v1/jobs");
			for (const j of r.jobs || []) {
				if (j.job === this.job) continue;
				this.compareSel.appendChild(RDB.el("option", {value: j.job, selected: j.job === this.compareJob}, j.job));
			}
		} catch (e) {
			/* the select stays empty */
		}
		if (this.compareJob) await this.setCompare(this.compareJob);
		else RDB.clear(this.compareEl).appendChild(RDB.note("pick another run to draw both runs' loss on one chart"));
	}

	async setCompare(other) {
		this.compareJob = other;
		this.setUrl();
		if (this.compare) this.compare.destroy();
		RDB.clear(this.compareEl);
		if (!other) return;
		const lossA = RDB.pickMetric(this.metrics, "loss");
		let sb, mB;
		try {
			const [sa, b] = await Promise.all([this.summary ? Promise.resolve(this.summary) : RDB.jobSummary(this.job, null, null),
				RDB.jobSummary(other, null, null)]);
			sb = b;
			mB = RDB.pickMetric(sb.metrics, "loss");
			if (!lossA || !mB) {
				this.compareEl.appendChild(RDB.note((lossA ? other : this.job) + " has no loss metric", "error"));
				return;
			}
			this.compare = new RDB.CompareChart(this.compareEl);
			await this.compare.load([{job: this.job, metric: lossA, lastStep: sa.step}, {job: other, metric: mB, lastStep: sb.step}]);
		} catch (e) {
			this.compareEl.appendChild(RDB.note("compare: " + e.message, "error"));
		}
	}

	/* What the page shows, for tests and the benchmark (RDB.debug). */
	info() {
		return {job: this.job, view: Object.assign({}, this.view), charts: this.charts.map((c) => c.info()),
			heat: this.heat && this.heat.g ? {metric: this.heat.metric, mode: this.heat.mode, ranks: this.heat.g.nr, columns: this.heat.g.nc,
				range: this.heat.vrange, plot: this.heat.plot} : null,
			compare: this.compare ? this.compare.info() : null};
	}

	/* ---- live refresh ---------------------------------------------------------------- */

	schedule() {
		clearTimeout(this.timer);
		if (this.dead) return;
		this.timer = setTimeout(async () => {
			if (!document.hidden) await this.refresh();
			this.schedule();
		}, REFRESH_MS);
	}

	async refresh() {
		RDB.setLive("refreshing");
		try {
			const prev = this.summary;
			const s = await RDB.jobSummary(this.job, null, prev);
			if (this.dead) return;
			this.summary = s;
			this.renderHead();
			this.renderHealth();
			const moved = !prev || s.lastNs !== prev.lastNs;
			const tasks = [this.loadAlerts()];
			if (moved && this.view.recent && s.step !== null && s.step !== undefined) {
				this.view.lo = s.step - this.view.recent.steps + 1; /* follow the run */
				this.updateRangeLabel();
			}
			if (moved && (this.view.lo === undefined || this.view.recent)) tasks.push(this.loadCharts(), this.loadHeat(), this.loadStragglers());
			await Promise.all(tasks);
			RDB.setLive("updated " + new Date().toLocaleTimeString());
		} catch (e) {
			RDB.setLive("refresh failed: " + e.message);
		}
	}

	destroy() {
		this.dead = true;
		clearTimeout(this.timer);
		window.removeEventListener("resize", this.onResize);
		this.charts.forEach((c) => c.destroy());
		if (this.heat) this.heat.destroy();
		if (this.compare) this.compare.destroy();
	}
}
RDB.RunPage = RunPage;
})();
