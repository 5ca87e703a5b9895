/* charts.js - the cross-rank charts of the run page and the two-run
 * comparison, drawn with uPlot.
 *
 * A cross-rank chart is one metric of one job: per bucket (one per plot
 * pixel, so the browser never holds more points than it can show) the
 * median across ranks as a line and the min..max across ranks as a band,
 * from GET /api/v1/query/crossrank. The argmin/argmax columns tell which
 * rank is at the band's edge: the legend names it and a click on the chart
 * opens that rank's logs around the clicked step. Dragging across a chart
 * zooms every chart of the page: the page re-queries at the new range, so
 * the buckets get narrower down to single steps. */
"use strict";
(function () {
const RDB = window.RDB;

const COLORS = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#2c7a7b"];
RDB.COLORS = COLORS;

function rgba(hex, a) {
	const n = parseInt(hex.slice(1), 16);
	return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + a + ")";
}

/* Width in CSS pixels of the plotting area for a container. */
function plotWidth(container) {
	return Math.max(200, Math.floor(container.clientWidth || 600));
}

/* The crossrank parameters of a view: {axis: "step"|"time", lo, hi}
 * (lo/hi in steps or ns, undefined = the whole run), for px buckets. */
RDB.bucketParams = function (view, px) {
	const p = {};
	if (view.axis === "time") {
		const lo = view.lo !== undefined ? view.lo : view.firstNs;
		const hi = view.hi !== undefined ? view.hi : view.lastNs;
		p.from = Math.floor(lo);
		p.to = Math.ceil(hi);
		p.time_width_ns = Math.max(1, Math.ceil((p.to - p.from + 1) / px));
	} else {
		if (view.lo !== undefined) p.step_from = Math.max(0, Math.floor(view.lo));
		if (view.hi !== undefined) p.step_to = Math.ceil(view.hi);
		const span = view.lo !== undefined && view.hi !== undefined ? p.step_to - p.step_from + 1 :
			view.recent ? view.recent.steps : null;
		if (span !== null && span <= px) p.step_width = 1;
		else p.points = px;
	}
	return p;
};

/* x value of bucket i: its first step, or its start in seconds (uPlot's
 * time scale is in seconds). */
function xOf(axis, v) {
	return axis === "time" ? v / 1e9 : v;
}

function baseOpts(title, width, height, axis, syncKey) {
	return {
		title,
		width,
		height,
		scales: {x: {time: axis === "time"}},
		cursor: {sync: syncKey ? {key: syncKey} : undefined, drag: {x: true, y: false, setScale: false}, points: {size: 5}},
		legend: {live: true},
		axes: [
			{space: 60, values: axis === "time" ? undefined : (u, vals) => vals.map((v) => RDB.fmtInt(v))},
			{size: 64, values: (u, vals) => vals.map((v) => RDB.fmt(v, 3))},
		],
	};
}

/* Calls onClick(event) for a click on the plot that is not the end of a
 * drag (a drag is a zoom, see the setSelect hook). */
function bindClick(u, onClick) {
	let downX = null;
	u.over.addEventListener("mousedown", (e) => {
		downX = e.clientX;
	});
	u.over.addEventListener("click", (e) => {
		if (downX !== null && Math.abs(e.clientX - downX) > 3) return;
		if (onClick) onClick(e);
	});
}

class CrossChart {
	/* opts: {job, metric, label, color, syncKey, onZoom(lo, hi), onPick({rank, step, fromNs, toNs})} */
	constructor(container, opts) {
		this.container = container;
		this.opts = opts;
		this.u = null;
		this.cols = null;
		this.seq = 0;
		this.status = RDB.el("div", {class: "chart-status"});
		this.plotEl = RDB.el("div", {class: "chart-plot"});
		RDB.append(container, [this.plotEl, this.status]);
	}

	async load(view) {
		const seq = ++this.seq;
		const px = plotWidth(this.plotEl) - 70;
		const params = Object.assign({job: this.opts.job, metric: this.opts.metric, agg: "median,min,max,argmin,argmax"},
			RDB.bucketParams(view, px));
		this.status.textContent = "loading…";
		this.container.dataset.state = "loading";
		let r;
		try {
			r = await RDB.api("/api/v1/query/crossrank", params);
		} catch (e) {
			if (seq !== this.seq) return;
			this.container.dataset.state = "error";
			this.status.textContent = "";
			this.status.appendChild(RDB.note(this.opts.label + ": " + e.message, "error"));
			return;
		}
		if (seq !== this.seq) return;
		this.draw(r, view);
	}

	draw(r, view) {
		const axis = r.axis === "time" ? "time" : "step";
		const n = r.start.length;
		const x = new Array(n), lo = new Array(n), hi = new Array(n), med = new Array(n);
		for (let i = 0; i < n; i++) {
			x[i] = xOf(axis, r.start[i]);
			lo[i] = RDB.finite(r.min[i]);
			hi[i] = RDB.finite(r.max[i]);
			med[i] = RDB.finite(r.median[i]);
		}
		this.cols = {axis, start: r.start, end: r.end, argmin: r.argmin, argmax: r.argmax, width: r.width, med};
		this.status.textContent = n ? "" : "no points in this range";
		const c = this.opts.color;
		const self = this;
		const rankOf = (which) => (u, v, sidx, idx) => {
			if (idx === null || idx === undefined || v === null || v === undefined) return "—";
			const rk = self.cols[which][idx];
			return RDB.fmt(v) + (rk !== null && rk !== undefined ? " (rank " + rk + ")" : "");
		};
		const data = [x, lo, hi, med];
		const width = plotWidth(this.plotEl);
		if (this.u && this.axis === axis) {
			this.u.setData(data);
		} else {
			if (this.u) this.u.destroy();
			const o = baseOpts(this.opts.label + "  ·  " + this.opts.metric, width, 190, axis, this.opts.syncKey);
			o.series = [
				{label: axis === "time" ? "time" : "step", value: axis === "time" ? undefined : (u, v) => (v === null ? "—" : RDB.fmtInt(v))},
				{label: "min", stroke: rgba(c, 0.55), width: 1, points: {show: false}, value: rankOf("argmin")},
				{label: "max", stroke: rgba(c, 0.55), width: 1, points: {show: false}, value: rankOf("argmax")},
				{label: "median", stroke: c, width: 1.6, points: {show: false}, value: (u, v) => RDB.fmt(v)},
			];
			o.bands = [{series: [2, 1], fill: rgba(c, 0.18)}];
			o.hooks = {
				setSelect: [(u) => {
					/* synced charts mirror the selection: only the chart the
					 * drag started on zooms */
					if (u.select.width < 2 || !this.downHere) return;
					this.downHere = false;
					const a = u.posToVal(u.select.left, "x"), b = u.posToVal(u.select.left + u.select.width, "x");
					u.setSelect({left: 0, width: 0, top: 0, height: 0}, false);
					if (this.opts.onZoom) this.opts.onZoom(axis === "time" ? a * 1e9 : a, axis === "time" ? b * 1e9 : b);
				}],
			};
			this.u = new uPlot(o, data, this.plotEl);
			this.axis = axis;
			bindClick(this.u, (e) => this.pick(e));
			this.u.over.addEventListener("mousedown", () => {
				this.downHere = true;
				/* cleared once uPlot's own mouseup handling (the hook) is done */
				document.addEventListener("mouseup", () => setTimeout(() => (this.downHere = false), 0), {once: true});
			});
		}
		this.container.dataset.state = "drawn";
		this.container.dataset.buckets = String(n);
	}

	/* A click: the rank at the band edge nearer to the pointer (above the
	 * median: the max rank; below: the min rank) at the clicked bucket. */
	pick() {
		const u = this.u, c = this.cols;
		if (!u || !c) return;
		const idx = u.cursor.idx;
		if (idx === null || idx === undefined || idx < 0) return;
		const y = u.posToVal(u.cursor.top, "y");
		const med = c.med[idx];
		const rank = med !== null && y < med ? c.argmin[idx] : c.argmax[idx];
		if (rank === null || rank === undefined || !this.opts.onPick) return;
		if (c.axis === "step") this.opts.onPick({rank, step: c.start[idx], stepEnd: c.end[idx]});
		else this.opts.onPick({rank, fromNs: c.start[idx], toNs: c.end[idx]});
	}

	resize() {
		if (this.u) this.u.setSize({width: plotWidth(this.plotEl), height: 190});
	}

	/* What is drawn, for tests and the benchmark (RDB.debug). */
	info() {
		const u = this.u;
		if (!u) return {metric: this.opts.metric, state: this.container.dataset.state || "none"};
		const d = u.data, n = d[0].length;
		let spread = 0;
		for (let i = 0; i < n; i++) if (d[2][i] !== null && d[1][i] !== null && d[2][i] > d[1][i]) spread++;
		return {metric: this.opts.metric, state: this.container.dataset.state, series: u.series.map((s) => s.label),
			bands: (u.bands || []).length, points: n, x0: n ? d[0][0] : null, x1: n ? d[0][n - 1] : null, spread,
			min: d[1], max: d[2], median: d[3], argmin: this.cols.argmin, argmax: this.cols.argmax};
	}

	destroy() {
		this.seq++;
		if (this.u) this.u.destroy();
		this.u = null;
	}
}
RDB.CrossChart = CrossChart;

/* Loss of two runs on one chart, by step: each run's median and min..max
 * band, with the same bucket width so the buckets line up. */
class CompareChart {
	constructor(container) {
		this.container = container;
		this.u = null;
		this.status = RDB.el("div", {class: "chart-status"});
		this.plotEl = RDB.el("div", {class: "chart-plot"});
		RDB.append(container, [this.plotEl, this.status]);
	}

	/* runs: [{job, metric, lastStep}] (two of them) */
	async load(runs) {
		const px = plotWidth(this.plotEl) - 70;
		const maxStep = Math.max.apply(null, runs.map((r) => r.lastStep || 0));
		const width = Math.max(1, Math.ceil((maxStep + 1) / px));
		this.status.textContent = "loading…";
		this.container.dataset.state = "loading";
		let res;
		try {
			res = await Promise.all(runs.map((r) => RDB.api("/api/v1/query/crossrank",
				{job: r.job, metric: r.metric, agg: "median,min,max", step_width: width})));
		} catch (e) {
			this.container.dataset.state = "error";
			RDB.clear(this.status).appendChild(RDB.note("compare: " + e.message, "error"));
			return;
		}
		const tables = res.map((r) => {
			const x = r.start.slice();
			return [x, r.min.map(RDB.finite), r.max.map(RDB.finite), r.median.map(RDB.finite)];
		});
		const data = uPlot.join(tables);
		const o = baseOpts("loss: " + runs.map((r) => r.job).join(" vs "), plotWidth(this.plotEl), 220, "step", null);
		o.series = [{label: "step", value: (u, v) => (v === null ? "—" : RDB.fmtInt(v))}];
		o.bands = [];
		runs.forEach((r, i) => {
			const c = COLORS[i === 0 ? 0 : 4];
			const k = o.series.length;
			o.series.push({label: r.job + " min", stroke: rgba(c, 0.4), width: 1, spanGaps: true, points: {show: false}},
				{label: r.job + " max", stroke: rgba(c, 0.4), width: 1, spanGaps: true, points: {show: false}},
				{label: r.job + " median", stroke: c, width: 1.6, spanGaps: true, points: {show: false}});
			o.bands.push({series: [k + 1, k], fill: rgba(c, 0.15)});
		});
		if (this.u) this.u.destroy();
		this.u = new uPlot(o, data, this.plotEl);
		this.status.textContent = "";
		this.container.dataset.state = "drawn";
		this.container.dataset.series = String(runs.length);
	}

	info() {
		const u = this.u;
		return u ? {series: u.series.map((s) => s.label), bands: (u.bands || []).length, points: u.data[0].length} : null;
	}

	destroy() {
		if (this.u) this.u.destroy();
		this.u = null;
	}
}
RDB.CompareChart = CompareChart;
})();
