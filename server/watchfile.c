/* watchfile.c - see watchfile.h. */
#include "server/watchfile.h"
#include "common/rdb_time.h"

#define LOOK_EVERY_NS 1000000000LL

void srv_watch_loaded(struct srv_watch *w, const struct stat *st)
{
	pthread_mutex_lock(&w->mu);
	w->checked_ns = rdb_now_mono_ns();
	if (st && st->st_ino)
		w->st = *st;
	pthread_mutex_unlock(&w->mu);
}

bool srv_watch_changed(struct srv_watch *w, const char *path)
{
	int64_t now = rdb_now_mono_ns();
	pthread_mutex_lock(&w->mu);
	bool due = now - w->checked_ns >= LOOK_EVERY_NS;
	if (due)
		w->checked_ns = now;
	struct stat old = w->st;
	pthread_mutex_unlock(&w->mu);
	struct stat st;
	if (!due || stat(path, &st) != 0)
		return false;
	return st.st_mtim.tv_sec != old.st_mtim.tv_sec ||
	       st.st_mtim.tv_nsec != old.st_mtim.tv_nsec || st.st_size != old.st_size ||
	       st.st_ino != old.st_ino;
}
