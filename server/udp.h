/* udp.h - rankdbd's UDP listener: InfluxDB line protocol and JSON records
 * in datagrams, fire-and-forget, with every drop counted (server/udp.c).
 */
#ifndef SRV_UDP_H
#define SRV_UDP_H

#include "server/srv.h"

#include <stdint.h>

struct srv_udp;

/* Binds udp_addr:udp_port of ctx->cfg and starts the receiver and worker
 * threads. With udp_port 0 the listener is off: *out = NULL, *port = 0 and
 * 0 is returned. ctx must outlive the listener. Does not block beyond the
 * bind. 0, or -errno (bad address, port in use, no threads) with a log
 * line saying why; nothing is left running on failure. */
int srv_udp_start(struct srv_ctx *ctx, struct srv_udp **out, uint16_t *port);

/* Stops receiving, writes every datagram already queued (and the ones
 * waiting in the socket buffer, up to the queue bound), joins the threads,
 * closes the socket and frees everything. Blocks until done. Call before
 * sto_close. NULL ok. */
void srv_udp_stop(struct srv_udp *u);

#endif
