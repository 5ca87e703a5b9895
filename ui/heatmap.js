/* heatmap.js - the rank x step heatmap of one metric, on a canvas.
 *
 * Data: GET /api/v1/query/downsample of every rank, one bucket per column,
 * agg=avg. The answer holds ranks x columns buckets of ~35 bytes each, so
 * the column count shrinks as ranks grow (400 columns up to 250 ranks, 195
 * at 512, 100 at 1,000) to keep it near 3.5 MB.
 * Colour, by default "deviation": each cell's robust z against the other
 * ranks of its column, (value - column median) / (1.4826 column MAD), on a
 * blue-white-red scale saturating at 8, so the trend of the metric over the
 * run drops out and what stands out is the rank that differs from its peers
 * (a straggler is a red line however noisy the metric). Mode "value" shows
 * the values themselves over their 1st..99th percentile (viridis-like).
 * Drawing: one pixel row per rank while the ranks fit; past that a pixel
 * row stands for several ranks and shows, per column, the one of them
 * farthest from the column's median, so a single slow rank among 1,000
 * stays visible. Hover names rank, steps, value and z; a click opens that
 * rank's logs at the bucket's first step. */
"use strict";
(function () {
const RDB = window.RDB;

/* viridis, 9 stops */
const STOPS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
	[39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37]];
function color(t) {
	if (!(t >= 0)) t = 0;
	if (t > 1) t = 1;
	const f = t * (STOPS.length - 1), i = Math.min(STOPS.length - 2, Math.floor(f)), r = f - i;
	const a = STOPS[i], b = STOPS[i + 1];
	return [a[0] + (b[0] - a[0]) * r, a[1] + (b[1] - a[1]) * r, a[2] + (b[2] - a[2]) * r];
}

/* diverging, for deviations: blue (below the median rank) - white - red (above) */
const BLUE = [33, 102, 172], WHITE = [247, 247, 247], RED = [178, 24, 43];
function diverging(t) {
	if (!(t === t)) t = 0;
	t = Math.max(-1, Math.min(1, t));
	const to = t < 0 ? BLUE : RED, a = Math.abs(t);
	return [WHITE[0] + (to[0] - WHITE[0]) * a, WHITE[1] + (to[1] - WHITE[1]) * a, WHITE[2] + (to[2] - WHITE[2]) * a];
}
const Z_CLAMP = 8; /* robust z at which the colour saturates */

function quantileSorted(s, q) {
	if (!s.length) return NaN;
	const p = q * (s.length - 1), i = Math.floor(p);
	return i + 1 < s.length ? s[i] + (s[i + 1] - s[i]) * (p - i) : s[i];
}

const LEFT = 56, BOTTOM = 22, TOP = 4;

class Heatmap {
	/* opts: {job, ranks (how many; sizes the columns), onPick({rank, step, stepEnd} | {rank, fromNs, toNs})} */
	constructor(container, opts) {
		this.container = container;
		this.opts = opts;
		this.seq = 0;
		this.mode = opts.mode === "value" ? "value" : "deviation";
		this.canvas = RDB.el("canvas", {class: "heat-canvas"});
		this.tip = RDB.el("div", {class: "heat-tip", hidden: true});
		this.legend = RDB.el("div", {class: "heat-legend"});
		this.status = RDB.el("div", {class: "chart-status"});
		const wrap = RDB.el("div", {class: "heat-wrap"}, this.canvas, this.tip);
		RDB.append(container, [wrap, this.legend, this.status]);
		this.canvas.addEventListener("mousemove", (e) => this.hover(e));
		this.canvas.addEventListener("mouseleave", () => (this.tip.hidden = true));
		this.canvas.addEventListener("click", (e) => this.click(e));
	}

	async load(view, metric) {
		const seq = ++this.seq;
		this.metric = metric;
		const cssW = Math.max(300, this.container.clientWidth || 800);
		/* the answer is ~35 bytes per cell: about 100,000 cells (3.5 MB) */
		const byRanks = Math.floor(100000 / Math.max(1, this.opts.ranks || 100));
		const cols = Math.max(20, Math.min(400, byRanks, Math.floor((cssW - LEFT) / 3)));
		const params = Object.assign({job: this.opts.job, metric, agg: "avg"}, RDB.bucketParams(view, cols));
		this.status.textContent = "loading…";
		this.container.dataset.state = "loading";
		let r;
		try {
			r = await RDB.api("/api/v1/query/downsample", params);
		} catch (e) {
			if (seq !== this.seq) return;
			this.container.dataset.state = "error";
			RDB.clear(this.status).appendChild(RDB.note("heatmap: " + e.message, "error"));
			return;
		}
		if (seq !== this.seq) return;
		this.build(r);
		this.draw();
	}

	/* The answer -> a ranks x columns grid (Float64Array, NaN = no value). */
	build(r) {
		const series = r.series.filter((s) => s.rank !== "job");
		series.sort((a, b) => a.rank - b.rank);
		let lo = Infinity, hi = -Infinity;
		for (const s of series) {
			if (s.start.length) {
				lo = Math.min(lo, s.start[0]);
				hi = Math.max(hi, s.start[s.start.length - 1]);
			}
		}
		const w = r.width || 1;
		const nc = series.length ? Math.round((hi - lo) / w) + 1 : 0;
		const nr = series.length;
		const grid = new Float64Array(nr * nc).fill(NaN);
		series.forEach((s, row) => {
			for (let i = 0; i < s.start.length; i++) {
				const col = Math.round((s.start[i] - lo) / w);
				const v = RDB.num(s.avg[i]);
				if (v !== null && isFinite(v)) grid[row * nc + col] = v;
			}
		});
		this.g = {axis: r.axis, width: w, lo, nr, nc, grid, ranks: series.map((s) => s.rank)};
	}

	draw() {
		const g = this.g;
		if (!g || !g.nr || !g.nc) {
			this.status.textContent = "no points of " + this.metric + " in this range";
			this.container.dataset.state = "drawn";
			this.container.dataset.ranks = "0";
			const ctx0 = this.canvas.getContext("2d");
			ctx0.clearRect(0, 0, this.canvas.width, this.canvas.height);
			return;
		}
		/* colour range of "value": 1st..99th percentile of the cells */
		const vals = [];
		const step = Math.max(1, Math.floor(g.grid.length / 50000));
		for (let i = 0; i < g.grid.length; i += step) if (!isNaN(g.grid[i])) vals.push(g.grid[i]);
		vals.sort((a, b) => a - b);
		let vlo = quantileSorted(vals, 0.01), vhi = quantileSorted(vals, 0.99);
		if (!(vhi > vlo)) {
			vlo = vals[0];
			vhi = vals[vals.length - 1];
		}
		if (!(vhi > vlo)) vhi = vlo + 1;
		/* per column: median and robust scale across ranks */
		const maxRows = 600;
		const rows = Math.min(g.nr, maxRows);
		const med = new Float64Array(g.nc), scale = new Float64Array(g.nc);
		const col = new Float64Array(g.nr), dev = new Float64Array(g.nr);
		for (let c = 0; c < g.nc; c++) {
			let k = 0;
			for (let r = 0; r < g.nr; r++) {
				const v = g.grid[r * g.nc + c];
				if (!isNaN(v)) col[k++] = v;
			}
			const sv = col.subarray(0, k).sort();
			const m = k ? quantileSorted(sv, 0.5) : NaN;
			for (let i = 0; i < k; i++) dev[i] = Math.abs(sv[i] - m);
			const mad = k ? quantileSorted(dev.subarray(0, k).sort(), 0.5) : NaN;
			med[c] = m;
			scale[c] = mad > 0 ? 1.4826 * mad : Math.max(Math.abs(m) * 1e-9, 1e-300);
		}
		this.colStats = {med, scale};
		const byDev = this.mode === "deviation";
		const img = new ImageData(g.nc, rows);
		this.rowRanks = [];
		for (let pr = 0; pr < rows; pr++) {
			const r0 = Math.floor(pr * g.nr / rows), r1 = Math.max(r0 + 1, Math.floor((pr + 1) * g.nr / rows));
			this.rowRanks.push([r0, r1]);
			for (let c = 0; c < g.nc; c++) {
				let best = NaN, dist = -1;
				for (let r = r0; r < r1; r++) {
					const v = g.grid[r * g.nc + c];
					if (isNaN(v)) continue;
					const d = Math.abs(v - med[c]);
					if (d > dist) {
						dist = d;
						best = v;
					}
				}
				const o = (pr * g.nc + c) * 4;
				if (isNaN(best)) {
					img.data[o] = img.data[o + 1] = img.data[o + 2] = 235;
				} else {
					const rgb = byDev ? diverging((best - med[c]) / scale[c] / Z_CLAMP) : color((best - vlo) / (vhi - vlo));
					img.data[o] = rgb[0];
					img.data[o + 1] = rgb[1];
					img.data[o + 2] = rgb[2];
				}
				img.data[o + 3] = 255;
			}
		}
		const off = document.createElement("canvas");
		off.width = g.nc;
		off.height = rows;
		off.getContext("2d").putImageData(img, 0, 0);

		const cssW = Math.max(300, this.container.clientWidth || 800);
		const plotH = Math.max(120, Math.min(600, rows * (rows < 150 ? 3 : rows < 300 ? 2 : 1)));
		const cssH = plotH + TOP + BOTTOM;
		const dpr = window.devicePixelRatio || 1;
		this.canvas.width = Math.round(cssW * dpr);
		this.canvas.height = Math.round(cssH * dpr);
		this.canvas.style.width = cssW + "px";
		this.canvas.style.height = cssH + "px";
		const ctx = this.canvas.getContext("2d");
		ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
		ctx.clearRect(0, 0, cssW, cssH);
		ctx.imageSmoothingEnabled = false;
		const plotW = cssW - LEFT - 8;
		ctx.drawImage(off, LEFT, TOP, plotW, plotH);
		this.plot = {x: LEFT, y: TOP, w: plotW, h: plotH, rows};
		this.axes(ctx);
		this.vrange = [vlo, vhi];
		this.drawLegend();
		this.status.textContent = "";
		this.container.dataset.state = "drawn";
		this.container.dataset.ranks = String(g.nr);
		this.container.dataset.columns = String(g.nc);
	}

	axes(ctx) {
		const g = this.g, p = this.plot;
		ctx.fillStyle = "#444";
		ctx.font = "11px sans-serif";
		ctx.textAlign = "right";
		ctx.textBaseline = "middle";
		const nTicks = Math.min(g.nr, Math.max(2, Math.floor(p.h / 40)));
		for (let i = 0; i < nTicks; i++) {
			const row = Math.round(i * (g.nr - 1) / Math.max(1, nTicks - 1));
			const y = p.y + (row + 0.5) * p.h / g.nr;
			ctx.fillText("rank " + g.ranks[row], p.x - 4, y);
		}
		ctx.textAlign = "center";
		ctx.textBaseline = "top";
		const xt = Math.max(2, Math.floor(p.w / 110));
		for (let i = 0; i <= xt; i++) {
			const frac = i / xt;
			const v = g.lo + frac * g.nc * g.width;
			const label = g.axis === "time" ? RDB.fmtTime(v).slice(11) : "step " + RDB.fmtInt(v);
			ctx.fillText(label, Math.min(p.x + p.w - 30, Math.max(p.x + 30, p.x + frac * p.w)), p.y + p.h + 4);
		}
	}

	drawLegend() {
		const [vlo, vhi] = this.vrange;
		const byDev = this.mode === "deviation";
		const bar = RDB.el("canvas", {class: "heat-bar", width: 200, height: 10});
		const ctx = bar.getContext("2d");
		for (let x = 0; x < 200; x++) {
			const rgb = byDev ? diverging(x / 99.5 - 1) : color(x / 199);
			ctx.fillStyle = "rgb(" + rgb.map(Math.round).join(",") + ")";
			ctx.fillRect(x, 0, 1, 10);
		}
		const modeSel = RDB.el("select", {class: "heat-mode", onchange: (e) => {
			this.mode = e.target.value;
			this.draw();
		}}, RDB.el("option", {value: "deviation", selected: byDev}, "deviation from the median rank"),
		RDB.el("option", {value: "value", selected: !byDev}, "value"));
		RDB.clear(this.legend);
		RDB.append(this.legend, [modeSel, " ", byDev ? "−" + Z_CLAMP + "σ " : RDB.fmt(vlo) + " ", bar,
			byDev ? " +" + Z_CLAMP + "σ" : " " + RDB.fmt(vhi),
			RDB.el("span", {class: "muted"}, "  (" + (byDev ? "robust z vs the other ranks of each column" : "1st–99th percentile") +
				"; " + this.g.nr + " ranks × " + this.g.nc + " buckets of " +
				(this.g.axis === "time" ? RDB.fmt(this.g.width / 1e9) + " s" : this.g.width + " steps") + ")")]);
	}

	/* The cell under a mouse event: {rank, row, col, value, from, to} */
	cell(e) {
		const g = this.g, p = this.plot;
		if (!g || !p) return null;
		const rect = this.canvas.getBoundingClientRect();
		const x = e.clientX - rect.left - p.x, y = e.clientY - rect.top - p.y;
		if (x < 0 || y < 0 || x >= p.w || y >= p.h) return null;
		const col = Math.min(g.nc - 1, Math.floor(x * g.nc / p.w));
		const pr = Math.min(p.rows - 1, Math.floor(y * p.rows / p.h));
		const [r0, r1] = this.rowRanks[pr];
		/* the rank drawn there: the one farthest from the median, or the only one */
		let row = r0, dist = -1;
		const vals = [];
		for (let r = r0; r < r1; r++) vals.push(g.grid[r * g.nc + col]);
		const fin = vals.filter((v) => !isNaN(v)).sort((a, b) => a - b);
		const mid = fin.length ? fin[fin.length >> 1] : 0;
		for (let r = r0; r < r1; r++) {
			const v = g.grid[r * g.nc + col];
			if (!isNaN(v) && Math.abs(v - mid) > dist) {
				dist = Math.abs(v - mid);
				row = r;
			}
		}
		const from = g.lo + col * g.width;
		return {rank: g.ranks[row], rows: r1 - r0, col, value: g.grid[row * g.nc + col], from, to: from + g.width - 1};
	}

	hover(e) {
		const c = this.cell(e);
		if (!c) {
			this.tip.hidden = true;
			return;
		}
		const where = this.g.axis === "time" ? RDB.fmtTime(c.from) : "steps " + RDB.fmtInt(c.from) + "–" + RDB.fmtInt(c.to);
		const z = this.colStats && !isNaN(c.value) ? (c.value - this.colStats.med[c.col]) / this.colStats.scale[c.col] : null;
		this.tip.textContent = "rank " + c.rank + (c.rows > 1 ? " (of " + c.rows + " in this row)" : "") + " · " + where +
			" · " + this.metric + " " + RDB.fmt(isNaN(c.value) ? null : c.value) + (z !== null ? " (z " + RDB.fmt(z, 2) + ")" : "") +
			" · click for logs";
		this.tip.hidden = false;
		const rect = this.canvas.getBoundingClientRect();
		this.tip.style.left = Math.min(rect.width - 260, e.clientX - rect.left + 12) + "px";
		this.tip.style.top = (e.clientY - rect.top + 12) + "px";
	}

	click(e) {
		const c = this.cell(e);
		if (!c || !this.opts.onPick) return;
		if (this.g.axis === "time") this.opts.onPick({rank: c.rank, fromNs: c.from, toNs: c.to});
		else this.opts.onPick({rank: c.rank, step: c.from, stepEnd: c.to});
	}

	destroy() {
		this.seq++;
	}
}
RDB.Heatmap = Heatmap;
})();
