/* store.c - the storage engine: open, recovery, close, the flusher thread
 * and checkpoints (see sto.h for the contract; the engine's internal
 * structs, lock order and recovery invariant are in store_int.h). The
 * other parts of the engine: store_write.c (batch ids, write path,
 * heads), store_series.c (series cache, series creation, the series
 * creator thread), store_seal.c (head -> chunks, event sealing),
 * store_read.c (reads, event reads, catalog), lifecycle.c and compact.c
 * (deletion, retention, statistics, compaction; storage/admin.h).
 *
 * Heads: `active` takes writes; at a checkpoint it becomes `frozen`, a new
 * active head starts with the next WAL generation, and the flusher seals the
 * frozen head into chunks, fsyncs the segment, records ckpt_gen = g in LMDB
 * and deletes wal-g.
 *
 * Recovery: at open, the chunks written by a generation newer than
 * ckpt_gen (those with a `pending` index entry) are dropped from the index
 * and the WAL generations newer than ckpt_gen are replayed (see the
 * recovery invariant in store_int.h).
 *
 * Threading: one flusher thread owns the segment writer, the WAL rotation
 * and every checkpoint; it also runs the data-lifecycle work queued by
 * admin calls (lifecycle.c).
 *
 * Failure: a seal failure (segment I/O, index) during a checkpoint is
 * logged; the points stay in the head and the WAL, and the flusher retries.
 */
#include "storage/engine/engine.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_map.h"
#include "common/rdb_time.h"
#include "storage/admin.h"
#include "storage/wal/batch_codec.h"
#include "storage/chunk/codec.h"
#include "storage/events/evstore.h"
#include "storage/chunk/segment.h"
#include "storage/io/uring.h"
#include "storage/jobmeta/jobmeta.h"

#include <errno.h>
#include <malloc.h>
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

#define FORMAT_FILE_TEXT "rankdb data directory\nformat %u\n"

void sto_options_default(struct sto_options *o)
{
	*o = (struct sto_options){0};
	o->data_dir = "./data";
	o->sync = STO_SYNC_FDATASYNC;
	o->wal_rotate_bytes = 64ull << 20;
	o->checkpoint_interval_s = 60;
	o->head_max_bytes = 512ull << 20;
	o->chunk_max_points = 4096;
	o->segment_max_bytes = 256ull << 20;
	o->index_map_bytes = 16ull << 30;
	o->max_series = 10000000;
	o->max_series_per_job = 1000000;
	o->batch_id_ttl_s = 7 * 86400;
	const char *u = getenv("RANKDB_IO_URING");
	o->io_uring = !(u && strcmp(u, "off") == 0);
}

static int remove_wal_upto(struct sto *s, uint64_t gen)
{
	uint64_t *gens = NULL;
	size_t n = 0;
	int rc = sto_wal_list(s->wal_dir, &gens, &n);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (gens[i] > gen)
			continue;
		int r2 = sto_fault_hit(STO_FP_WAL_TRIM);
		if (r2 == 0)
			r2 = sto_wal_remove(s->wal_dir, gens[i]);
		if (r2 && r2 != -ENOENT)
			rdb_warn("store",
				 "cannot remove checkpointed WAL generation %llu in %s: %s",
				 (unsigned long long)gens[i], s->wal_dir, rdb_strerror(r2));
	}
	free(gens);
	return rc;
}

/* Meta key into *v, left as it is when absent; another error (a value
 * failing its checksum) is returned. */
static int meta_get_or(struct sto_txn *t, const char *key, uint64_t *v)
{
	uint64_t x;
	int rc = sto_meta_get(t, key, &x);
	if (rc == 0)
		*v = x;
	return rc == RDB_ENOTFOUND ? 0 : rc;
}

/* Meta ckpt_seg (+ 1): the lowest segment id a record of a generation after
 * this checkpoint can land in (the open segment, else the next new one);
 * see drop_uncheckpointed. */
static int put_ckpt_seg(struct sto *s, struct sto_txn *t)
{
	uint64_t next = 0;
	int rc = 0;
	if (s->seg)
		next = sto_seg_id(s->seg);
	else
		rc = meta_get_or(t, "next_segment_id", &next);
	return rc ? rc : sto_meta_put(t, "ckpt_seg", next + 1);
}

/* After a checkpoint, gives memory back: the sealed head's columns were
 * freed into glibc's arenas (one per writer thread on a busy server), which
 * keep freed pages resident until trimmed; and the index map's pages
 * (sto_index_release_pages). Both cost a few ms on the flusher thread. */
static void release_memory(struct sto *s)
{
	malloc_trim(0);
	sto_index_release_pages(s->ix);
}

/* Seals everything in s->frozen, makes it durable, records the checkpoint
 * and deletes the WAL files it covered. Flusher (or open/close) only. */
int sti_finish_checkpoint(struct sto *s)
{
	struct head *h = s->frozen;
	size_t n = 0, k = 0;
	pthread_mutex_lock(&s->head_lock);
	n = h->series.n;
	struct seal_item *items = calloc(n ? n : 1, sizeof(*items));
	for (size_t i = 0; items && i < h->series.cap; i++) {
		if (!h->series.keys[i])
			continue;
		struct head_series *hs = h->series.vals[i];
		items[k].hs = hs;
		items[k].taken = hs->pts.n;
		k++;
	}
	pthread_mutex_unlock(&s->head_lock);
	if (!items)
		return -ENOMEM;
	int rc = sto_fault_hit(STO_FP_CKPT_SEAL);
	if (rc == 0)
		rc = sti_seal_items(s, h, items, k, true);
	free(items);
	if (rc == 0)
		rc = sti_seal_events(s, h);
	if (rc == 0 && s->seg)
		rc = sto_seg_sync(s->seg);
	struct sto_txn *t = NULL;
	if (rc == 0)
		rc = sto_txn_begin(s->ix, true, &t);
	if (rc == 0) {
		rc = sto_meta_put(t, "ckpt_gen", h->gen);
		if (rc == 0)
			rc = put_ckpt_seg(s, t);
		if (rc == 0)
			rc = sto_pending_clear(t, h->gen);
		if (rc == 0)
			rc = sto_evpending_clear(t, h->gen);
		if (rc == 0)
			rc = sti_batch_persist(s, t, h->gen);
		if (rc == 0)
			rc = sto_txn_commit_at(t, STO_FP_CKPT_COMMIT);
		else
			sto_txn_abort(t);
	}
	if (rc) {
		static struct rdb_log_ratelimit rl; /* retried every 200 ms while it fails */
		rdb_log_limited(&rl, 10, RDB_LOG_ERROR, "store",
				"checkpoint of WAL generation %llu failed: %s; its points stay "
				"in memory and in the WAL, retrying",
				(unsigned long long)h->gen, rdb_strerror(rc));
		return rc;
	}
	s->ckpt_gen = h->gen;
	sti_batch_forget(s, h->gen);
	pthread_rwlock_wrlock(&s->view_lock);
	pthread_mutex_lock(&s->head_lock);
	s->frozen = NULL;
	atomic_fetch_sub(&s->head_bytes, h->bytes);
	pthread_mutex_unlock(&s->head_lock);
	pthread_rwlock_unlock(&s->view_lock);
	sti_head_free(h);
	remove_wal_upto(s, s->ckpt_gen);
	release_memory(s);
	atomic_fetch_add(&s->st_checkpoints, 1);
	return 0;
}

/* Finishes a checkpoint left over from an earlier failure, then rotates the
 * WAL and the active head and seals the frozen head. The new head is made
 * before the WAL rotates: a WAL one generation ahead of the head would put
 * new points into a file the head's checkpoint does not cover, and the
 * next start would replay them next to their sealed chunks (issue 10,
 * item 8). Either both move or neither does. */
int sti_checkpoint(struct sto *s)
{
	if (s->frozen) {
		int rc = sti_finish_checkpoint(s);
		if (rc)
			return rc;
	}
	/* The new file is made before writers are stopped: its fsyncs took up
	 * to 17 ms with the write lock held (4,096 connections, issue 14). A
	 * failure here is retried by sto_wal_rotate under the lock. */
	(void)sto_wal_prepare(s->wal, s->active->gen + 1);
	sti_write_exclusive(s);
	uint64_t gen = s->active->gen + 1;
	struct head *fresh = sti_head_new(gen);
	int rc = fresh ? sto_wal_rotate(s->wal, gen) : -ENOMEM;
	if (rc == 0) {
		pthread_mutex_lock(&s->head_lock);
		s->frozen = s->active;
		s->active = fresh;
		s->seal_queue_n = 0;
		pthread_mutex_unlock(&s->head_lock);
	}
	pthread_rwlock_unlock(&s->write_lock);
	if (rc) {
		sti_head_free(fresh);
		rdb_error("store",
			  "cannot rotate the WAL to generation %llu: %s; writes go on into "
			  "generation %llu, retrying at the next checkpoint",
			  (unsigned long long)gen, rdb_strerror(rc), (unsigned long long)gen - 1);
		return rc;
	}
	return sti_finish_checkpoint(s);
}

/* A checkpoint starts once the head holds head_max_bytes / this much
 * (128 MiB by default), whatever the WAL size: the head costs ~28 bytes per
 * point against the WAL's ~16, so with small WAL records memory, not
 * wal_rotate_bytes, is the bound that matters. The rest of head_max_bytes
 * is room for the active head while the frozen one is sealed. (An eighth
 * was tried: on a loaded 2-core machine the seal of a 64 MiB head fell
 * behind a 2 M points/s load and the peak grew instead.) */
#define HEAD_CKPT_FRACTION 4

/* A checkpoint also starts once the head holds wal_rotate_bytes / this
 * many points (1 M at the default 64 MiB). Until WAL records named series
 * by id, the WAL size alone set the cadence: a per-rank record took ~66
 * bytes per point (2,110 per 32-point record), a bulk one ~29, so a 64
 * MiB file held 1 to 2.3 M points. Records of ~14-15 bytes per point let
 * the head grow two to four times as far, and the peak RSS with it (per-rank
 * load at 64 connections: 93 -> 142-159 MiB with a 2 M point trigger,
 * 93-96 MiB with this one; bulk 64 and 512 ranks at or below before, at 15-20
 * checkpoints instead of 12-14 for 512 ranks). Points, not head bytes: a
 * job of very many series carries ~0.5 KiB of fixed head overhead per
 * series, which head_max_bytes / HEAD_CKPT_FRACTION already bounds.
 * With many series this cuts every series' chunk short (~64 points each at
 * 512 ranks x 32 metrics), and the checkpoint, which costs per chunk, was
 * ~10 % of the server's CPU in the per-rank shape. A trigger of at least
 * 128 points per series in the head (2 M points at 512 ranks, unchanged up
 * to 256 ranks) was tried: in the per-rank shape at 512 ranks the peak RSS
 * went from 119-120 to 176-178 MiB, above VictoriaMetrics' 152-155 MiB in
 * the same runs, for no server CPU per request outside the noise (34.9,
 * 32.1 -> 35.8, 31.7 us; VM 39-44); bulk 512 ranks 3.40 -> 3.35 bytes/point
 * and 177 -> 200 MiB. Kept at 1 M points. */
#define HEAD_CKPT_POINT_BYTES 64

bool sti_head_points_over(const struct sto *s, const struct head *h)
{
	return h->points > s->opt.wal_rotate_bytes / HEAD_CKPT_POINT_BYTES;
}

bool sti_head_kick(struct sto *s, bool points_over)
{
	return (points_over ||
		atomic_load(&s->head_bytes) > s->opt.head_max_bytes / HEAD_CKPT_FRACTION) &&
	       !atomic_exchange(&s->head_kick, true);
}

static bool checkpoint_due(struct sto *s)
{
	pthread_mutex_lock(&s->head_lock);
	struct head *h = s->active;
	bool due = h->points > 0 && rdb_now_mono_ns() - h->first_mono_ns >=
					(int64_t)s->opt.checkpoint_interval_s * 1000000000;
	bool over = (atomic_load(&s->head_bytes) > s->opt.head_max_bytes / HEAD_CKPT_FRACTION ||
		     sti_head_points_over(s, h)) &&
		    h->points > 0;
	pthread_mutex_unlock(&s->head_lock);
	return due || over || s->frozen || sto_wal_size(s->wal) > s->opt.wal_rotate_bytes;
}

static void *flusher_main(void *arg)
{
	struct sto *s = arg;
	pthread_setname_np(pthread_self(), "rdb-checkpoint");
	pthread_mutex_lock(&s->flush_lock);
	while (!s->stop) {
		bool want = s->ckpt_wanted;
		pthread_mutex_unlock(&s->flush_lock);

		pthread_mutex_lock(&s->head_lock);
		bool full = s->seal_queue_n > 0;
		pthread_mutex_unlock(&s->head_lock);
		if (full)
			sti_seal_full(s);
		atomic_store(&s->head_kick, false); /* writers may wake us again */
		sti_run_admin_ops(s);
		sti_lifecycle_tick(s);
		sti_trash_tick(s);
		bool due = want || checkpoint_due(s);

		pthread_mutex_lock(&s->flush_lock);
		if (due) {
			/* Counted before the rotation: a sto_checkpoint caller that saw
			 * the old count gets a checkpoint that starts after its call. */
			uint64_t mine = ++s->ckpt_started;
			s->ckpt_wanted = false;
			pthread_mutex_unlock(&s->flush_lock);
			int rc = sti_checkpoint(s);
			pthread_mutex_lock(&s->flush_lock);
			s->ckpt_last_rc = rc;
			s->ckpt_done = mine;
			pthread_cond_broadcast(&s->ckpt_cond);
			if (rc == 0)
				continue;
		}
		if (s->stop || s->ckpt_wanted || s->ops)
			continue;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 200 * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&s->flush_cond, &s->flush_lock, &ts);
	}
	pthread_mutex_unlock(&s->flush_lock);
	return NULL;
}

int sto_checkpoint(struct sto *s)
{
	pthread_mutex_lock(&s->flush_lock);
	uint64_t target = s->ckpt_started + 1;
	s->ckpt_wanted = true;
	pthread_cond_signal(&s->flush_cond);
	while (s->ckpt_done < target && !s->stop)
		pthread_cond_wait(&s->ckpt_cond, &s->flush_lock);
	int rc = s->ckpt_done >= target ? s->ckpt_last_rc : -ESHUTDOWN;
	pthread_mutex_unlock(&s->flush_lock);
	return rc;
}

/* ---- open, recovery, close ------------------------------------------------- */

static int make_dir(const char *path)
{
	if (mkdir(path, 0755) == 0 || errno == EEXIST)
		return 0;
	int rc = -errno;
	rdb_error("store", "cannot create directory %s: %s", path, strerror(-rc));
	return rc;
}

/* Writes FORMAT (this build's version) through a temporary file, a rename
 * and a directory fsync, so that it is always whole. */
static int write_format_file(const char *dir)
{
	char path[PATH_MAX + 16], tmp[PATH_MAX + 32], text[64];
	snprintf(path, sizeof(path), "%s/FORMAT", dir);
	snprintf(tmp, sizeof(tmp), "%s/FORMAT.tmp", dir);
	snprintf(text, sizeof(text), FORMAT_FILE_TEXT, STO_FORMAT_VERSION);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	ssize_t w = write(fd, text, strlen(text));
	int rc = (w == (ssize_t)strlen(text) && fsync(fd) == 0) ? 0 : -EIO;
	close(fd);
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -errno;
	int dfd = rc == 0 ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (dfd >= 0) {
		if (fsync(dfd) != 0)
			rc = -errno;
		close(dfd);
	}
	return rc;
}

/* Creates FORMAT in a new data directory, or checks it in an existing one;
 * an older format this build still reads is upgraded (format.h). */
static int check_format(const char *dir)
{
	char path[PATH_MAX + 16], buf[256];
	snprintf(path, sizeof(path), "%s/FORMAT", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return write_format_file(dir);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	for (unsigned v = STO_FORMAT_VERSION_OLDEST; v <= STO_FORMAT_VERSION; v++) {
		char want[64];
		snprintf(want, sizeof(want), FORMAT_FILE_TEXT, v);
		if (strcmp(buf, want) != 0)
			continue;
		if (v == STO_FORMAT_VERSION)
			return 0;
		rdb_info("store",
			 "%s: upgrading the data directory from format %u to %u (format 2 adds "
			 "group and supersede records, 3 checksums in index values, 4 blocked "
			 "value columns, 5 checksums in every other index value; older rankdbd "
			 "releases will refuse it from now on)",
			 path, v, STO_FORMAT_VERSION);
		return write_format_file(dir);
	}
	rdb_error("store",
		  "%s says this data directory has a format this rankdbd does not know "
		  "(it reads formats %u to %u); refusing to open it. Use the rankdbd release "
		  "that wrote it.",
		  path, STO_FORMAT_VERSION_OLDEST, STO_FORMAT_VERSION);
	return RDB_EFORMAT;
}

static int take_lock(struct sto *s)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/LOCK", s->dir);
	s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (s->lock_fd < 0)
		return -errno;
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		int rc = -errno;
		rdb_error("store",
			  "data directory %s is locked by another process (%s); is "
			  "another rankdbd or rankctl running on it?",
			  s->dir, path);
		return rc == -EWOULDBLOCK ? -EBUSY : rc;
	}
	return 0;
}

/* Dropping uncheckpointed chunks: the transaction, and the lowest segment
 * id that holds one of their records. */
struct drop_ctx {
	struct sto_txn *t;
	uint64_t min_seg; /* UINT64_MAX: none */
};

static int drop_pending_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct drop_ctx *d = arg;
	struct sto_chunk_ref cur;
	/* A damaged entry fails the recovery, as in drop_evpending_cb. */
	int rc = sto_chunk_get(d->t, ref->series_id, ref->stats.min_ts_ns, ref->uid, &cur);
	if (rc == 0 && cur.segment_id < d->min_seg)
		d->min_seg = cur.segment_id;
	if (rc == 0 || rc == RDB_ENOTFOUND)
		rc = sto_chunk_del(d->t, ref->series_id, ref->stats.min_ts_ns, ref->uid);
	return rc == RDB_ENOTFOUND ? 0 : rc;
}

static int ev_seg_cb(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val, size_t len,
		     bool damaged)
{
	(void)damaged; /* never set: not a pass_damaged transaction */
	struct ev_entry e;
	(void)min_ts_ns;
	(void)uid;
	if (eve_decode(val, len, &e) == 0 && e.segment_id < *(uint64_t *)arg)
		*(uint64_t *)arg = e.segment_id;
	return 0;
}

static int drop_evpending_cb(void *arg, uint64_t gen, const char *job, int64_t min_ts_ns,
			     uint64_t uid)
{
	struct drop_ctx *d = arg;
	(void)gen;
	/* A damaged entry fails the recovery (logged with its key): deleting it
	 * unread would leave its record out of recovery_seg's rewrite. */
	int rc = sto_evidx_get(d->t, job, min_ts_ns, uid, ev_seg_cb, &d->min_seg);
	if (rc == 0 || rc == RDB_ENOTFOUND)
		rc = sto_evidx_del(d->t, job, min_ts_ns, uid);
	return rc == RDB_ENOTFOUND ? 0 : rc;
}

/* Drops index entries of chunks newer than the checkpoint: their points
 * will be replayed from the WAL. Their records stay in the segment files;
 * meta recovery_seg (lowest segment id holding one, + 1) asks recover()
 * to rewrite those segments before the WAL files are deleted, so that
 * rankctl rebuild-index can never index them next to the replayed points
 * (FORMAT.md, "Rebuilding the index", rule 1). When WAL files will be
 * replayed (replaying), the rewrite also starts no later than meta ckpt_seg:
 * a crash between a segment append and its index commit leaves records
 * that no index entry (pending or not) names, in a segment written since
 * the last checkpoint. */
static int drop_uncheckpointed(struct sto *s, bool replaying)
{
	struct drop_ctx d = {.min_seg = UINT64_MAX};
	uint64_t prev = 0, since = 0;
	int rc = sto_txn_begin(s->ix, true, &d.t);
	if (rc)
		return rc;
	rc = sto_pending_scan(d.t, s->ckpt_gen, drop_pending_cb, &d);
	if (rc == 0)
		rc = sto_pending_drop_after(d.t, s->ckpt_gen);
	if (rc == 0)
		rc = sto_evpending_scan(d.t, s->ckpt_gen, drop_evpending_cb, &d);
	if (rc == 0)
		rc = sto_evpending_drop_after(d.t, s->ckpt_gen);
	if (rc == 0 && replaying)
		rc = meta_get_or(d.t, "ckpt_seg", &since);
	if (rc == 0 && replaying && since && since - 1 < d.min_seg)
		d.min_seg = since - 1;
	if (rc == 0 && d.min_seg != UINT64_MAX) {
		rc = meta_get_or(d.t, "recovery_seg", &prev);
		if (rc == 0 && prev && prev - 1 < d.min_seg)
			d.min_seg = prev - 1;
		if (rc == 0)
			rc = sto_meta_put(d.t, "recovery_seg", d.min_seg + 1);
	}
	if (rc) {
		sto_txn_abort(d.t);
		return rc;
	}
	return sto_txn_commit(d.t);
}

/* Rewrites the segments meta recovery_seg names (see drop_uncheckpointed):
 * compaction copies only records the index points at, so the dropped ones
 * leave the files. A crash meanwhile repeats it at the next start (the WAL
 * files are still there then). */
static int purge_dropped_records(struct sto *s)
{
	struct sto_txn *t;
	uint64_t from = 0;
	struct sto_compact_result r = {0};
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = meta_get_or(t, "recovery_seg", &from);
	sto_txn_abort(t);
	if (rc || from == 0)
		return rc;
	rc = sti_compact_from(s, from - 1, &r);
	if (rc == 0)
		rc = sti_empty_trash(s); /* no query runs yet: no grace */
	if (rc)
		return rc;
	s->trash_due_mono_ns = 0;
	if (r.quarantined) { /* refused (logged): recovery_seg stays, for the next start */
		rdb_warn("store",
			 "recovery: the segments from %llu keep the chunks dropped for WAL "
			 "replay until a start finds the quarantine empty; until then rankctl "
			 "rebuild-index may count those points twice",
			 (unsigned long long)(from - 1));
		return 0;
	}
	if (r.skipped)
		rdb_warn("store",
			 "recovery: %llu segment(s) holding chunks dropped for WAL replay "
			 "could not be rewritten (a damaged record; run rankctl verify); until "
			 "they are, rankctl rebuild-index may count those points twice",
			 (unsigned long long)r.skipped);
	rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	rc = sto_meta_put(t, "recovery_seg", 0);
	if (rc) {
		sto_txn_abort(t);
		return rc;
	}
	return sto_txn_commit(t);
}

struct replay_ctx {
	struct sto *s;
	struct mdl_batch *b;
	struct mdl_events *ev;
	uint64_t points, events;
	uint64_t dup_batches;	  /* records skipped: their batch id was already stored */
	uint64_t gen;		  /* of the record being replayed */
	struct mdl_batch *keep_b; /* scratch: the record minus deleted jobs */
	struct mdl_events *keep_ev;
	/* Series definitions (STO_WAL_REC_DEFS) of the file being replayed:
	 * sid -> struct replay_def *; emptied when the generation changes. */
	struct rdb_map defs;
	uint64_t defs_gen;
	uint64_t undefined; /* records skipped: a series id their file never defined */
	int index_err;	    /* the index failed a lookup (a damaged batch_ids entry):
			     * the replay stops on it, never skips the record */
};

/* Records naming an undefined series that replay logs one by one. */
#define UNDEFINED_LOGGED 5

/* A series definition from the WAL: the key, copied out of the record. */
struct replay_def {
	struct sto_wal_key k;
	char names[]; /* job, metric (not NUL-terminated) */
};

static void replay_defs_clear(struct replay_ctx *c)
{
	for (size_t i = 0; i < c->defs.cap; i++)
		if (c->defs.keys[i])
			free(c->defs.vals[i]);
	rdb_map_free(&c->defs);
}

/* sto_defs_fn: binds sid to k for the rest of the file. */
static int replay_def_add(void *arg, uint64_t sid, const struct sto_wal_key *k)
{
	struct replay_ctx *c = arg;
	struct replay_def *d = malloc(sizeof(*d) + k->job_len + k->metric_len);
	if (!d)
		return -ENOMEM;
	memcpy(d->names, k->job, k->job_len);
	memcpy(d->names + k->job_len, k->metric, k->metric_len);
	d->k = *k;
	d->k.job = d->names;
	d->k.metric = d->names + k->job_len;
	void *old = rdb_map_get(&c->defs, sid);
	if (rdb_map_put(&c->defs, sid, d) != 0) {
		free(d);
		return -ENOMEM;
	}
	free(old);
	return 0;
}

static const struct sto_wal_key *replay_def_get(void *arg, uint64_t sid)
{
	struct replay_ctx *c = arg;
	const struct replay_def *d = rdb_map_get(&c->defs, sid);
	return d ? &d->k : NULL;
}

/* Copies the points and events of c->b / c->ev whose job has no tombstone
 * covering generation c->gen into keep_b / keep_ev and swaps them in. */
static int replay_filter(struct replay_ctx *c, bool has_points, bool has_events)
{
	int rc = 0;
	if (!c->keep_b)
		rc = mdl_batch_new(SIZE_MAX, SIZE_MAX, &c->keep_b);
	if (rc == 0 && !c->keep_ev)
		rc = mdl_events_new(SIZE_MAX, STO_WAL_MAX_PAYLOAD, &c->keep_ev);
	if (rc)
		return rc;
	mdl_batch_reset(c->keep_b);
	mdl_events_reset(c->keep_ev);
	size_t n = has_points ? mdl_batch_nseries(c->b) : 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const struct mdl_batch_series *bs = mdl_batch_series_at(c->b, i);
		if (sti_tomb_skips(c->s, bs->key.job, strlen(bs->key.job), c->gen))
			continue;
		for (size_t k = 0; rc == 0 && k < bs->pts.n; k++)
			rc =
			    mdl_batch_add(c->keep_b, bs->key.job, strlen(bs->key.job), bs->key.rank,
					  bs->key.metric, strlen(bs->key.metric), bs->pts.ts_ns[k],
					  bs->pts.step[k], bs->pts.attempt[k], bs->pts.value[k]);
	}
	size_t ne = has_events ? mdl_events_count(c->ev) : 0;
	for (size_t i = 0; rc == 0 && i < ne; i++) {
		const struct mdl_event *e = mdl_events_at(c->ev, i);
		if (!sti_tomb_skips(c->s, e->job, e->job_len, c->gen))
			rc = mdl_events_add(c->keep_ev, e);
	}
	if (rc)
		return rc;
	struct mdl_batch *tb = c->b;
	c->b = c->keep_b;
	c->keep_b = tb;
	struct mdl_events *te = c->ev;
	c->ev = c->keep_ev;
	c->keep_ev = te;
	return 0;
}

/* Applies replayed points and events to the active head. */
static int replay_apply(struct replay_ctx *c, bool has_points, bool has_events)
{
	if (c->s->ntombs) {
		int frc = replay_filter(c, has_points, has_events);
		if (frc)
			return frc;
		has_points = has_points && mdl_batch_nseries(c->b) > 0;
		has_events = has_events && mdl_events_count(c->ev) > 0;
	}
	size_t n = has_points ? mdl_batch_nseries(c->b) : 0;
	struct series_ent **ents = malloc((n ? n : 1) * sizeof(*ents));
	if (!ents)
		return -ENOMEM;
	int rc = n ? sti_resolve_series(c->s, c->b, ents) : 0;
	if (rc == 0)
		rc = sti_apply_request(c->s, c->s->active, has_points ? c->b : NULL, ents,
				       has_events ? c->ev : NULL, false);
	free(ents);
	c->points += n ? mdl_batch_points(c->b) : 0;
	c->events += has_events ? mdl_events_count(c->ev) : 0;
	return rc;
}

/* Whether a client batch id is in the index (a checkpointed generation
 * stored it). An index that cannot be read counts as "not stored". */
/* 1 when a checkpoint stored batch id, 0 when not; else the error (a
 * damaged entry: RDB_ECORRUPT, logged with its key by the index), which
 * must fail the start: neither answer can be taken from it. */
static int batch_id_stored(struct sto *s, const char *id, size_t len)
{
	struct sto_txn *t;
	uint64_t seen_ns;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_batchid_get(t, id, len, &seen_ns);
	sto_txn_abort(t);
	if (rc == RDB_ECORRUPT)
		rdb_error("store",
			  "recovery: the index's batch_ids entry of batch id '%.*s' failed its "
			  "checksum: whether the WAL record carrying that id was applied "
			  "already is unknown, so the start fails instead of applying it once "
			  "more or dropping it. 'rankctl rebuild-index' recreates the index "
			  "(it forgets batch ids: a batch the WAL holds twice is applied twice)",
			  (int)(len > 128 ? 128 : len), id);
	return rc == 0 ? 1 : rc == RDB_ENOTFOUND ? 0 : rc;
}

/* Decodes the points part of a batch record: as a STO_WAL_REC_POINTS
 * payload, or (compact) through the file's series definitions. A series
 * id the file never defined is damage (its definition was lost with bytes
 * replay skipped): RDB_ENOTFOUND, logged and counted here. */
static int replay_points(struct replay_ctx *c, const uint8_t *p, size_t len, bool compact)
{
	if (!compact)
		return sto_batch_decode(c->b, p, len);
	uint64_t sid = 0;
	int rc = sto_batch_decode_compact(c->b, p, len, replay_def_get, c, &sid);
	/* One lost definition orphans every later record of its series in
	 * the file: the first few are named, the rest summed up at the end. */
	if (rc == RDB_ENOTFOUND && ++c->undefined <= UNDEFINED_LOGGED)
		rdb_error("store",
			  "WAL generation %llu: a record names series id %llu, which no earlier "
			  "record of its file defines (the definition was lost with damaged "
			  "bytes or in a record that does not parse); skipping that record, "
			  "its points are lost",
			  (unsigned long long)c->gen, (unsigned long long)sid);
	return rc;
}

/* Splits a STO_WAL_REC_BATCH or STO_WAL_REC_CBATCH (compact) payload
 * (format.h; sto_batch_split, as rankctl verify does) and registers its
 * id. A record whose id is already known (earlier in this replay, or
 * stored by a checkpoint) is skipped: the same batch reached the WAL twice
 * (a write that failed after its bytes landed, then was retried), and it
 * is applied once. */
static int replay_batch(struct replay_ctx *c, uint64_t gen, const uint8_t *p, size_t len,
			bool compact)
{
	struct sto_batch_parts bp;
	int rc = sto_batch_split(p, len, &bp);
	if (rc)
		return rc;
	const char *id = bp.id;
	size_t il = bp.id_len;
	rc = bp.points_len ? replay_points(c, bp.points, bp.points_len, compact) : 0;
	if (rc == 0 && bp.events_len)
		rc = sto_events_decode(c->ev, bp.events, bp.events_len);
	if (rc == 0 && il) {
		struct batch_ent *e;
		uint64_t h = sti_batch_hash(id, il);
		pthread_mutex_lock(&c->s->batch_lock);
		int stored = sti_batch_find(c->s, id, il, h) ? 1 : batch_id_stored(c->s, id, il);
		bool seen = stored == 1;
		if (stored < 0)
			rc = c->index_err = stored;
		else if (!seen)
			rc = sti_batch_add(c->s, id, il, h, true, gen, &e);
		pthread_mutex_unlock(&c->s->batch_lock);
		if (seen) {
			c->dup_batches++;
			return 0;
		}
	}
	return rc ? rc : replay_apply(c, bp.points_len > 0, bp.events_len > 0);
}

static int replay_cb(void *arg, uint64_t gen, uint8_t type, const uint8_t *p, size_t len)
{
	struct replay_ctx *c = arg;
	int rc;
	c->gen = gen;
	if (c->defs_gen != gen) { /* definitions hold within their file */
		replay_defs_clear(c);
		c->defs_gen = gen;
	}
	if (type == STO_WAL_REC_POINTS)
		rc = sto_batch_decode(c->b, p, len);
	else if (type == STO_WAL_REC_BATCH || type == STO_WAL_REC_CBATCH)
		rc = replay_batch(c, gen, p, len, type == STO_WAL_REC_CBATCH); /* applies it */
	else if (type == STO_WAL_REC_DEFS)
		rc = sto_defs_decode(p, len, replay_def_add, c);
	else
		rc = RDB_EFORMAT;
	if (c->index_err)
		return c->index_err;	      /* not the record's fault: never skipped */
	switch (sto_wal_rec_fate(type, rc)) { /* the rule verify reports by */
	case STO_WAL_TAKE:
		return type == STO_WAL_REC_POINTS ? replay_apply(c, true, false) : 0;
	case STO_WAL_SKIP_UNDEFINED:
		return 0; /* logged and counted by replay_points */
	case STO_WAL_SKIP_UNKNOWN:
		rdb_warn("store", "WAL generation %llu: skipping record of unknown type %u",
			 (unsigned long long)gen, type);
		return 0;
	case STO_WAL_SKIP_UNPARSED:
		rdb_error("store",
			  "WAL generation %llu: a record with a valid checksum does not "
			  "parse (%s); skipping it",
			  (unsigned long long)gen, rdb_strerror(rc));
		return 0;
	case STO_WAL_STOP:
		break;
	}
	return rc;
}

/* Copies one damaged WAL range into quarantine/ before the recovery
 * checkpoint deletes the WAL file. */
static int keep_range(struct sto *s, uint64_t gen, uint64_t off, uint64_t len)
{
	char qdir[PATH_MAX + 16];
	snprintf(qdir, sizeof(qdir), "%s/quarantine", s->dir);
	int rc = sto_wal_keep_range(s->wal_dir, gen, off, len, qdir);
	if (rc)
		rdb_error("store",
			  "cannot copy the damaged bytes %llu..%llu of WAL generation "
			  "%llu into %s: %s; not starting, so that the WAL file is not deleted",
			  (unsigned long long)off, (unsigned long long)(off + len),
			  (unsigned long long)gen, qdir, rdb_strerror(rc));
	else
		rdb_error("store",
			  "WAL generation %llu: kept the %llu damaged bytes at offset %llu "
			  "in %s/wal-%016llx-%llu.damaged; the acknowledged writes they held are "
			  "lost unless a backup has them. Inspect, then remove the file ('rankctl "
			  "verify' reports it until then)",
			  (unsigned long long)gen, (unsigned long long)len, (unsigned long long)off,
			  qdir, (unsigned long long)gen, (unsigned long long)off);
	return rc;
}

/* Damage in the middle of a WAL file, a bad tail of a file that is not the
 * newest (no crash tears those), and a whole-length record with a bad
 * checksum at the end (kill -9 cannot leave one) are kept aside and counted;
 * an incomplete record at the end of the newest file is the expected result
 * of a crash during an append. */
static int keep_wal_damage(struct sto *s, uint64_t gen, const struct sto_wal_replay_result *r,
			   bool newest)
{
	int rc = 0;
	bool bad_tail = r->tail == 2 || (r->tail && !newest);
	s->st_wal_damaged_ranges += r->ndamaged + bad_tail;
	if (r->ndamaged > STO_WAL_DAMAGE_KEEP) /* positions not all known: keep the rest */
		return keep_range(s, gen, r->damaged[0].off, r->file_bytes - r->damaged[0].off);
	for (uint32_t i = 0; rc == 0 && i < r->ndamaged; i++)
		rc = keep_range(s, gen, r->damaged[i].off, r->damaged[i].len);
	if (rc == 0 && bad_tail && r->file_bytes > r->valid_bytes)
		rc = keep_range(s, gen, r->valid_bytes, r->file_bytes - r->valid_bytes);
	return rc;
}

/* Counts quarantine/wal-*.damaged (damaged WAL bytes kept by a recovery)
 * for /metrics and says so at every start until the operator removes them. */
static void add_kept(void *arg, const char *path, uint64_t bytes)
{
	struct sto *s = arg;
	(void)path;
	s->st_wal_kept_files++;
	s->st_wal_kept_bytes += bytes;
}

static void count_kept_damage(struct sto *s)
{
	char qdir[PATH_MAX + 16];
	snprintf(qdir, sizeof(qdir), "%s/quarantine", s->dir);
	sto_wal_kept_each(qdir, add_kept, s);
	if (s->st_wal_kept_files)
		rdb_warn("store",
			 "%s holds %llu file(s), %llu bytes, of damaged WAL records kept by "
			 "a recovery; the writes in them were not replayed. Inspect, then remove "
			 "them",
			 qdir, (unsigned long long)s->st_wal_kept_files,
			 (unsigned long long)s->st_wal_kept_bytes);
}

/* Replays WAL generations newer than the checkpoint into s->active and
 * checkpoints them. Sets s->active->gen to the newest generation seen. */
static int recover(struct sto *s)
{
	uint64_t *gens = NULL;
	size_t n = 0;
	int rc = sto_wal_list(s->wal_dir, &gens, &n);
	bool replaying = false;
	for (size_t i = 0; rc == 0 && i < n; i++)
		replaying |= gens[i] > s->ckpt_gen;
	if (rc == 0)
		rc = drop_uncheckpointed(s, replaying);
	if (rc) {
		free(gens);
		return rc;
	}
	uint64_t newest = s->ckpt_gen;
	struct replay_ctx c = {.s = s};
	rc = mdl_batch_new(SIZE_MAX, SIZE_MAX, &c.b);
	if (rc == 0)
		rc = mdl_events_new(SIZE_MAX, STO_WAL_MAX_PAYLOAD, &c.ev);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (gens[i] <= s->ckpt_gen)
			continue;
		struct sto_wal_replay_result res;
		rc = sto_wal_replay(s->wal_dir, gens[i], replay_cb, &c, &res);
		if (rc == 0)
			rdb_info("store",
				 "replayed WAL generation %llu: %llu records, %llu of %llu "
				 "bytes",
				 (unsigned long long)gens[i], (unsigned long long)res.records,
				 (unsigned long long)res.valid_bytes,
				 (unsigned long long)res.file_bytes);
		if (rc == 0)
			rc = keep_wal_damage(s, gens[i], &res, i + 1 == n);
		newest = gens[i];
	}
	mdl_batch_free(c.b);
	mdl_events_free(c.ev);
	mdl_batch_free(c.keep_b);
	mdl_events_free(c.keep_ev);
	replay_defs_clear(&c);
	free(gens);
	s->st_wal_undefined += c.undefined;
	if (c.undefined > UNDEFINED_LOGGED)
		rdb_error("store",
			  "WAL replay skipped %llu record(s) in all naming series whose "
			  "definition was lost with damaged bytes (the first %d are logged "
			  "above; rankdb_wal_undefined_records counts them, rankctl verify names "
			  "the files)",
			  (unsigned long long)c.undefined, UNDEFINED_LOGGED);
	if (rc)
		return rc;
	s->active->gen = newest;
	if (c.dup_batches)
		rdb_warn("store",
			 "WAL replay skipped %llu record(s) whose client batch id was already "
			 "stored: the same batch reached the WAL twice (a write that failed after "
			 "its bytes landed, then was retried); each is stored once",
			 (unsigned long long)c.dup_batches);
	if (c.points || c.events)
		rdb_info("store",
			 "recovered %llu points and %llu events from the WAL; sealing "
			 "them into chunks",
			 (unsigned long long)c.points, (unsigned long long)c.events);
	rc = purge_dropped_records(s); /* before the checkpoint deletes the WAL */
	if (rc)
		return rc;
	s->frozen = s->active;
	s->active = NULL;
	rc = sti_finish_checkpoint(s);
	s->active = sti_head_new(newest + 1);
	return rc ? rc : (s->active ? 0 : -ENOMEM);
}

/* True if chunks/ holds at least one segment file. */
static bool have_segments(const struct sto *s)
{
	DIR *d = opendir(s->seg_dir);
	bool found = false;
	for (struct dirent *e; d && !found && (e = readdir(d)) != NULL;)
		found = strncmp(e->d_name, "seg-", 4) == 0;
	if (d)
		closedir(d);
	return found;
}

static int open_index(struct sto *s)
{
	char path[PATH_MAX + 16], mdb[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/index", s->dir);
	snprintf(mdb, sizeof(mdb), "%s/data.mdb", path);
	/* A missing index next to existing segments would open as an empty
	 * database: the data would vanish from view and chunk ids be reused. */
	if (access(mdb, F_OK) != 0 && have_segments(s)) {
		rdb_error("store",
			  "%s has segment files but %s is missing; refusing to start "
			  "on an empty index. Run 'rankctl --data-dir %s rebuild-index' (or "
			  "restore index/ from a backup) first.",
			  s->seg_dir, mdb, s->dir);
		return -ENOENT;
	}
	int rc = s->opt.read_only ? sto_index_open_ro(path, s->opt.index_map_bytes, &s->ix)
				  : sto_index_open(path, s->opt.index_map_bytes, &s->ix);
	if (rc)
		return rc;
	struct sto_txn *t;
	rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	uint64_t gen = 0, uid = 1, sid = 1;
	/* Absent: a new index. Damaged (failing its checksum), this one or any
	 * counter read later on: the open fails, but for an inspection
	 * (read-only: verify names it), which writes nothing. */
	int c1 = meta_get_or(t, "ckpt_gen", &gen);
	int c2 = meta_get_or(t, "next_chunk_uid", &uid);
	int c3 = meta_get_or(t, "next_series_id", &sid);
	rc = sto_meta_check(t);
	sto_txn_abort(t);
	rc = rc ? rc : c1 ? c1 : c2 ? c2 : c3;
	if (rc == RDB_ECORRUPT && s->opt.read_only)
		rc = 0;
	s->ckpt_gen = gen;
	s->next_uid = uid;
	s->uid_limit = s->next_uid;
	s->nseries = sid > 0 ? sid - 1 : 0;
	return rc;
}

static void init_locks(struct sto *s)
{
	pthread_rwlockattr_t a;
	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&s->write_lock, &a);
	pthread_rwlock_init(&s->view_lock, &a);
	pthread_rwlock_init(&s->seg_lock, &a);
	pthread_rwlockattr_destroy(&a);
	pthread_mutex_init(&s->compact_lock, NULL);
	pthread_mutex_init(&s->head_lock, NULL);
	pthread_mutex_init(&s->series_lock, NULL);
	/* the cache holds every live series by design: bounded by the index
	 * (opt.max_series bounds their creation), not by a count of its own */
	rdb_ptab_init(&s->series_by_key, SIZE_MAX);
	pthread_mutex_init(&s->batch_lock, NULL);
	pthread_mutex_init(&s->flush_lock, NULL);
	pthread_cond_init(&s->flush_cond, NULL);
	pthread_cond_init(&s->ckpt_cond, NULL);
	pthread_mutex_init(&s->async_mu, NULL);
	pthread_mutex_init(&s->create_mu, NULL);
	pthread_cond_init(&s->create_cv, NULL);
	pthread_mutex_init(&s->cq_mu, NULL);
	pthread_cond_init(&s->cq_cv, NULL);
	pthread_cond_init(&s->async_cv, NULL);
}

static void destroy(struct sto *s)
{
	sto_wal_close(s->wal);
	sto_seg_close(s->seg);
	sto_ring_close(s->ring);
	sto_seg_readers_free(s->readers);
	sti_head_free(s->active);
	sti_head_free(s->frozen);
	sto_index_close(s->ix);
	sto_jobmeta_close(s->jobmeta);
	sti_cache_free(s);
	sti_extent_reset_locked(s); /* no other thread left */
	sti_batch_free_all(s);
	free(s->seal_queue);
	sti_lifecycle_free(s);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	pthread_rwlock_destroy(&s->write_lock);
	pthread_rwlock_destroy(&s->view_lock);
	pthread_rwlock_destroy(&s->seg_lock);
	pthread_mutex_destroy(&s->compact_lock);
	pthread_mutex_destroy(&s->head_lock);
	pthread_mutex_destroy(&s->series_lock);
	pthread_mutex_destroy(&s->batch_lock);
	pthread_mutex_destroy(&s->flush_lock);
	pthread_mutex_destroy(&s->async_mu);
	pthread_mutex_destroy(&s->create_mu);
	pthread_cond_destroy(&s->create_cv);
	pthread_mutex_destroy(&s->cq_mu);
	pthread_cond_destroy(&s->cq_cv);
	pthread_cond_destroy(&s->async_cv);
	pthread_cond_destroy(&s->flush_cond);
	pthread_cond_destroy(&s->ckpt_cond);
	free(s);
}

/* Read-only: the directory must exist and be a data directory; the LOCK
 * is taken when the file exists (a server creates it at its first start). */
static int open_dirs_ro(struct sto *s)
{
	char path[PATH_MAX + 16], buf[256];
	snprintf(path, sizeof(path), "%s/FORMAT", s->dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int rc = -errno;
		rdb_error("store", "%s: cannot read it (%s); not a rankdb data directory", path,
			  strerror(-rc));
		return rc;
	}
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	bool known = false;
	for (unsigned v = STO_FORMAT_VERSION_OLDEST; v <= STO_FORMAT_VERSION; v++) {
		char want[64];
		snprintf(want, sizeof(want), FORMAT_FILE_TEXT, v);
		known |= strcmp(buf, want) == 0;
	}
	if (!known) {
		rdb_error("store", "%s names a format this build does not read", path);
		return RDB_EFORMAT;
	}
	snprintf(path, sizeof(path), "%s/LOCK", s->dir);
	s->lock_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (s->lock_fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		int rc = -errno;
		rdb_error("store",
			  "data directory %s is locked by another process (%s); is "
			  "another rankdbd or rankctl running on it?",
			  s->dir, path);
		return rc == -EWOULDBLOCK ? -EBUSY : rc;
	}
	return 0;
}

static int open_dirs(struct sto *s)
{
	if (s->opt.read_only)
		return open_dirs_ro(s);
	int rc = make_dir(s->dir);
	if (rc == 0)
		rc = take_lock(s);
	if (rc == 0)
		rc = check_format(s->dir);
	if (rc == 0)
		rc = make_dir(s->wal_dir);
	if (rc == 0)
		rc = make_dir(s->seg_dir);
	return rc;
}

/* The engine steps lifecycle/ may take (it calls them only through this
 * table, never directly: lifecycle/ sits below the engine). */
static const struct sti_engine_ops engine_ops = {
    .checkpoint = sti_checkpoint,
    .finish_checkpoint = sti_finish_checkpoint,
    .head_new = sti_head_new,
    .head_free = sti_head_free,
    .cols_bytes = sti_cols_bytes,
    .job_counts_reset = sti_job_counts_reset,
    .extent_reset_locked = sti_extent_reset_locked,
    .uid_reserve = sti_uid_reserve,
    .seg_read = sti_seg_read,
    .read_chunk = sto_read_chunk,
    .write_exclusive = sti_write_exclusive,
    .series_exclusive = sti_series_exclusive,
};

/* How far WAL files made ahead of a rotation are zero-filled: up to where
 * the next checkpoint rotates, at most 64 MiB (written once per file by the
 * flusher, off the ack path). At 4,096 connections the group commits into a
 * growing file wrote its inode and block map with every fdatasync (ext4). */
static uint64_t wal_prealloc_bytes(const struct sto_options *opt)
{
	uint64_t cap = 64ull << 20;
	return opt->wal_rotate_bytes < cap ? opt->wal_rotate_bytes : cap;
}

int sto_open(const struct sto_options *opt, struct sto **out)
{
	struct sto *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->eng = &engine_ops;
	s->opt = *opt;
	sto_ring_set_fallback(!opt->io_uring); /* before any ring (WAL, segments) opens */
	s->lock_fd = -1;
	init_locks(s);
	snprintf(s->dir, sizeof(s->dir), "%s", opt->data_dir);
	snprintf(s->wal_dir, sizeof(s->wal_dir), "%s/wal", s->dir);
	snprintf(s->seg_dir, sizeof(s->seg_dir), "%s/chunks", s->dir);
	s->opt.data_dir = s->dir;
	if (s->opt.chunk_max_points < 1 || s->opt.chunk_max_points > STO_CHUNK_MAX_POINTS)
		s->opt.chunk_max_points = STO_CHUNK_MAX_POINTS;
	int rc = open_dirs(s);
	if (rc == 0)
		rc = sto_jobmeta_open(s->dir, s->opt.read_only, &s->jobmeta);
	if (rc == 0)
		rc = open_index(s);
	if (rc == 0)
		rc = sti_lifecycle_open(s);
	if (rc == 0)
		rc = sto_seg_readers_new(s->seg_dir, &s->readers);
	if (rc == 0)
		rc = sto_ring_open(64, &s->ring);
	if (rc == 0) {
		s->active = sti_head_new(s->ckpt_gen);
		rc = !s->active ? -ENOMEM : s->opt.read_only ? 0 : recover(s);
	}
	if (rc == 0)
		count_kept_damage(s);
	if (rc == 0 && s->opt.read_only) {
		*out = s;
		return 0;
	}
	if (rc == 0) {
		struct sto_wal_options wo = {.dir = s->wal_dir,
					     .gen = s->active->gen,
					     .sync = opt->sync,
					     .queue_max_records = 4096,
					     .prealloc_bytes = wal_prealloc_bytes(&s->opt),
					     .group_done = sti_wal_group_done,
					     .group_arg = s};
		rc = sto_wal_open(&wo, &s->wal);
	}
	if (rc == 0) {
		rc = -pthread_create(&s->flusher, NULL, flusher_main, s);
		s->flusher_running = rc == 0;
	}
	if (rc == 0 && sti_creator_start(s) != 0)
		rdb_warn("store", "cannot start the series creator thread; writes that create "
				  "series do it on their own threads");
	if (rc) {
		rdb_error("store", "cannot open data directory %s: %s", s->dir, rdb_strerror(rc));
		destroy(s);
		return rc;
	}
	rdb_info("store",
		 "opened %s: %llu series, checkpoint generation %llu, WAL generation "
		 "%llu, sync policy %s",
		 s->dir, (unsigned long long)s->nseries, (unsigned long long)s->ckpt_gen,
		 (unsigned long long)s->active->gen,
		 opt->sync == STO_SYNC_NONE ? "none" : "fdatasync");
	*out = s;
	return 0;
}

void sto_close(struct sto *s)
{
	(void)sto_close_rc(s);
}

int sto_close_rc(struct sto *s)
{
	if (!s)
		return 0;
	if (s->opt.read_only) {
		destroy(s);
		return 0;
	}
	atomic_store(&s->closing, true);
	/* Let the writes waiting for their series go on to the WAL, wait for
	 * writes in flight, then stop the flusher. */
	sti_creator_stop(s);
	sti_write_exclusive(s);
	pthread_rwlock_unlock(&s->write_lock);
	pthread_mutex_lock(&s->flush_lock);
	s->stop = true;
	pthread_cond_broadcast(&s->flush_cond);
	pthread_cond_broadcast(&s->ckpt_cond);
	pthread_mutex_unlock(&s->flush_lock);
	if (s->flusher_running)
		pthread_join(s->flusher, NULL);
	/* Final checkpoint without rotation: seal the whole head under the
	 * current generation, then remove its WAL file. */
	int rc = 0;
	if (s->frozen)
		rc = sti_finish_checkpoint(s);
	if (rc == 0) {
		/* The head's generation must be the WAL file's: the checkpoint
		 * deletes WAL files up to it (see sti_checkpoint). Should they
		 * ever differ, the newer one covers both. */
		uint64_t wal_gen = sto_wal_gen(s->wal);
		if (wal_gen != s->active->gen) {
			rdb_error("store",
				  "closing: the head is at WAL generation %llu but the WAL at "
				  "%llu; checkpointing as %llu so that no WAL file outlives the "
				  "points it holds",
				  (unsigned long long)s->active->gen, (unsigned long long)wal_gen,
				  (unsigned long long)(wal_gen > s->active->gen ? wal_gen
										: s->active->gen));
			if (wal_gen > s->active->gen)
				s->active->gen = wal_gen;
		}
		s->frozen = s->active;
		s->active = NULL;
		sto_wal_close(s->wal);
		s->wal = NULL;
		rc = sti_finish_checkpoint(s);
	}
	if (s->trash_due_mono_ns && sti_empty_trash(s) == 0) /* no query is left */
		s->trash_due_mono_ns = 0;
	if (rc)
		rdb_error("store",
			  "final checkpoint failed (%s); the WAL in %s still holds "
			  "every acknowledged point and is replayed at the next start",
			  rdb_strerror(rc), s->wal_dir);
	else
		rdb_info("store", "closed %s cleanly at checkpoint generation %llu", s->dir,
			 (unsigned long long)s->ckpt_gen);
	destroy(s);
	return rc;
}
