/* udp.h - rdb-load's UDP sender: packs a line-oriented workload (line
 * protocol or NDJSON, every line ending in '\n') into datagrams of whole
 * lines and sends them to one IPv4 host:port from several threads, as fast
 * as possible or paced to a points/s rate. Fire-and-forget: the sender only
 * knows what it handed to the kernel. C11 + POSIX + pthreads only.
 */
#ifndef RANKDB_BENCH_UDP_H
#define RANKDB_BENCH_UDP_H

#include <stddef.h>
#include <stdint.h>

struct udp_load_opts {
	const char *host; /* IPv4 literal */
	uint16_t port;
	uint32_t datagram_bytes; /* payload bound; lines are never split */
	uint32_t senders;	 /* threads, one socket each */
	uint64_t rate;		 /* points/s over all senders; 0 = unpaced */
	uint32_t metrics;	 /* points per line */
};

struct udp_load_result {
	uint64_t datagrams, lines, points, bytes; /* handed to the kernel */
	uint64_t send_errors;			  /* datagrams send() refused */
	size_t planned;				  /* datagrams packed */
	double seconds;				  /* first send to last send */
};

/* Packs text[0..len) (whole lines, each ending in '\n') into datagrams and
 * sends each once. 0, -EINVAL (a line longer than datagram_bytes, bad host),
 * -ENOMEM, or a negative errno from socket setup. */
int udp_load(const char *text, size_t len, const struct udp_load_opts *o,
	     struct udp_load_result *res);

#endif
