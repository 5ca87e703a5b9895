/* notify_int.h - what notify.c (transport) and notify_fmt.c (the JSON
 * documents) share. Internal to detect/. */
#ifndef DET_NOTIFY_INT_H
#define DET_NOTIFY_INT_H

#include <stdint.h>

#include "common/rdb_buf.h"
#include "detect/cond.h"

/* One rendered delivery is at most this many bytes. */
#define DET_NOTIFY_ITEM_MAX (16 * 1024)

struct det_notify_fmt {
	char generator_url[DET_URL_MAX]; /* base without trailing '/', or "" */
	int64_t valid_for_ns;		 /* a firing alert's endsAt = now + this */
};

/* Appends the Alertmanager v2 postable alert object for al. al->state must
 * be firing or resolved. 0 or RDB_ELIMIT / -ENOMEM (b may hold a prefix). */
int det_fmt_am(const struct det_notify_fmt *f, const struct det_alert *al, int64_t now_ns,
	       struct rdb_buf *b);
/* Appends the webhook document (docs/API.md) for al. Same contract. */
int det_fmt_webhook(const struct det_notify_fmt *f, const struct det_alert *al, int64_t now_ns,
		    struct rdb_buf *b);

#endif
