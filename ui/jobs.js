/* jobs.js - the jobs page: every job at a glance, newest first.
 *
 * One row per job of GET /api/v1/jobs with the summary of util.js
 * (RDB.jobSummary: health when the server has detection, else measured from
 * one series). At most 6 jobs are summarized at once; the page refreshes
 * every 5 s while visible, and a refresh re-reads only what moves (health,
 * the last points). The filter matches job names (substring, or a
 * /regex/). */
"use strict";
(function () {
const RDB = window.RDB;
const REFRESH_MS = 5000;

class JobsPage {
	constructor(main) {
		this.main = main;
		this.summaries = new Map();
		this.filter = sessionStorage.getItem("rankdb.filter") || "";
		this.timer = null;
		this.busy = false;
		this.dead = false;
	}

	async show() {
		const input = RDB.el("input", {id: "filter", type: "search", placeholder: "filter jobs by name (substring or /regex/)",
			value: this.filter, spellcheck: "false", oninput: (e) => {
				this.filter = e.target.value;
				sessionStorage.setItem("rankdb.filter", this.filter);
				this.render();
			}});
		this.count = RDB.el("span", {class: "muted"});
		this.tableBody = RDB.el("tbody");
		this.detNote = RDB.el("p", {class: "muted small", hidden: true});
		const head = ["job", "status", "#ranks alive / declared", "#step", "#steps/s", "#MFU", "firing alerts", "#started", "#last data"];
		this.table = RDB.el("table", {class: "jobs", id: "jobs-table"},
			RDB.el("thead", null, RDB.el("tr", null, head.map((h) => h[0] === "#" ? RDB.el("th", {class: "num"}, h.slice(1)) : RDB.el("th", null, h)))),
			this.tableBody);
		RDB.append(RDB.clear(this.main), [
			RDB.el("div", {class: "toolbar"}, RDB.el("h1", null, "Jobs"), input, this.count), this.detNote, this.table]);
		await this.refresh();
		RDB.mark("jobs-ready");
		document.body.dataset.ready = "jobs";
		this.schedule();
	}

	schedule() {
		clearTimeout(this.timer);
		if (this.dead) return;
		this.timer = setTimeout(async () => {
			if (!document.hidden) await this.refresh();
			this.schedule();
		}, REFRESH_MS);
	}

	async refresh() {
		if (this.busy || this.dead) return;
		this.busy = true;
		RDB.setLive("refreshing");
		try {
			const list = await RDB.api("/api/v1/jobs");
			const jobs = list.jobs || [];
			const thunks = jobs.map((j) => async () => {
				const prev = this.summaries.get(j.job);
				const s = await RDB.jobSummary(j.job, j, prev);
				s.series = j.series;
				this.summaries.set(j.job, s);
				this.renderSoon();
				return s;
			});
			const names = new Set(jobs.map((j) => j.job));
			for (const k of Array.from(this.summaries.keys())) if (!names.has(k)) this.summaries.delete(k);
			this.jobs = jobs;
			this.render();
			await RDB.pool(thunks, 6);
			RDB.setLive("updated " + new Date().toLocaleTimeString());
			this.error = null;
		} catch (e) {
			this.error = e.message;
			RDB.setLive("refresh failed");
		} finally {
			this.busy = false;
		}
		if (!this.dead) this.render();
	}

	renderSoon() {
		if (this.dead || this.pendingRender) return;
		this.pendingRender = requestAnimationFrame(() => {
			this.pendingRender = 0;
			if (!this.dead) this.render();
		});
	}

	matches(name) {
		const f = this.filter.trim();
		if (!f) return true;
		if (f.length > 2 && f[0] === "/" && f[f.length - 1] === "/") {
			try {
				return new RegExp(f.slice(1, -1), "i").test(name);
			} catch (e) {
				return false;
			}
		}
		return name.toLowerCase().indexOf(f.toLowerCase()) >= 0;
	}

	render() {
		if (!this.jobs) return;
		const rows = this.jobs.filter((j) => this.matches(j.job)).map((j) => this.summaries.get(j.job) || {job: j.job});
		/* newest first: by start time, jobs not yet summarized last, then by name */
		rows.sort((a, b) => (b.firstNs || 0) - (a.firstNs || 0) || (a.job < b.job ? -1 : 1));
		RDB.clear(this.tableBody);
		for (const s of rows) this.tableBody.appendChild(this.row(s));
		if (!rows.length) {
			this.tableBody.appendChild(RDB.el("tr", null, RDB.el("td", {colspan: 9, class: "muted"},
				this.jobs.length ? "no job matches the filter" : "no jobs yet: write some points (docs/API.md)")));
		}
		this.count.textContent = rows.length + " of " + this.jobs.length + " jobs" + (this.error ? " · " + this.error : "");
		const anyDet = Array.from(this.summaries.values()).some((s) => s.detection);
		this.detNote.hidden = anyDet || !this.summaries.size;
		this.detNote.textContent = "detection not available on this server: alive ranks, alerts and state come from " +
			"/api/v1/jobs/<job>/health when it exists; until then status is derived from the data and metadata.";
	}

	row(s) {
		const href = "#/run/" + encodeURIComponent(s.job);
		const pending = s.state === undefined;
		const alive = s.ranksAlive !== undefined ? RDB.fmtInt(s.ranksAlive) : s.ranksSeen !== undefined ? RDB.fmtInt(s.ranksSeen) + " seen" : "—";
		const declared = s.worldSize !== null && s.worldSize !== undefined ? RDB.fmtInt(s.worldSize) : "—";
		let alerts;
		if (pending) alerts = "";
		else if (s.firing === null) alerts = RDB.el("span", {class: "muted", title: "detection not available"}, "n/a");
		else if (!s.firing.length) alerts = RDB.el("span", {class: "muted"}, "none");
		else alerts = s.firing.slice(0, 3).map((a) => RDB.el("span", {class: "pill " + (a.severity === "critical" ? "st-bad" : "st-warn"),
			title: a.summary || ""}, a.alertname + (a.rank !== null && a.rank !== undefined ? " r" + a.rank : "")))
			.concat(s.firing.length > 3 ? ["+" + (s.firing.length - 3)] : []);
		const age = s.lastNs ? (Date.now() * 1e6 - s.lastNs) / 1e9 : null;
		return RDB.el("tr", {dataset: {job: s.job}},
			RDB.el("td", null, RDB.el("a", {href, class: "job-link"}, s.job)),
			RDB.el("td", null, pending ? RDB.el("span", {class: "muted"}, "…") :
				RDB.el("span", {class: "pill " + RDB.stateClass(s.state), title: "from " + s.stateSource}, s.state)),
			RDB.el("td", {class: "num"}, pending ? "" : alive + " / " + declared),
			RDB.el("td", {class: "num"}, pending ? "" : RDB.fmtInt(s.step)),
			RDB.el("td", {class: "num"}, pending ? "" : RDB.fmt(s.stepsPerS, 3)),
			RDB.el("td", {class: "num"}, pending ? "" : s.mfu === null || s.mfu === undefined ? "—" : (100 * s.mfu).toFixed(1) + " %"),
			RDB.el("td", null, alerts),
			RDB.el("td", {class: "num"}, pending ? "" : RDB.fmtTime(s.firstNs)),
			RDB.el("td", {class: "num", title: s.lastNs ? RDB.fmtTime(s.lastNs) : ""}, pending ? "" : age === null ? "—" : RDB.fmtAge(age) + " ago"));
	}

	destroy() {
		this.dead = true;
		clearTimeout(this.timer);
	}
}
RDB.JobsPage = JobsPage;
})();
