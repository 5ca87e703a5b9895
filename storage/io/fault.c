/* fault.c - the storage fault-point registry (contract: fault.h).
 *
 * One static table, indexed by enum sto_fault_point, of atomics: the armed
 * errno (0: disarmed), the failing hit number, whether every later hit
 * fails too, and the hit / fired counters. sto_fault_hit is lock-free: a
 * write site pays one relaxed fetch_add and one load when nothing is armed.
 * Arming (sto_fault_set) is not atomic as a whole against concurrent hits
 * on the same point: a hit racing with the call may count against the old
 * or the new setting, which tests never depend on.
 *
 * Failure: the registry itself cannot fail; a fired point logs one WARN per
 * arming so that a test (or an operator who set RANKDB_FAULTS) sees in the
 * server log which write site failed on purpose.
 */
#include "storage/io/fault.h"
#include "common/rdb_log.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct point {
	_Atomic int err;	/* positive errno; 0: disarmed */
	_Atomic uint64_t nth;	/* the first failing hit (1-based) */
	_Atomic bool every;	/* also every hit after nth */
	_Atomic uint64_t hits;	/* since set / reset */
	_Atomic uint64_t fired; /* hits that failed */
	_Atomic bool logged;	/* the WARN of this arming was written */
};

static struct point points[STO_FP_COUNT];

static const char *const names[STO_FP_COUNT] = {
    [STO_FP_PREPARE] = "prepare",
    [STO_FP_WAL_APPEND] = "wal_append",
    [STO_FP_WAL_SYNC] = "wal_sync",
    [STO_FP_WAL_TRUNCATE] = "wal_truncate",
    [STO_FP_WAL_ROTATE] = "wal_rotate",
    [STO_FP_WAL_TRIM] = "wal_trim",
    [STO_FP_SEG_CREATE] = "seg_create",
    [STO_FP_SEG_APPEND] = "seg_append",
    [STO_FP_SEG_SYNC] = "seg_sync",
    [STO_FP_SEG_TRUNCATE] = "seg_truncate",
    [STO_FP_INDEX_COMMIT] = "index_commit",
    [STO_FP_SERIES_CREATE] = "series_create",
    [STO_FP_META_COMMIT] = "meta_commit",
    [STO_FP_CKPT_SEAL] = "ckpt_seal",
    [STO_FP_CKPT_COMMIT] = "ckpt_commit",
    [STO_FP_EVENT_SEAL] = "event_seal",
    [STO_FP_COMPACT_WRITE] = "compact_write",
    [STO_FP_COMPACT_COMMIT] = "compact_commit",
    [STO_FP_RETENTION_COMMIT] = "retention_commit",
    [STO_FP_ROLLUP_WRITE] = "rollup_write",
    [STO_FP_JOB_DELETE] = "job_delete",
    [STO_FP_HEAD_NEW] = "head_new",
};

static bool valid(enum sto_fault_point p)
{
	return (unsigned)p < STO_FP_COUNT;
}

const char *sto_fault_name(enum sto_fault_point p)
{
	return valid(p) ? names[p] : NULL;
}

int sto_fault_lookup(const char *name, enum sto_fault_point *out)
{
	for (unsigned i = 0; name && i < STO_FP_COUNT; i++)
		if (strcmp(name, names[i]) == 0) {
			*out = (enum sto_fault_point)i;
			return 0;
		}
	return -ENOENT;
}

int sto_fault_set(enum sto_fault_point p, int err, uint64_t nth, bool every_from)
{
	if (!valid(p) || err <= 0 || nth == 0)
		return -EINVAL;
	struct point *pt = &points[p];
	atomic_store(&pt->err, 0); /* disarmed while the rest changes */
	atomic_store(&pt->hits, 0);
	atomic_store(&pt->fired, 0);
	atomic_store(&pt->nth, nth);
	atomic_store(&pt->every, every_from);
	atomic_store(&pt->logged, false);
	atomic_store(&pt->err, err);
	return 0;
}

void sto_fault_clear(enum sto_fault_point p)
{
	if (valid(p))
		atomic_store(&points[p].err, 0);
}

void sto_fault_reset(void)
{
	for (unsigned i = 0; i < STO_FP_COUNT; i++) {
		atomic_store(&points[i].err, 0);
		atomic_store(&points[i].hits, 0);
		atomic_store(&points[i].fired, 0);
	}
}

int sto_fault_hit(enum sto_fault_point p)
{
	if (!valid(p))
		return 0;
	struct point *pt = &points[p];
	uint64_t hit = atomic_fetch_add_explicit(&pt->hits, 1, memory_order_relaxed) + 1;
	int err = atomic_load(&pt->err);
	if (err == 0)
		return 0;
	uint64_t nth = atomic_load(&pt->nth);
	if (hit != nth && !(hit > nth && atomic_load(&pt->every)))
		return 0;
	atomic_fetch_add(&pt->fired, 1);
	if (!atomic_exchange(&pt->logged, true))
		rdb_warn("fault",
			 "injected fault: write site %s fails with %s from hit %llu%s "
			 "(RANKDB_FAULTS or a test armed it; never set in production)",
			 names[p], strerror(err), (unsigned long long)nth,
			 atomic_load(&pt->every) ? " on" : " only");
	return -err;
}

uint64_t sto_fault_hits(enum sto_fault_point p)
{
	return valid(p) ? atomic_load(&points[p].hits) : 0;
}

uint64_t sto_fault_fired(enum sto_fault_point p)
{
	return valid(p) ? atomic_load(&points[p].fired) : 0;
}

/* ---- RANKDB_FAULTS text ------------------------------------------------- */

struct parsed {
	enum sto_fault_point p;
	int err;
	uint64_t nth;
	bool every;
};

static int parse_errno(const char *s, size_t n, int *out)
{
	static const struct {
		const char *name;
		int err;
	} known[] = {{"ENOSPC", ENOSPC}, {"EIO", EIO}, {"EDQUOT", EDQUOT}, {"ENOMEM", ENOMEM}};
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strlen(known[i].name) == n && memcmp(s, known[i].name, n) == 0) {
			*out = known[i].err;
			return 0;
		}
	char num[16];
	if (n == 0 || n >= sizeof(num))
		return -EINVAL;
	memcpy(num, s, n);
	num[n] = 0;
	char *end;
	errno = 0;
	long v = strtol(num, &end, 10);
	if (errno || *end || v <= 0 || v > 4095)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

/* One `name=ERR@N[+]` item of n bytes at s. */
static int parse_item(const char *s, size_t n, struct parsed *out)
{
	const char *eq = memchr(s, '=', n), *at = memchr(s, '@', n);
	if (!eq || !at || at < eq)
		return -EINVAL;
	char name[32];
	size_t nl = (size_t)(eq - s);
	if (nl == 0 || nl >= sizeof(name))
		return -EINVAL;
	memcpy(name, s, nl);
	name[nl] = 0;
	if (sto_fault_lookup(name, &out->p) != 0)
		return -ENOENT;
	if (parse_errno(eq + 1, (size_t)(at - eq - 1), &out->err) != 0)
		return -EINVAL;
	const char *num = at + 1, *end = s + n;
	out->every = end > num && end[-1] == '+';
	char buf[24];
	size_t dl = (size_t)(end - num) - out->every;
	if (dl == 0 || dl >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, num, dl);
	buf[dl] = 0;
	char *e;
	errno = 0;
	unsigned long long v = strtoull(buf, &e, 10);
	if (errno || *e || buf[0] == '-' || v == 0)
		return -EINVAL;
	out->nth = v;
	return 0;
}

#define PARSE_MAX_ITEMS 64

int sto_fault_parse(const char *spec, char *err, size_t errlen)
{
	struct parsed items[PARSE_MAX_ITEMS];
	size_t n = 0;
	for (const char *s = spec; s && *s;) {
		const char *comma = strchr(s, ',');
		size_t len = comma ? (size_t)(comma - s) : strlen(s);
		int rc = n < PARSE_MAX_ITEMS ? parse_item(s, len, &items[n]) : -E2BIG;
		if (rc) {
			snprintf(err, errlen,
				 "RANKDB_FAULTS item '%.*s': %s (expected name=ENOSPC@N or "
				 "name=EIO@N+, comma-separated; names: see docs/OPERATIONS.md)",
				 (int)(len > 64 ? 64 : len), s,
				 rc == -ENOENT	? "no such fault point"
				 : rc == -E2BIG ? "too many items"
						: "malformed");
			return -EINVAL;
		}
		n++;
		s = comma ? comma + 1 : s + len;
	}
	for (size_t i = 0; i < n; i++)
		sto_fault_set(items[i].p, items[i].err, items[i].nth, items[i].every);
	return 0;
}
