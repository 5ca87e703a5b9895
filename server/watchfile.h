/* watchfile.h - a configuration file reloaded when it changes on disk.
 *
 * The tokens file (auth.c) and the UDP keys file (udp_auth.c) are re-read
 * on SIGHUP, on their admin endpoint, and within a second of a change. The
 * last part is this: the stat (inode, size, mtime) of the version the owner
 * last read, and a look at the file at most once a second from the request
 * path. Thread-safe (own mutex, held only to copy a few fields).
 */
#ifndef SRV_WATCHFILE_H
#define SRV_WATCHFILE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

struct srv_watch {
	pthread_mutex_t mu;
	struct stat st;	    /* of the version last read (st_ino 0: none) */
	int64_t checked_ns; /* last look (monotonic) */
};
#define SRV_WATCH_INIT                                                                             \
	{                                                                                          \
		.mu = PTHREAD_MUTEX_INITIALIZER                                                    \
	}

/* The owner read the file now. st: its stat, also when the content was
 * refused (so a bad file is not re-read every second until it changes
 * again); NULL or st_ino 0 when it could not be opened: the previous stat
 * stays. */
void srv_watch_loaded(struct srv_watch *w, const struct stat *st);

/* true when a second has passed since the last look and path's stat
 * differs from the version last read: the owner should reload it. One
 * stat(2) at most, never more than once a second per watch. */
bool srv_watch_changed(struct srv_watch *w, const char *path);

#endif
