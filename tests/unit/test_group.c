/* test_group.c - group records: framing, decoding each member through the
 * same path the read path uses, the member walk, and hostile input
 * (every truncation and every single flipped byte is refused, never
 * crashes, never decodes to different points). */
#include "check.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "storage/chunk/codec.h"
#include "storage/chunk/group.h"
#include "storage/chunk/segment.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPTS 500
#define NMEM 5

struct fixture {
	struct mdl_series_key keys[NMEM];
	struct mdl_cols cols[NMEM];
	struct sto_group_member mem[NMEM];
	struct rdb_buf rec, scratch;
	uint32_t head_len;
};

/* NMEM metrics of rank 3 sent in the same records: shared ts/step/attempt
 * (jittered ns timestamps, one retried step), different value kinds. */
static void fixture_make(struct fixture *f, size_t m)
{
	memset(f, 0, sizeof(*f));
	for (size_t k = 0; k < m; k++) {
		snprintf(f->keys[k].job, sizeof(f->keys[k].job), "job-a");
		f->keys[k].rank = 3;
		snprintf(f->keys[k].metric, sizeof(f->keys[k].metric), "metric.%zu", k);
		for (size_t i = 0; i < NPTS; i++) {
			uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull;
			int64_t ts = 1700000000000000000 + (int64_t)i * 300000000 +
				     (int64_t)((h >> 40) % 3000000u);
			int64_t step = i == 250 ? 249 : (int64_t)i;
			uint32_t attempt = i >= 250 ? 1 : 0;
			double v = k == 0   ? 10.0 / (1.0 + (double)i)
				   : k == 1 ? (double)(i * 512)
				   : k == 2 ? NAN
					    : (double)(i % 17) * (double)k;
			uint64_t bits;
			memcpy(&bits, &v, 8);
			CHECK(mdl_cols_push(&f->cols[k], ts, step, attempt, bits) == 0);
		}
		f->mem[k] = (struct sto_group_member){100 + k, &f->keys[k], &f->cols[k]};
	}
	rdb_buf_init(&f->rec, 1u << 24);
	rdb_buf_init(&f->scratch, 1u << 24);
}

static void fixture_free(struct fixture *f)
{
	for (size_t k = 0; k < NMEM; k++)
		mdl_cols_free(&f->cols[k]);
	rdb_buf_free(&f->rec);
	rdb_buf_free(&f->scratch);
}

static struct sto_chunk_ref ref_of(const struct fixture *f, size_t k, size_t m)
{
	struct sto_chunk_ref r = {.series_id = 100 + k,
				  .uid = 77 + k,
				  .length = (uint32_t)f->rec.len,
				  .group_n = (uint8_t)m,
				  .member = (uint8_t)k,
				  .head_len = f->head_len};
	r.stats.count = NPTS;
	return r;
}

static bool cols_equal(const struct mdl_cols *a, const struct mdl_cols *b)
{
	return a->n == b->n && memcmp(a->ts_ns, b->ts_ns, a->n * 8) == 0 &&
	       memcmp(a->step, b->step, a->n * 8) == 0 &&
	       memcmp(a->attempt, b->attempt, a->n * 4) == 0 &&
	       memcmp(a->value, b->value, a->n * 8) == 0;
}

static void test_roundtrip_every_member(void)
{
	struct fixture f;
	fixture_make(&f, NMEM);
	CHECK(sto_group_frame(&f.rec, &f.scratch, 77, 9, f.mem, NMEM, &f.head_len) == 0);
	CHECK_EQ_INT(rdb_get_le32(f.rec.data), STO_GROUP_MAGIC);
	struct mdl_cols out = MDL_COLS_INIT;
	for (size_t k = 0; k < NMEM; k++) {
		struct sto_chunk_ref r = ref_of(&f, k, NMEM);
		const char *why = NULL;
		CHECK(sto_record_decode(f.rec.data, &r, &out, &why) == 0);
		CHECK(cols_equal(&out, &f.cols[k]));
	}
	/* smaller than the members as lone chunks: the time columns once */
	struct rdb_buf lone;
	rdb_buf_init(&lone, 1u << 24);
	for (size_t k = 0; k < NMEM; k++)
		CHECK(sto_codec_encode(&f.cols[k], &lone, NULL) == 0);
	fprintf(stderr, "  group %zu bytes vs %zu as lone chunks\n", f.rec.len, lone.len);
	CHECK(f.rec.len < lone.len * 3 / 4);
	rdb_buf_free(&lone);
	mdl_cols_free(&out);
	fixture_free(&f);
}

struct walk_seen {
	const struct fixture *f;
	size_t calls, m;
	unsigned damaged; /* members passed as damaged */
};

static int walk_cb(void *arg, unsigned member, unsigned m, uint64_t sid,
		   const struct mdl_series_key *key, const struct mdl_cols *cols,
		   const char *damage)
{
	struct walk_seen *w = arg;
	if (damage) {
		w->damaged |= 1u << member;
		CHECK(key == NULL && cols == NULL && sid == 100 + member);
		return 0;
	}
	CHECK(member >= w->calls);
	CHECK_EQ_INT(m, w->m);
	CHECK_EQ_INT(sid, 100 + member);
	CHECK(strcmp(key->metric, w->f->keys[member].metric) == 0 && key->rank == 3 &&
	      strcmp(key->job, "job-a") == 0);
	CHECK(cols_equal(cols, &w->f->cols[member]));
	w->calls = member + 1;
	return 0;
}

static void test_walk(void)
{
	struct fixture f;
	fixture_make(&f, NMEM);
	CHECK(sto_group_frame(&f.rec, &f.scratch, 77, 9, f.mem, NMEM, &f.head_len) == 0);
	struct mdl_cols cols = MDL_COLS_INIT;
	struct walk_seen w = {&f, 0, NMEM, 0};
	const char *why = NULL;
	CHECK(sto_group_each(f.rec.data, f.rec.len, &cols, walk_cb, &w, &why) == 0);
	uint32_t hl = 0;
	CHECK(sto_group_check(f.rec.data, f.rec.len, 77, &hl, &why) == 0 && hl == f.head_len);
	CHECK(sto_group_check(f.rec.data, f.rec.len, 78, &hl, &why) == RDB_ECORRUPT);
	CHECK_EQ_INT(w.calls, NMEM);
	mdl_cols_free(&cols);
	fixture_free(&f);
}

static void test_index_mismatch_refused(void)
{
	struct fixture f;
	fixture_make(&f, NMEM);
	CHECK(sto_group_frame(&f.rec, &f.scratch, 77, 9, f.mem, NMEM, &f.head_len) == 0);
	struct mdl_cols out = MDL_COLS_INIT;
	const char *why;
	struct sto_chunk_ref r = ref_of(&f, 1, NMEM);
	r.series_id = 101 + 1; /* the entry says another series */
	CHECK(sto_record_decode(f.rec.data, &r, &out, &why) == RDB_ECORRUPT && out.n == 0);
	r = ref_of(&f, 1, NMEM);
	r.group_n = NMEM - 1;
	CHECK(sto_record_decode(f.rec.data, &r, &out, &why) == RDB_ECORRUPT);
	r = ref_of(&f, 1, NMEM);
	r.group_n = 0; /* a lone-chunk entry pointing at a group record */
	CHECK(sto_record_decode(f.rec.data, &r, &out, &why) == RDB_ECORRUPT);
	r = ref_of(&f, 1, NMEM);
	r.stats.count = NPTS - 1;
	CHECK(sto_record_decode(f.rec.data, &r, &out, &why) == RDB_ECORRUPT);
	r = ref_of(&f, 1, NMEM);
	r.uid = 79; /* member 1 of the group whose record uid is 77 is 78 */
	CHECK(sto_record_decode(f.rec.data, &r, &out, &why) == RDB_ECORRUPT);
	mdl_cols_free(&out);
	fixture_free(&f);
}

static void test_frame_errors(void)
{
	struct fixture f;
	fixture_make(&f, NMEM);
	CHECK(sto_group_frame(&f.rec, &f.scratch, 77, 9, f.mem, 1, &f.head_len) == RDB_EINVAL);
	f.cols[2].n--; /* members must have equal point counts */
	CHECK(sto_group_frame(&f.rec, &f.scratch, 77, 9, f.mem, NMEM, &f.head_len) == RDB_EINVAL);
	CHECK_EQ_INT(f.rec.len, 0);
	fixture_free(&f);
}

/* A flipped byte in the header or head fails every member; one in a
 * member's section fails that member only (the others read as before:
 * members are checked on their own). Every truncation is refused. */
static void test_hostile(void)
{
	struct fixture f;
	fixture_make(&f, 3);
	CHECK(sto_group_frame(&f.rec, &f.scratch, 77, 9, f.mem, 3, &f.head_len) == 0);
	struct mdl_cols out = MDL_COLS_INIT;
	const char *why;
	struct sto_group_sect sect[3];
	for (size_t k = 0; k < 3; k++) {
		struct sto_chunk_ref r = ref_of(&f, k, 3);
		CHECK(sto_group_head_check(f.rec.data, &r, &sect[k], &why) == 0);
	}
	size_t wrong = 0;
	for (size_t i = 0; i < f.rec.len; i++) {
		f.rec.data[i] ^= 0x41;
		for (size_t k = 0; k < 3; k++) {
			struct sto_chunk_ref r = ref_of(&f, k, 3);
			bool mine = i < STO_CHUNK_HEADER_SIZE + f.head_len ||
				    (i >= sect[k].offset && i < sect[k].offset + sect[k].length);
			int rc = sto_record_decode(f.rec.data, &r, &out, &why);
			if (mine ? rc != RDB_ECORRUPT : rc != 0 || !cols_equal(&out, &f.cols[k]))
				wrong++;
		}
		uint32_t hl;
		if (sto_group_check(f.rec.data, f.rec.len, 77, &hl, &why) != RDB_ECORRUPT)
			wrong++;
		f.rec.data[i] ^= 0x41;
	}
	CHECK_EQ_INT(wrong, 0);
	struct walk_seen w = {&f, 0, 3, 0};
	for (size_t cut = 0; cut < f.rec.len; cut++) {
		uint8_t *copy = malloc(cut ? cut : 1);
		memcpy(copy, f.rec.data, cut);
		w.calls = 0;
		CHECK(sto_group_each(copy, cut, &out, walk_cb, &w, &why) == RDB_ECORRUPT);
		CHECK_EQ_INT(w.calls, 0);
		free(copy);
	}
	mdl_cols_free(&out);
	fixture_free(&f);
}

/* One damaged section: the walk passes it as damaged and every sibling
 * intact; verify's whole check fails; compaction's prune refuses while the
 * member has an entry, and once it has none marks it removed, after which
 * the record checks clean, the siblings read as before and the walk skips
 * the removed member. */
static void test_damaged_member(void)
{
	struct fixture f;
	fixture_make(&f, 3);
	CHECK(sto_group_frame(&f.rec, &f.scratch, 77, 9, f.mem, 3, &f.head_len) == 0);
	struct mdl_cols out = MDL_COLS_INIT;
	const char *why;
	struct sto_group_sect sect;
	struct sto_chunk_ref r1 = ref_of(&f, 1, 3);
	CHECK(sto_group_head_check(f.rec.data, &r1, &sect, &why) == 0);
	f.rec.data[sect.offset + sect.length - 1] ^= 0x10;
	struct walk_seen w = {&f, 0, 3, 0};
	CHECK(sto_group_each(f.rec.data, f.rec.len, &out, walk_cb, &w, &why) == 0);
	CHECK_EQ_INT(w.damaged, 2u);
	CHECK_EQ_INT(w.calls, 3);
	uint32_t hl;
	unsigned removed;
	CHECK(sto_group_check(f.rec.data, f.rec.len, 77, &hl, &why) == RDB_ECORRUPT);
	CHECK(sto_group_prune(f.rec.data, f.rec.len, 77, 7, &removed, &why) == RDB_ECORRUPT);
	CHECK(sto_group_prune(f.rec.data, f.rec.len, 77, 5, &removed, &why) == 0 && removed == 1);
	CHECK(sto_group_check(f.rec.data, f.rec.len, 77, &hl, &why) == 0);
	for (size_t k = 0; k < 3; k += 2) {
		struct sto_chunk_ref r = ref_of(&f, k, 3);
		CHECK(sto_record_decode(f.rec.data, &r, &out, &why) == 0 &&
		      cols_equal(&out, &f.cols[k]));
	}
	CHECK(sto_record_decode(f.rec.data, &r1, &out, &why) == RDB_ECORRUPT);
	w = (struct walk_seen){&f, 0, 3, 0};
	CHECK(sto_group_each(f.rec.data, f.rec.len, &out, walk_cb, &w, &why) == 0);
	CHECK_EQ_INT(w.damaged, 0u);
	CHECK_EQ_INT(w.calls, 3);
	mdl_cols_free(&out);
	fixture_free(&f);
}

int main(void)
{
	RUN(test_roundtrip_every_member);
	RUN(test_walk);
	RUN(test_index_mismatch_refused);
	RUN(test_frame_errors);
	RUN(test_hostile);
	RUN(test_damaged_member);
	return check_summary("group");
}
