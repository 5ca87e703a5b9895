/* fuzz_config.c - libFuzzer target for the configuration file parser
 * (server/config.h): any text an operator might put in rankdb.conf.
 * Invariants: no crash or overread (ASan); a refused file leaves the
 * configuration exactly as it was and says why (file:line); an accepted
 * file gives a configuration that writes back (srv_config_get) and reads
 * again to the same values. A violation abort()s. */
#include "server/config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const names[] = {"data_dir",	   "http_port", "max_body_bytes",  "sync_policy",
				    "retention_s", "log_level", "udp_queue_bytes", "detect"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 256 * 1024)
		return 0;
	static struct srv_config before, c, again;
	char err[1024] = "";
	srv_config_default(&before);
	c = before;
	int rc = srv_config_load_text(&c, (const char *)data, size, "fuzz.conf", err, sizeof(err));
	if (rc != 0) {
		if (memcmp(&c, &before, sizeof(c)) != 0 || strncmp(err, "fuzz.conf", 9) != 0)
			abort();
		return 0;
	}
	/* every option as text, read back: the same configuration */
	again = before;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char v[8192];
		if (srv_config_get(&c, names[i], v, sizeof(v)) != 0)
			continue; /* not an option in this build */
		if (srv_config_set(&again, names[i], v, err, sizeof(err)) != 0)
			abort();
		char w[8192];
		if (srv_config_get(&again, names[i], w, sizeof(w)) != 0 || strcmp(v, w) != 0)
			abort();
	}
	return 0;
}
