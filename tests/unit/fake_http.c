/* fake_http.c - the in-process HTTP receiver of fake_http.h. */
#include "fake_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_REQS      1024
#define MAX_SCRIPT    64
#define MAX_REQ_BYTES (4 << 20)

struct fake {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int lfd;
	int port;
	bool stop;
	bool released;
	int script[MAX_SCRIPT];
	size_t nscript, next;
	int def;
	struct fake_req reqs[MAX_REQS];
	size_t nreqs;
};

static void die(const char *what)
{
	fprintf(stderr, "fake_http: %s: %s\n", what, strerror(errno));
	abort();
}

static int next_behaviour(struct fake *f)
{
	pthread_mutex_lock(&f->mu);
	int b = f->next < f->nscript ? f->script[f->next++] : f->def;
	pthread_mutex_unlock(&f->mu);
	return b;
}

/* Reads one request; returns its total length in *buf or -1. */
static long read_request(struct fake *f, int fd, char **out, size_t *hdr_len, size_t *body_len)
{
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap + 1);
	long content = -1;
	size_t hlen = 0;
	for (;;) {
		if (hlen && len >= hlen + (size_t)content)
			break;
		if (len == cap) {
			if (cap >= MAX_REQ_BYTES)
				goto fail;
			cap *= 2;
			buf = realloc(buf, cap + 1);
		}
		ssize_t k = recv(fd, buf + len, cap - len, 0);
		if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
			pthread_mutex_lock(&f->mu);
			bool stop = f->stop;
			pthread_mutex_unlock(&f->mu);
			if (stop)
				goto fail;
			continue;
		}
		if (k <= 0)
			goto fail;
		len += (size_t)k;
		buf[len] = 0;
		char *end = hlen ? NULL : strstr(buf, "\r\n\r\n");
		if (end) {
			hlen = (size_t)(end - buf) + 4;
			content = 0;
			for (char *p = buf; p < end; p++) {
				if (strncasecmp(p, "\r\nContent-Length:", 17) == 0)
					content = strtol(p + 17, NULL, 10);
			}
		}
	}
	*out = buf;
	*hdr_len = hlen;
	*body_len = (size_t)content;
	return (long)len;
fail:
	free(buf);
	return -1;
}

static void answer(int fd, int code)
{
	char resp[256];
	const char *body = code >= 400 ? "simulated failure" : "";
	int n = snprintf(resp, sizeof(resp),
			 "HTTP/1.1 %d X\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n%s",
			 code, strlen(body), body);
	ssize_t w = send(fd, resp, (size_t)n, MSG_NOSIGNAL); /* the client may be gone */
	(void)w;
}

static void record(struct fake *f, const char *buf, size_t hlen, size_t blen, int b)
{
	pthread_mutex_lock(&f->mu);
	if (f->nreqs < MAX_REQS) {
		struct fake_req *r = &f->reqs[f->nreqs++];
		const char *sp = strchr(buf, ' ');
		const char *sp2 = sp ? strchr(sp + 1, ' ') : NULL;
		size_t plen = sp && sp2 ? (size_t)(sp2 - sp - 1) : 0;
		if (plen >= sizeof(r->path))
			plen = sizeof(r->path) - 1;
		memcpy(r->path, sp ? sp + 1 : "", plen);
		r->path[plen] = 0;
		r->body = malloc(blen + 1);
		memcpy(r->body, buf + hlen, blen);
		r->body[blen] = 0;
		r->len = blen;
		r->behaviour = b;
	}
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static void serve(struct fake *f, int fd)
{
	struct timeval tv = {0, 100000};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	char *buf;
	size_t hlen, blen;
	if (read_request(f, fd, &buf, &hlen, &blen) < 0)
		return;
	int b = next_behaviour(f);
	record(f, buf, hlen, blen, b);
	free(buf);
	if (b == FAKE_DROP)
		return;
	if (b == FAKE_HOLD) {
		pthread_mutex_lock(&f->mu);
		while (!f->released && !f->stop)
			pthread_cond_wait(&f->cv, &f->mu);
		pthread_mutex_unlock(&f->mu);
		b = 200;
	}
	answer(fd, b);
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	for (;;) {
		pthread_mutex_lock(&f->mu);
		bool stop = f->stop;
		pthread_mutex_unlock(&f->mu);
		if (stop)
			break;
		struct pollfd p = {f->lfd, POLLIN, 0};
		if (poll(&p, 1, 50) <= 0)
			continue;
		int fd = accept(f->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		serve(f, fd);
		close(fd);
	}
	return NULL;
}

static int listen_any(int *port, bool do_listen)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket");
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		die("bind");
	if (do_listen && listen(fd, 64) != 0)
		die("listen");
	socklen_t sl = sizeof(sa);
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)
		die("getsockname");
	*port = ntohs(sa.sin_port);
	return fd;
}

struct fake *fake_start(void)
{
	struct fake *f = calloc(1, sizeof(*f));
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	f->def = 200;
	f->lfd = listen_any(&f->port, true);
	if (pthread_create(&f->thread, NULL, fake_main, f) != 0)
		die("pthread_create");
	return f;
}

void fake_stop(struct fake *f)
{
	pthread_mutex_lock(&f->mu);
	f->stop = true;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	pthread_join(f->thread, NULL);
	close(f->lfd);
	for (size_t i = 0; i < f->nreqs; i++)
		free(f->reqs[i].body);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->mu);
	free(f);
}

void fake_url(struct fake *f, char *buf, size_t size)
{
	snprintf(buf, size, "http://127.0.0.1:%d", f->port);
}

void fake_script(struct fake *f, const int *behaviours, size_t n, int def)
{
	pthread_mutex_lock(&f->mu);
	if (n > MAX_SCRIPT)
		n = MAX_SCRIPT;
	if (n)
		memcpy(f->script, behaviours, n * sizeof(int));
	f->nscript = n;
	f->next = 0;
	f->def = def;
	pthread_mutex_unlock(&f->mu);
}

void fake_release(struct fake *f)
{
	pthread_mutex_lock(&f->mu);
	f->released = true;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

void fake_hold_again(struct fake *f)
{
	pthread_mutex_lock(&f->mu);
	f->released = false;
	pthread_mutex_unlock(&f->mu);
}

size_t fake_wait(struct fake *f, size_t n)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 60;
	pthread_mutex_lock(&f->mu);
	while (f->nreqs < n) {
		if (pthread_cond_timedwait(&f->cv, &f->mu, &dl) == ETIMEDOUT)
			break;
	}
	size_t got = f->nreqs;
	pthread_mutex_unlock(&f->mu);
	return got;
}

size_t fake_count(struct fake *f)
{
	pthread_mutex_lock(&f->mu);
	size_t n = f->nreqs;
	pthread_mutex_unlock(&f->mu);
	return n;
}

struct fake_req fake_get(struct fake *f, size_t i)
{
	pthread_mutex_lock(&f->mu);
	struct fake_req r = f->reqs[i];
	r.body = malloc(r.len + 1);
	memcpy(r.body, f->reqs[i].body, r.len + 1);
	pthread_mutex_unlock(&f->mu);
	return r;
}

int fake_dead_url(char *buf, size_t size)
{
	int port;
	int fd = listen_any(&port, false); /* bound, not listening: refused */
	snprintf(buf, size, "http://127.0.0.1:%d", port);
	return fd;
}
