/* app.js - the dashboard's shell: hash routing (#/ = jobs, #/run/<job>?...
 * = one run), the token field, the live-refresh indicator, the logs panel
 * that every click on a rank and step opens, and the timing marks that
 * bench/ui_bench.py reads (window.__rdbMarks, ms since navigation). */
"use strict";
(function () {
const RDB = window.RDB;
const main = document.getElementById("main");
let page = null;

window.__rdbMarks = {};
RDB.mark = function (name) {
	window.__rdbMarks[name] = performance.now();
};

/* What the current page shows (charts' series and bands, heatmap size):
 * read by tests/integration/test_ui.py and bench/ui_bench.py. */
RDB.debug = function () {
	return page && page.info ? page.info() : null;
};

RDB.setLive = function (text) {
	document.getElementById("live").textContent = text;
};

let ignoreHash = null;
RDB.replaceHash = function (h) {
	if (location.hash === h) return;
	ignoreHash = h;
	history.replaceState(null, "", h);
};

function parseHash() {
	const h = location.hash.replace(/^#/, "") || "/";
	const qi = h.indexOf("?");
	const path = qi >= 0 ? h.slice(0, qi) : h;
	const query = {};
	if (qi >= 0) {
		for (const kv of h.slice(qi + 1).split("&")) {
			const i = kv.indexOf("=");
			if (i > 0) query[decodeURIComponent(kv.slice(0, i))] = decodeURIComponent(kv.slice(i + 1));
		}
	}
	return {path, query};
}

function crumbs(job) {
	const c = RDB.clear(document.getElementById("crumbs"));
	RDB.append(c, [RDB.el("a", {href: "#/"}, "jobs")]);
	if (job) RDB.append(c, [" / ", RDB.el("span", null, job)]);
}

function route() {
	if (ignoreHash !== null && location.hash === ignoreHash) {
		ignoreHash = null;
		return;
	}
	ignoreHash = null;
	if (page) page.destroy();
	page = null;
	closeLogs();
	delete document.body.dataset.ready;
	const {path, query} = parseHash();
	const m = path.match(/^\/run\/(.+)$/);
	if (m) {
		const job = decodeURIComponent(m[1]);
		document.title = job + " · rankdb";
		crumbs(job);
		page = new RDB.RunPage(main, job, query);
	} else {
		document.title = "jobs · rankdb";
		crumbs(null);
		page = new RDB.JobsPage(main);
	}
	page.show().catch((e) => {
		RDB.clear(main).appendChild(RDB.note(e.message, "error"));
	});
}

/* ---- token --------------------------------------------------------------------- */

function initToken() {
	const input = document.getElementById("token");
	input.value = RDB.token();
	document.getElementById("tokenform").addEventListener("submit", (e) => {
		e.preventDefault();
		RDB.setToken(input.value.trim());
		route();
	});
}

/* ---- logs panel ------------------------------------------------------------------ */

const logs = document.getElementById("logs");
const logsBody = document.getElementById("logs-body");
const logsTitle = document.getElementById("logs-title");
let logsSeq = 0;

function closeLogs() {
	logsSeq++;
	logs.hidden = true;
	delete logs.dataset.state;
}
document.getElementById("logs-close").addEventListener("click", closeLogs);
document.addEventListener("keydown", (e) => {
	if (e.key === "Escape") closeLogs();
});

function logRow(r) {
	const el = RDB.el;
	const fields = r.fields && Object.keys(r.fields).length ? JSON.stringify(r.fields) : "";
	return el("li", {class: "log lvl-" + r.level + (r.at_step ? " at-step" : "")},
		el("span", {class: "ts"}, RDB.fmtTime(r.ts) + "." + String(Math.floor((r.ts % 1e9) / 1e6)).padStart(3, "0")),
		el("span", {class: "lvl"}, r.level),
		el("span", {class: "step"}, r.step === null ? "" : "step " + r.step),
		el("span", {class: "msg"}, r.message),
		fields ? el("span", {class: "fields"}, fields) : null);
}

/* Opens the logs of p.rank around p.step (GET /api/v1/logs/around), or in
 * the time range p.fromNs..p.toNs (GET /api/v1/logs), or its latest. */
RDB.showLogs = async function (p) {
	const seq = ++logsSeq;
	logs.hidden = false;
	logs.dataset.state = "loading";
	const where = p.step !== undefined ? "step " + RDB.fmtInt(p.step) + (p.stepEnd !== undefined && p.stepEnd !== p.step ? "–" + RDB.fmtInt(p.stepEnd) : "") :
		p.fromNs !== undefined ? RDB.fmtTime(p.fromNs) : "latest";
	logsTitle.textContent = "logs · " + p.job + " · rank " + p.rank + " · " + where;
	RDB.clear(logsBody).appendChild(RDB.note("loading…"));
	let list = null, note = null;
	try {
		if (p.step !== undefined) {
			try {
				const r = await RDB.api("/api/v1/logs/around", {job: p.job, rank: p.rank, step: p.step, before: 50, after: 50});
				list = r.logs;
				note = r.mode === "time" ? "the rank's 50 logs before and 50 from step " + p.step + " on (by time; records of that step highlighted)" : null;
			} catch (e) {
				if (e.status !== 404) throw e;
				const r = await RDB.api("/api/v1/logs", {job: p.job, rank: p.rank, step_from: p.step, step_to: p.stepEnd !== undefined ? p.stepEnd : p.step, limit: 100});
				list = r.logs.slice().reverse();
				note = "rank " + p.rank + " has no point or log at step " + p.step + "; logs of the bucket's steps:";
			}
		} else if (p.fromNs !== undefined) {
			const r = await RDB.api("/api/v1/logs", {job: p.job, rank: p.rank, from: Math.floor(p.fromNs - 60e9), to: Math.ceil(p.toNs + 60e9), limit: 200});
			list = r.logs.slice().reverse();
			note = "logs of the bucket ± 1 min";
		} else {
			const r = await RDB.api("/api/v1/logs", {job: p.job, rank: p.rank, limit: 100});
			list = r.logs.slice().reverse();
			note = "the rank's latest logs";
		}
	} catch (e) {
		if (seq !== logsSeq) return;
		RDB.clear(logsBody).appendChild(RDB.note(e.message, "error"));
		logs.dataset.state = "error";
		return;
	}
	if (seq !== logsSeq) return;
	RDB.clear(logsBody);
	if (note) logsBody.appendChild(RDB.note(note));
	if (!list.length) logsBody.appendChild(RDB.note("no logs"));
	else logsBody.appendChild(RDB.el("ol", {class: "loglist", id: "log-list"}, list.map(logRow)));
	const at = logsBody.querySelector(".at-step");
	if (at) at.scrollIntoView({block: "center"});
	logs.dataset.state = "drawn";
	logs.dataset.count = String(list.length);
};

initToken();
window.addEventListener("hashchange", route);
route();
})();
