/* fake_http.h - an in-process HTTP receiver for delivery tests: one thread,
 * 127.0.0.1, one connection at a time ("Connection: close" on every
 * answer). Each request gets the next behaviour of a script, then the
 * default: an HTTP status to answer, FAKE_DROP (read the request, close
 * without answering) or FAKE_HOLD (record the request, then block until the
 * test calls fake_release; answer 200 after that). Every request is
 * recorded (path, body) before it is answered. */
#ifndef FAKE_HTTP_H
#define FAKE_HTTP_H

#include <stddef.h>

#define FAKE_DROP (-1)
#define FAKE_HOLD (-2)

struct fake;

struct fake_req {
	char path[256];
	char *body; /* NUL-terminated, owned by the fake */
	size_t len;
	int behaviour;
};

struct fake *fake_start(void);			       /* aborts the test program on failure */
void fake_stop(struct fake *f);			       /* releases holds, joins, frees */
void fake_url(struct fake *f, char *buf, size_t size); /* "http://127.0.0.1:PORT" */
/* Behaviours for the next requests, in order; then def. */
void fake_script(struct fake *f, const int *behaviours, size_t n, int def);
void fake_release(struct fake *f);    /* ends every hold, now and later */
void fake_hold_again(struct fake *f); /* holds block again */
/* Waits until at least n requests were recorded (bounded: 60 s); returns
 * the number recorded. */
size_t fake_wait(struct fake *f, size_t n);
size_t fake_count(struct fake *f);
/* Copy of request i (body is a fresh malloc'd copy; free it). */
struct fake_req fake_get(struct fake *f, size_t i);
/* A URL where nothing listens (connection refused): a bound socket that
 * does not listen; close the returned fd when done. */
int fake_dead_url(char *buf, size_t size);

#endif
