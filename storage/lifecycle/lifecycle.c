/* lifecycle.c - the data-lifecycle operations that move head data or own the
 * segment writer (contract: storage/admin.h): job tombstones, statistics,
 * job deletion and retention, and the background tick; compaction is in
 * compact.c, the flusher work queue in flushq.c, the segment-file helpers in
 * segfiles.c. Each online operation runs on the flusher thread (a queued
 * item, flushq.c); the calling thread blocks until it finishes. Engine
 * steps (checkpoint, head rotation) go through s->eng (lifecycle.h).
 *
 * Deletion: on the flusher thread, a checkpoint first (everything older is
 * in chunks), then, holding the write lock exclusively (no write in
 * flight): one LMDB transaction deletes the job's chunk entries, event
 * chunk entries and series entries and records the tombstone (job, T) with
 * T the active WAL generation; the job's head data is dropped; the WAL is
 * rotated to T + 1 before the write lock is released. So every record of
 * the job written before the delete is in a generation <= T (skipped at
 * replay) and every record written after it is in a generation > T.
 * Writers that resolved series ids before the delete see del_epoch change
 * and resolve again.
 */
#include "storage/lifecycle/lifecycle.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_map.h"
#include "common/rdb_time.h"
#include "storage/admin.h"
#include "storage/chunk/codec.h"
#include "storage/events/evstore.h"
#include "storage/chunk/segment.h"
#include "storage/jobmeta/jobmeta.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

void sto_lifecycle_default(struct sto_lifecycle *l)
{
	l->retention_s = 0;
	l->retention_check_s = 3600;
	l->compact_min_live = 0.5;
	l->rollup_time_width_s = 60;
	l->rollup_step_width = 100;
	l->index_compact_free_ratio = 0.25;
	l->index_compact_min_bytes = 1u << 20;
}

void sto_set_lifecycle(struct sto *s, const struct sto_lifecycle *l)
{
	pthread_mutex_lock(&s->flush_lock);
	s->life = *l;
	pthread_mutex_unlock(&s->flush_lock);
}

bool sti_tomb_skips(const struct sto *s, const char *job, size_t jl, uint64_t gen)
{
	for (size_t i = 0; i < s->ntombs; i++)
		if (gen <= s->tombs[i].gen && strlen(s->tombs[i].job) == jl &&
		    memcmp(s->tombs[i].job, job, jl) == 0)
			return true;
	return false;
}

static int tomb_note(struct sto *s, const char *job, uint64_t gen)
{
	for (size_t i = 0; i < s->ntombs; i++)
		if (strcmp(s->tombs[i].job, job) == 0) {
			s->tombs[i].gen = gen;
			return 0;
		}
	struct tomb *p = realloc(s->tombs, (s->ntombs + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	s->tombs = p;
	snprintf(p[s->ntombs].job, sizeof(p[s->ntombs].job), "%s", job);
	p[s->ntombs++].gen = gen;
	return 0;
}

static int tomb_load_cb(void *arg, const char *job, uint64_t gen)
{
	return tomb_note(arg, job, gen);
}

/* Open hook: tombstones into memory, leftovers of an interrupted compaction. */
int sti_lifecycle_open(struct sto *s)
{
	sto_lifecycle_default(&s->life);
	s->last_retention_mono_ns = rdb_now_mono_ns();
	struct sto_txn *t;
	uint64_t out = 0;
	int rc = sto_txn_begin(s->ix, !s->opt.read_only, &t);
	if (rc)
		return rc;
	rc = sto_jobval_scan(t, STO_JOBDB_TOMBSTONE, tomb_load_cb, s);
	if (s->opt.read_only) { /* inspect only: leftovers stay for the next start */
		sto_txn_abort(t);
		/* nothing is replayed: verify goes on and names a damaged entry */
		return rc == RDB_ECORRUPT ? 0 : rc;
	}
	if (rc == 0) { /* absent: none; damaged: the start fails */
		rc = sto_meta_get(t, "compact_out", &out);
		rc = rc == RDB_ENOTFOUND ? 0 : rc;
	}
	if (rc == 0 && out) {
		rdb_warn("store",
			 "a compaction was interrupted: removing its unfinished segment "
			 "%llu (the index never pointed at it)",
			 (unsigned long long)(out - 1));
		sti_unlink_segment(s, out - 1);
		rc = sto_meta_put(t, "compact_out", 0);
	}
	if (rc == 0)
		rc = sto_txn_commit(t);
	else
		sto_txn_abort(t);
	return rc ? rc : sti_empty_trash(s);
}

void sti_lifecycle_free(struct sto *s)
{
	while (s->dead_ents) {
		struct series_ent *e = s->dead_ents;
		s->dead_ents = e->next;
		free(e);
	}
	free(s->tombs);
}

/* ---- statistics ------------------------------------------------------------------ */

struct name_list {
	char (*v)[MDL_JOB_MAX + 1];
	size_t n, cap;
};

static int name_push(struct name_list *l, const char *job)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		void *p = realloc(l->v, cap * sizeof(*l->v));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	snprintf(l->v[l->n++], MDL_JOB_MAX + 1, "%s", job);
	return 0;
}

static int job_name_cb(void *arg, const char *job, uint64_t nseries)
{
	(void)nseries;
	return name_push(arg, job);
}

static int series_id_cb(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	(void)k;
	return sti_id_push(arg, id);
}

static int stats_chunk_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct sto_job_stats *js = arg;
	js->chunks++;
	js->points += ref->stats.count;
	js->chunk_bytes += sto_chunk_ref_bytes(ref);
	return 0;
}

static int stats_ev_cb(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val, size_t len,
		       bool damaged)
{
	(void)damaged; /* never set: not a pass_damaged transaction */
	struct sto_job_stats *js = arg;
	struct ev_entry e;
	(void)min_ts_ns;
	(void)uid;
	int rc = eve_decode(val, len, &e);
	if (rc == 0) {
		js->event_chunks++;
		js->events += e.count;
		js->event_bytes += e.length;
	}
	return rc;
}

static uint64_t head_points_of(struct sto *s, const struct id_list *ids, const char *job)
{
	uint64_t n = 0;
	pthread_mutex_lock(&s->head_lock);
	struct head *heads[2] = {s->frozen, s->active};
	for (int h = 0; h < 2; h++) {
		if (!heads[h])
			continue;
		for (size_t i = 0; i < ids->n; i++) {
			struct head_series *hs = rdb_map_get(&heads[h]->series, ids->v[i]);
			n += hs ? hs->pts.n : 0;
		}
		struct ev_job *j = evh_job(heads[h]->ev, job);
		n += j ? j->n : 0;
	}
	pthread_mutex_unlock(&s->head_lock);
	return n;
}

static int job_stats(struct sto *s, struct sto_txn *t, const char *job, struct sto_job_stats *js)
{
	struct id_list ids = {0};
	uint64_t ret_s = 0;
	memset(js, 0, sizeof(*js));
	snprintf(js->job, sizeof(js->job), "%s", job);
	int rc = sto_series_scan(t, job, series_id_cb, &ids);
	for (size_t i = 0; rc == 0 && i < ids.n; i++)
		rc = sto_chunk_scan(t, ids.v[i], INT64_MIN, INT64_MAX, stats_chunk_cb, js);
	if (rc == 0)
		rc = sto_evidx_scan(t, job, INT64_MAX, stats_ev_cb, js);
	js->series = ids.n;
	js->head_points = head_points_of(s, &ids, job);
	int rrc = sto_jobval_get(t, STO_JOBDB_RETENTION, job, &ret_s);
	js->retention_s = rrc == 0 ? ret_s : s->life.retention_s;
	if (rc == 0 && rrc != 0 && rrc != RDB_ENOTFOUND)
		rc = rrc; /* a damaged override is not shown as the default */
	free(ids.v);
	return rc;
}

int sto_stats_jobs(struct sto *s, const char *job, sto_job_stats_fn fn, void *arg)
{
	struct name_list names = {0};
	struct sto_txn *t;
	struct sto_job_stats js;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = job ? name_push(&names, job) : sto_jobs_scan(t, job_name_cb, &names);
	for (size_t i = 0; rc == 0 && i < names.n; i++) {
		rc = job_stats(s, t, names.v[i], &js);
		if (rc == 0 && job && js.series == 0 && js.event_chunks == 0 && js.head_points == 0)
			rc = RDB_ENOTFOUND;
		if (rc == 0)
			rc = fn(arg, &js);
	}
	sto_txn_abort(t);
	free(names.v);
	return rc;
}

static uint64_t dir_bytes(const char *dir, const char *prefix, uint64_t *files)
{
	uint64_t total = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		char path[PATH_MAX + 300];
		struct stat st;
		if (strncmp(de->d_name, prefix, strlen(prefix)) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			total += (uint64_t)st.st_size;
			if (files)
				(*files)++;
		}
	}
	if (d)
		closedir(d);
	return total;
}

static int live_chunk_cb(void *arg, const struct sto_chunk_ref *ref)
{
	*(uint64_t *)arg += sto_chunk_ref_bytes(ref);
	return 0;
}

static int live_ev_cb(void *arg, const char *job, int64_t min_ts_ns, uint64_t uid,
		      const uint8_t *val, size_t len, bool damaged)
{
	(void)damaged; /* never set: not a pass_damaged transaction */
	struct ev_entry e;
	(void)job;
	(void)min_ts_ns;
	(void)uid;
	int rc = eve_decode(val, len, &e);
	if (rc == 0)
		*(uint64_t *)arg += e.length;
	return rc;
}

static int count_cb(void *arg, uint64_t v)
{
	(void)v;
	(*(uint64_t *)arg)++;
	return 0;
}

int sto_disk_stats(struct sto *s, struct sto_disk_stats *out)
{
	char ixdir[PATH_MAX + 16];
	memset(out, 0, sizeof(*out));
	snprintf(ixdir, sizeof(ixdir), "%s/index", s->dir);
	out->segment_bytes = dir_bytes(s->seg_dir, "seg-", &out->segment_files);
	out->wal_bytes = dir_bytes(s->wal_dir, "wal-", NULL);
	out->index_bytes = dir_bytes(ixdir, "", NULL);
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_chunk_scan_all(t, live_chunk_cb, &out->live_bytes);
	if (rc == 0)
		rc = sto_evidx_scan_all(t, live_ev_cb, &out->live_bytes);
	if (rc == 0)
		rc = sto_quarantine_scan(t, count_cb, &out->quarantined);
	sto_txn_abort(t);
	return rc;
}

/* ---- delete a job ------------------------------------------------------------------ */

struct ev_key {
	char job[MDL_JOB_MAX + 1];
	int64_t min_ts_ns, max_ts_ns;
	uint64_t uid, count;
	uint8_t *qval; /* delete: a damaged entry to quarantine (owned copy), or NULL */
	size_t qlen;
};

struct evkey_list {
	struct ev_key *v;
	size_t n, cap;
	const char *job; /* delete: only this job */
	int64_t cutoff;	 /* retention: entries with max_ts < cutoff (job's own) */
	struct sto *s;
	struct sto_txn *t;
};

static int evkey_push(struct evkey_list *l, const char *job, int64_t min_ts, uint64_t uid,
		      const struct ev_entry *e)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct ev_key *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	struct ev_key *k = &l->v[l->n++];
	snprintf(k->job, sizeof(k->job), "%s", job);
	k->min_ts_ns = min_ts;
	k->max_ts_ns = e->max_ts_ns;
	k->uid = uid;
	k->count = e->count;
	k->qval = NULL;
	k->qlen = 0;
	return 0;
}

/* Whether a damaged events entry (val: its location only is used) provably
 * is job's: it leads to an intact event chunk record of its uid that names
 * job. 1 yes, 0 not provably; a system error as it is. */
static int ev_damaged_is_jobs(struct sto *s, const char *job, uint64_t uid, const uint8_t *val,
			      size_t len)
{
	struct ev_entry loc;
	const uint8_t *pl = NULL;
	size_t plen = 0;
	const char *why = NULL;
	if (eve_decode(val, len, &loc) != 0 || loc.length < STO_CHUNK_HEADER_SIZE ||
	    loc.length > STO_CHUNK_HEADER_SIZE + 3 * STO_EVCHUNK_MAX_RAW)
		return 0;
	uint8_t *rec = malloc(loc.length);
	if (!rec)
		return -ENOMEM;
	int rc = s->eng->seg_read(s, loc.segment_id, loc.offset, rec, loc.length);
	if (rc == 0)
		rc = sto_chunk_check(rec, loc.length, STO_EVCHUNK_MAGIC, 0, uid, &pl, &plen, &why);
	int yes = rc == 0 && evc_payload_of_job(pl, plen, job);
	free(rec);
	return rc == 0 || rc == RDB_ECORRUPT || rc == -ENOENT ? yes : rc;
}

/* A damaged entry under the job's key prefix goes with the job only when
 * it provably is the job's: its key may be another job's, damaged into
 * this one's, and deleting it would leave that job's record to the next
 * compaction. Otherwise it moves to the quarantine (compaction waits for
 * rebuild-index, which recreates the entry from the record). */
static int del_ev_cb(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val, size_t len,
		     bool damaged)
{
	struct evkey_list *l = arg;
	struct ev_entry e = {0};
	int rc =
	    damaged ? ev_damaged_is_jobs(l->s, l->job, uid, val, len) : eve_decode(val, len, &e);
	if (rc < 0 || (!damaged && rc))
		return rc;
	bool quarantine = damaged && rc == 0;
	rc = evkey_push(l, l->job, min_ts_ns, uid, &e);
	if (rc == 0 && quarantine) {
		struct ev_key *k = &l->v[l->n - 1];
		k->qval = malloc(len ? len : 1);
		if (!k->qval)
			return -ENOMEM;
		if (len)
			memcpy(k->qval, val, len);
		k->qlen = len;
	}
	return rc;
}

struct del_job {
	const char *job;
	struct sto_delete_result *res;
	struct key_list series; /* series keys: ref.series_id = id */
	struct mdl_series_key *keys;
	struct key_list chunks;
	struct evkey_list ev;
	size_t quarantined; /* damaged event chunk entries not provably the job's */
};

static int del_series_cb(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	struct del_job *d = arg;
	struct mdl_series_key *p = realloc(d->keys, (d->series.n + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	d->keys = p;
	p[d->series.n] = *k;
	struct sto_chunk_ref ref = {.series_id = id};
	return sti_key_push(&d->series, &ref);
}

/* Collects everything of the job in the index (read snapshot). */
static int del_collect(struct sto *s, struct del_job *d)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	sto_txn_pass_damaged(t); /* deletion needs only keys: a damaged entry goes too */
	d->ev.job = d->job;
	d->ev.s = s;
	rc = sto_series_scan(t, d->job, del_series_cb, d);
	for (size_t i = 0; rc == 0 && i < d->series.n; i++)
		rc = sto_chunk_scan(t, d->series.v[i].series_id, INT64_MIN, INT64_MAX, sti_key_push,
				    &d->chunks);
	if (rc == 0)
		rc = sto_evidx_scan(t, d->job, INT64_MAX, del_ev_cb, &d->ev);
	sto_txn_abort(t);
	return rc;
}

static int del_index(struct sto *s, struct sto_txn *t, struct del_job *d, uint64_t gen)
{
	int rc = 0;
	(void)s;
	for (size_t i = 0; rc == 0 && i < d->chunks.n; i++) {
		const struct sto_chunk_ref *r = &d->chunks.v[i];
		rc = sto_chunk_del(t, r->series_id, r->stats.min_ts_ns, r->uid);
		rc = rc == RDB_ENOTFOUND ? 0 : rc;
	}
	for (size_t i = 0; rc == 0 && i < d->ev.n; i++) {
		const struct ev_key *k = &d->ev.v[i];
		if (k->qval) {
			rc = sto_quarantine_evchunk(t, d->job, k->min_ts_ns, k->uid, k->qval,
						    k->qlen);
			d->quarantined++;
		} else {
			rc = sto_evidx_del(t, d->job, k->min_ts_ns, k->uid);
		}
		rc = rc == RDB_ENOTFOUND ? 0 : rc;
	}
	for (size_t i = 0; rc == 0 && i < d->series.n; i++) {
		rc = sto_series_del(t, &d->keys[i], d->series.v[i].series_id);
		if (rc == 0)
			rc = sto_rollup_del_series(t, d->series.v[i].series_id);
	}
	if (rc == 0)
		rc = sto_jobval_put(t, STO_JOBDB_TOMBSTONE, d->job, gen);
	return rc;
}

/* Drops the job's points and events from the active head. Caller holds
 * head_lock (and the write lock exclusively: frozen is NULL). */
static void del_head(struct sto *s, struct del_job *d)
{
	struct head *h = s->active;
	for (size_t i = 0; i < d->series.n; i++) {
		struct head_series *hs = rdb_map_get(&h->series, d->series.v[i].series_id);
		if (!hs)
			continue;
		uint64_t freed = s->eng->cols_bytes(&hs->pts) + HEAD_SERIES_OVERHEAD;
		h->points -= hs->pts.n;
		rdb_map_del(&h->series, d->series.v[i].series_id);
		mdl_cols_free(&hs->pts);
		free(hs);
		h->bytes -= freed;
		atomic_fetch_sub(&s->head_bytes, freed);
	}
	struct ev_job *j = evh_job(h->ev, d->job);
	if (j) {
		uint64_t freed = evh_consume(h->ev, j, j->n);
		h->bytes -= freed;
		atomic_fetch_sub(&s->head_bytes, freed);
	}
}

/* Unlinks the job's series from the cache (entries kept until close: a
 * writer may still hold them; del_epoch makes it resolve again). */
static void del_cache(struct sto *s, struct del_job *d)
{
	s->eng->series_exclusive(s, true); /* no creation runs meanwhile */
	s->eng->job_counts_reset(s);
	for (size_t i = 0; i < d->series.n; i++) {
		struct series_ent *e = rdb_map_get(&s->series_by_id, d->series.v[i].series_id);
		if (!e)
			continue;
		rdb_map_del(&s->series_by_id, e->id);
		rdb_ptab_del(&s->series_by_key, e->hash, e);
		e->next = s->dead_ents;
		s->dead_ents = e;
	}
	atomic_fetch_add(&s->del_epoch, 1);
	s->eng->series_exclusive(s, false);
}

/* Rotates the WAL and the active head. Caller holds the write lock
 * exclusively and frozen is NULL. */
static int rotate_locked(struct sto *s)
{
	uint64_t gen = s->active->gen + 1;
	struct head *fresh = s->eng->head_new(gen);
	if (!fresh)
		return -ENOMEM;
	int rc = sto_wal_rotate(s->wal, gen);
	if (rc) {
		s->eng->head_free(fresh);
		return rc;
	}
	pthread_mutex_lock(&s->head_lock);
	s->frozen = s->active;
	s->active = fresh;
	s->seal_queue_n = 0;
	pthread_mutex_unlock(&s->head_lock);
	return 0;
}

static bool head_has_job_events(struct sto *s, const char *job)
{
	pthread_mutex_lock(&s->head_lock);
	bool has = evh_job(s->active->ev, job) != NULL;
	pthread_mutex_unlock(&s->head_lock);
	return has;
}

static int delete_job_op(struct sto *s, void *arg)
{
	struct del_job *d = arg;
	int rc = s->eng->checkpoint(s);
	if (rc == 0)
		rc = del_collect(s, d);
	if (rc == 0 && d->series.n == 0 && d->ev.n == 0 && !head_has_job_events(s, d->job))
		rc = RDB_ENOTFOUND;
	if (rc)
		return rc;
	struct sto_txn *t = NULL;
	(void)sto_wal_prepare(s->wal, s->active->gen + 1); /* its fsyncs outside the lock */
	s->eng->write_exclusive(s);
	uint64_t gen = s->active->gen;
	rc = sto_txn_begin(s->ix, true, &t);
	if (rc == 0)
		rc = del_index(s, t, d, gen);
	if (rc == 0)
		rc = tomb_note(s, d->job, gen);
	if (rc) {
		sto_txn_abort(t);
		pthread_rwlock_unlock(&s->write_lock);
		return rc;
	}
	pthread_rwlock_wrlock(&s->view_lock);
	rc = sto_txn_commit_at(t, STO_FP_JOB_DELETE);
	if (rc == 0) {
		pthread_mutex_lock(&s->head_lock);
		del_head(s, d);
		s->eng->extent_reset_locked(s); /* its series and points are gone */
		pthread_mutex_unlock(&s->head_lock);
	}
	pthread_rwlock_unlock(&s->view_lock);
	if (rc == 0) {
		del_cache(s, d);
		rc = rotate_locked(s);
		if (rc)
			rdb_error("store",
				  "job %s deleted, but the WAL could not be rotated (%s); "
				  "writes to it before the next checkpoint may be lost at a crash",
				  d->job, rdb_strerror(rc));
	}
	pthread_rwlock_unlock(&s->write_lock);
	if (rc)
		return rc;
	d->res->series = d->series.n;
	d->res->chunks = d->chunks.n;
	d->res->event_chunks = d->ev.n;
	d->res->tombstone_gen = gen;
	rdb_info("store",
		 "deleted job %s: %zu series, %zu chunks, %zu event chunks (tombstone "
		 "at WAL generation %llu); compaction reclaims the space",
		 d->job, d->series.n, d->chunks.n, d->ev.n, (unsigned long long)gen);
	if (d->quarantined)
		rdb_warn("store",
			 "deleting job %s: %zu event chunk index entr%s under its key failed "
			 "their checksum and do not provably lead to its chunks (the key may be "
			 "another job's): moved to the quarantine instead of deleted; compaction "
			 "waits until 'rankctl rebuild-index' (which also brings the deleted job "
			 "back: delete it again after it)",
			 d->job, d->quarantined, d->quarantined == 1 ? "y" : "ies");
	return s->eng->finish_checkpoint(s);
}

int sto_delete_job(struct sto *s, const char *job, struct sto_delete_result *r)
{
	if (!job || !mdl_job_valid(job, strlen(job)))
		return RDB_EINVAL;
	struct del_job d = {.job = job, .res = r};
	memset(r, 0, sizeof(*r));
	int rc = sti_run_on_flusher(s, delete_job_op, &d);
	int mrc = rc == 0 || rc == RDB_ENOTFOUND ? sto_jobmeta_delete(s, job) : RDB_ENOTFOUND;
	if (rc == RDB_ENOTFOUND && mrc == 0)
		rc = 0; /* a job with only a metadata document */
	else if (rc == 0 && mrc != RDB_ENOTFOUND)
		rc = mrc;
	free(d.series.v);
	free(d.keys);
	free(d.chunks.v);
	for (size_t i = 0; i < d.ev.n; i++)
		free(d.ev.v[i].qval);
	free(d.ev.v);
	return rc;
}

/* ---- retention ------------------------------------------------------------------------ */

struct ret_ctx {
	struct sto *s;
	struct name_list jobs; /* jobs with an override ... */
	uint64_t *secs;	       /* ... and its seconds */
	int64_t now_ns;
	uint64_t ckpt_gen;
	struct key_list chunks;
	struct evkey_list ev;
	int64_t cutoff; /* of the job being scanned */
};

static int ret_override_cb(void *arg, const char *job, uint64_t secs)
{
	struct ret_ctx *c = arg;
	uint64_t *p = realloc(c->secs, (c->jobs.n + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	c->secs = p;
	p[c->jobs.n] = secs;
	return name_push(&c->jobs, job);
}

/* INT64_MIN: keep everything of job. */
static int64_t ret_cutoff(const struct ret_ctx *c, const char *job)
{
	uint64_t secs = c->s->life.retention_s;
	for (size_t i = 0; i < c->jobs.n; i++)
		if (strcmp(c->jobs.v[i], job) == 0)
			secs = c->secs[i];
	if (secs == 0 || secs > (uint64_t)INT64_MAX / 1000000000ull)
		return INT64_MIN;
	return c->now_ns - (int64_t)(secs * 1000000000ull);
}

static int ret_chunk_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct ret_ctx *c = arg;
	if (ref->stats.max_ts_ns >= c->cutoff || ref->gen > c->ckpt_gen)
		return 0;
	return sti_key_push(&c->chunks, ref);
}

static int ret_series_cb(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	struct ret_ctx *c = arg;
	(void)k;
	return sto_chunk_scan(c->ev.t, id, INT64_MIN, c->cutoff, ret_chunk_cb, c);
}

static int ret_ev_cb(void *arg, const char *job, int64_t min_ts_ns, uint64_t uid,
		     const uint8_t *val, size_t len, bool damaged)
{
	(void)damaged; /* never set: not a pass_damaged transaction */
	struct ret_ctx *c = arg;
	struct ev_entry e;
	int rc = eve_decode(val, len, &e);
	if (rc || e.max_ts_ns >= ret_cutoff(c, job) || e.gen > c->ckpt_gen)
		return rc;
	return evkey_push(&c->ev, job, min_ts_ns, uid, &e);
}

static int ret_job_cb(void *arg, const char *job, uint64_t nseries)
{
	struct ret_ctx *c = arg;
	(void)nseries;
	c->cutoff = ret_cutoff(c, job);
	if (c->cutoff == INT64_MIN)
		return 0;
	return sto_series_scan(c->ev.t, job, ret_series_cb, c);
}

/* Drops chunks [from, to) of c after folding them into the rollups, in
 * one transaction: a point is either still in a chunk or in a rollup. */
static int ret_drop_chunks(struct sto *s, struct ret_ctx *c, size_t from, size_t to,
			   struct sti_rollup_acc *acc, struct sto_retention_result *r)
{
	struct sto_txn *t;
	int rc = 0;
	acc->n = 0;
	for (size_t i = from; rc == 0 && i < to; i++)
		rc = sti_rollup_fold(s, acc, &c->chunks.v[i]);
	if (rc == 0)
		rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	rc = sti_rollup_commit(acc, t);
	for (size_t i = from; rc == 0 && i < to; i++) {
		const struct sto_chunk_ref *ref = &c->chunks.v[i];
		rc = sto_chunk_del(t, ref->series_id, ref->stats.min_ts_ns, ref->uid);
		rc = rc == RDB_ENOTFOUND ? 0 : rc;
	}
	if (rc) {
		sto_txn_abort(t);
		return rc;
	}
	pthread_rwlock_wrlock(&s->view_lock); /* readers see chunks + rollups consistently */
	rc = sto_txn_commit_at(t, STO_FP_RETENTION_COMMIT);
	if (rc == 0) { /* the chunks' points no longer count in any job's extent */
		pthread_mutex_lock(&s->head_lock);
		s->eng->extent_reset_locked(s);
		pthread_mutex_unlock(&s->head_lock);
	}
	pthread_rwlock_unlock(&s->view_lock);
	for (size_t i = from; rc == 0 && i < to; i++) {
		r->chunks++;
		r->points += c->chunks.v[i].stats.count;
	}
	return rc;
}

/* Deletes the collected entries: chunks 1000 per transaction (folded into
 * rollups first), event chunks 50000 per transaction. */
static int ret_drop(struct sto *s, struct ret_ctx *c, struct sto_retention_result *r)
{
	struct sti_rollup_acc acc = {0};
	size_t i = 0, k = 0;
	int rc = 0;
	rdb_buf_init(&acc.rec, STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD + 4096);
	for (; rc == 0 && i < c->chunks.n; i += 1000)
		rc = ret_drop_chunks(s, c, i, i + 1000 < c->chunks.n ? i + 1000 : c->chunks.n, &acc,
				     r);
	sti_rollup_acc_free(&acc);
	while (rc == 0 && k < c->ev.n) {
		struct sto_txn *t;
		rc = sto_txn_begin(s->ix, true, &t);
		if (rc)
			break;
		for (size_t n = 0; rc == 0 && n < 50000 && k < c->ev.n; n++, k++) {
			rc = sto_evidx_del(t, c->ev.v[k].job, c->ev.v[k].min_ts_ns, c->ev.v[k].uid);
			rc = rc == RDB_ENOTFOUND ? 0 : rc;
			r->event_chunks++;
			r->events += c->ev.v[k].count;
		}
		if (rc == 0)
			rc = sto_txn_commit_at(t, STO_FP_RETENTION_COMMIT);
		else
			sto_txn_abort(t);
	}
	return rc;
}

static int retention_op(struct sto *s, void *arg)
{
	struct sto_retention_result *r = arg;
	struct ret_ctx c = {.s = s, .now_ns = rdb_now_ns(), .ckpt_gen = s->ckpt_gen};
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	c.ev.t = t;
	rc = sto_jobval_scan(t, STO_JOBDB_RETENTION, ret_override_cb, &c);
	if (rc == 0)
		rc = sto_jobs_scan(t, ret_job_cb, &c);
	if (rc == 0)
		rc = sto_evidx_scan_all(t, ret_ev_cb, &c);
	sto_txn_abort(t);
	if (rc == 0)
		rc = ret_drop(s, &c, r);
	if (rc == 0 && (r->chunks || r->event_chunks))
		rdb_info("store",
			 "retention dropped %llu chunks (%llu points) and %llu event "
			 "chunks (folded into rollups); compaction reclaims the space",
			 (unsigned long long)r->chunks, (unsigned long long)r->points,
			 (unsigned long long)r->event_chunks);
	free(c.jobs.v);
	free(c.secs);
	free(c.chunks.v);
	free(c.ev.v);
	return rc;
}

static int retention_run_op(struct sto *s, void *arg)
{
	int rc = s->eng->checkpoint(s); /* everything sealed and checkpointed is eligible */
	return rc ? rc : retention_op(s, arg);
}

int sto_retention_run(struct sto *s, struct sto_retention_result *r)
{
	memset(r, 0, sizeof(*r));
	return sti_run_on_flusher(s, retention_run_op, r);
}

static int retention_write(struct sto *s, const char *job, bool set, uint64_t seconds)
{
	if (!job || !mdl_job_valid(job, strlen(job)))
		return RDB_EINVAL;
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	rc = set ? sto_jobval_put(t, STO_JOBDB_RETENTION, job, seconds)
		 : sto_jobval_del(t, STO_JOBDB_RETENTION, job);
	if (rc == 0)
		return sto_txn_commit_at(t, STO_FP_META_COMMIT);
	sto_txn_abort(t);
	return rc;
}

int sto_retention_set(struct sto *s, const char *job, uint64_t seconds)
{
	return retention_write(s, job, true, seconds);
}

int sto_retention_clear(struct sto *s, const char *job)
{
	return retention_write(s, job, false, 0);
}

int sto_retention_list(struct sto *s, sto_jobval_fn fn, void *arg)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_jobval_scan(t, STO_JOBDB_RETENTION, fn, arg);
	sto_txn_abort(t);
	return rc;
}

/* Background: retention and compaction every retention_check_s. Flusher. */
void sti_lifecycle_tick(struct sto *s)
{
	if (s->life.retention_check_s == 0)
		return;
	int64_t now = rdb_now_mono_ns();
	if (now - s->last_retention_mono_ns < (int64_t)s->life.retention_check_s * 1000000000)
		return;
	s->last_retention_mono_ns = now;
	struct sto_retention_result rr = {0};
	struct sto_compact_result cr = {0};
	struct compact_args a = {.min_live = s->life.compact_min_live, .r = &cr};
	int rc = retention_op(s, &rr);
	if (rc == 0 && pthread_mutex_trylock(&s->compact_lock) == 0) {
		rc = sti_compact_op(s, &a); /* ends with the index compaction check */
		pthread_mutex_unlock(&s->compact_lock);
	}
	if (rc)
		rdb_warn("store", "background retention/compaction failed: %s; retrying in %u s",
			 rdb_strerror(rc), s->life.retention_check_s);
}
