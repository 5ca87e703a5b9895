/* http.c - the discard sink of rdb-load --sink: minimal blocking HTTP/1.1.
 * (The client side is event-driven: load_ev.c with the parser of hresp.h.)
 *
 * A discard server for measuring the loader alone. It parses just
 * enough of each request (Content-Length or chunked) to find its end, throws
 * the body away, and answers 200 with {"accepted_points":0} (field, length
 * and chunk-size parsing are hresp.h's, the loader's own). One thread per
 * connection; the acceptor stops on http_sink_stop() (shutdown() of the
 * listening socket wakes accept()).
 *
 * Errors are negative errno values. SIGPIPE must be ignored by the program
 * (rdb-load does); writes then fail with -EPIPE instead of killing it.
 */
#include "bench/http.h"
#include "bench/hresp.h"
#include "bench/load.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 8192
/* one thread per connection: the sink must take as many as rdb-load may open */
#define SINK_MAX_CONNS	LOAD_MAX_CONNECTIONS
#define SINK_REPLY_BODY "{\"accepted_points\":0}"

/* ---- connection and reader ---- */

void http_close(struct http_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->rpos = c->rlen = 0;
}

static int send_flags(int fd, const char *p, size_t n, int flags)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL | flags);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads more bytes into the buffer. 0, -ECONNRESET on EOF, -EPROTO if full. */
static int fill(struct http_conn *c)
{
	ssize_t n;

	if (c->rpos == c->rlen) {
		c->rpos = c->rlen = 0;
	} else if (c->rpos > 0 && c->rlen == sizeof(c->rbuf)) {
		memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
		c->rlen -= c->rpos;
		c->rpos = 0;
	}
	if (c->rlen == sizeof(c->rbuf))
		return -EPROTO;
	do {
		n = recv(c->fd, c->rbuf + c->rlen, sizeof(c->rbuf) - c->rlen, 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN ? -ETIMEDOUT : -errno;
	if (n == 0)
		return -ECONNRESET;
	c->rlen += (size_t)n;
	return 0;
}

/* Copies one line (without CR LF) into line[cap]. 0 or negative errno. */
static int read_line(struct http_conn *c, char *line, size_t cap)
{
	for (;;) {
		char *nl = memchr(c->rbuf + c->rpos, '\n', c->rlen - c->rpos);
		if (nl) {
			size_t n = (size_t)(nl - (c->rbuf + c->rpos));
			size_t copy = n;
			if (copy > 0 && c->rbuf[c->rpos + copy - 1] == '\r')
				copy--;
			if (copy >= cap)
				return -EPROTO;
			memcpy(line, c->rbuf + c->rpos, copy);
			line[copy] = '\0';
			c->rpos += n + 1;
			return 0;
		}
		int rc = fill(c);
		if (rc)
			return rc;
	}
}

/* Consumes n body bytes. */
static int discard(struct http_conn *c, size_t n)
{
	while (n > 0) {
		if (c->rpos == c->rlen) {
			int rc = fill(c);
			if (rc)
				return rc;
		}
		size_t take = c->rlen - c->rpos < n ? c->rlen - c->rpos : n;
		c->rpos += take;
		n -= take;
	}
	return 0;
}

/* The request header fields the sink needs to find the request's end. */
struct fields {
	int has_length;
	size_t length;
	int chunked;
	int close;
};

static int read_headers(struct http_conn *c, struct fields *f)
{
	char line[LINE_MAX_BYTES];
	const char *v;
	int rc;

	*f = (struct fields){0};
	for (;;) {
		rc = read_line(c, line, sizeof(line));
		if (rc)
			return rc;
		if (line[0] == '\0')
			return 0;
		if ((v = hresp_header_value(line, "content-length"))) {
			if (hresp_take_number(&v, 10, &f->length) || *v != '\0')
				return -EPROTO;
			f->has_length = 1;
		} else if ((v = hresp_header_value(line, "transfer-encoding"))) {
			f->chunked = strcasestr(v, "chunked") != NULL;
		} else if ((v = hresp_header_value(line, "connection"))) {
			f->close = strcasestr(v, "close") != NULL;
		}
	}
}

static int read_chunked(struct http_conn *c, size_t *total)
{
	char line[LINE_MAX_BYTES];
	size_t n;
	int rc;

	for (;;) {
		rc = read_line(c, line, sizeof(line));
		if (rc == 0)
			rc = hresp_chunk_size(line, &n);
		if (rc)
			return rc;
		if (n == 0)
			break;
		rc = discard(c, n);
		if (rc == 0)
			rc = read_line(c, line, sizeof(line)); /* CRLF after data */
		if (rc)
			return rc;
		*total += n;
	}
	do { /* trailers up to the empty line */
		rc = read_line(c, line, sizeof(line));
	} while (rc == 0 && line[0] != '\0');
	return rc;
}

/* ---- discard sink ---- */

struct http_sink {
	int listen_fd;
	pthread_t acceptor;
	pthread_mutex_t lock;
	pthread_t threads[SINK_MAX_CONNS]; /* guarded by lock */
	size_t nthreads;		   /* guarded by lock */
	atomic_uint_fast64_t requests;
	atomic_uint_fast64_t body_bytes;
};

struct sink_conn {
	struct http_sink *sink;
	struct http_conn c;
};

/* Serves one request. 0, or negative errno (including -ECONNRESET at EOF). */
static int sink_serve_one(struct http_sink *s, struct http_conn *c)
{
	static const char reply[] = "HTTP/1.1 200 OK\r\n"
				    "Content-Type: application/json\r\n"
				    "Content-Length: 21\r\n\r\n" SINK_REPLY_BODY;
	char line[LINE_MAX_BYTES];
	struct fields f;
	size_t total = 0;
	int rc;

	_Static_assert(sizeof(SINK_REPLY_BODY) - 1 == 21, "sink reply length");
	rc = read_line(c, line, sizeof(line));
	if (rc == 0)
		rc = read_headers(c, &f);
	if (rc == 0 && f.chunked)
		rc = read_chunked(c, &total);
	else if (rc == 0 && f.has_length)
		rc = discard(c, total = f.length);
	if (rc == 0)
		rc = send_flags(c->fd, reply, sizeof(reply) - 1, 0);
	if (rc == 0) {
		atomic_fetch_add(&s->requests, 1);
		atomic_fetch_add(&s->body_bytes, total);
	}
	return rc == 0 && f.close ? -ECONNRESET : rc;
}

static void *sink_conn_main(void *arg)
{
	struct sink_conn *sc = arg;

	while (sink_serve_one(sc->sink, &sc->c) == 0)
		;
	http_close(&sc->c);
	free(sc);
	return NULL;
}

static int sink_spawn(struct http_sink *s, int fd)
{
	struct sink_conn *sc = malloc(sizeof(*sc));
	int rc = -ENOMEM;

	if (!sc)
		return rc;
	sc->sink = s;
	sc->c.fd = fd;
	sc->c.rpos = sc->c.rlen = 0;
	pthread_mutex_lock(&s->lock);
	if (s->nthreads == SINK_MAX_CONNS)
		rc = -EMFILE;
	else
		rc = -pthread_create(&s->threads[s->nthreads], NULL, sink_conn_main, sc);
	if (rc == 0)
		s->nthreads++;
	pthread_mutex_unlock(&s->lock);
	if (rc)
		free(sc);
	return rc;
}

static void *sink_accept_main(void *arg)
{
	struct http_sink *s = arg;

	for (;;) {
		int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (fd < 0)
			return NULL; /* listening socket shut down */
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (sink_spawn(s, fd))
			close(fd);
	}
}

static int sink_listen(uint16_t *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int rc;

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, SINK_MAX_CONNS) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

int http_sink_start(struct http_sink **out, uint16_t *port)
{
	struct http_sink *s = calloc(1, sizeof(*s));
	int rc;

	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	atomic_init(&s->requests, 0);
	atomic_init(&s->body_bytes, 0);
	s->listen_fd = sink_listen(port);
	if (s->listen_fd < 0) {
		rc = s->listen_fd;
		pthread_mutex_destroy(&s->lock);
		free(s);
		return rc;
	}
	rc = -pthread_create(&s->acceptor, NULL, sink_accept_main, s);
	if (rc) {
		close(s->listen_fd);
		pthread_mutex_destroy(&s->lock);
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

void http_sink_stop(struct http_sink *s, uint64_t *requests, uint64_t *body_bytes)
{
	if (!s)
		return;
	shutdown(s->listen_fd, SHUT_RDWR);
	pthread_join(s->acceptor, NULL);
	close(s->listen_fd);
	for (size_t i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	if (requests)
		*requests = atomic_load(&s->requests);
	if (body_bytes)
		*body_bytes = atomic_load(&s->body_bytes);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
