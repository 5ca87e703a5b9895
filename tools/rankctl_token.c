/* rankctl_token.c - `rankctl token add|list|revoke FILE ...`: edits a
 * tokens file (format in server/auth.h and docs/OPERATIONS.md, Securing
 * rankdb) offline; `rankctl udp-key add|list|revoke FILE ...` edits a UDP
 * keys file (server/udp_auth.h) the same way, except that the file keeps
 * the secret itself (the server computes HMACs with it) and list never
 * shows it. A new token's secret comes from GnuTLS's key generator
 * (common/rdb_sha256.h) and is printed once; the file keeps only its
 * SHA-256. The file is rewritten whole into FILE.tmp (mode 0600) and
 * renamed over FILE, so rankdbd (which re-reads a changed file) never sees
 * half of it. Single-threaded CLI code.
 */
#include "common/rdb_sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int rankctl_token(int argc, char **argv);
int rankctl_udp_key(int argc, char **argv);

#define LINE_BYTES 2048
#define MAX_LINES  4096

static int token_usage(void)
{
	fprintf(stderr, "usage: rankctl token add FILE ID SCOPES [JOBS]   (SCOPES: comma list of "
			"ingest,query,admin; JOBS: comma list of job-name patterns, default *)\n"
			"       rankctl token list FILE\n"
			"       rankctl token revoke FILE ID\n");
	return 2;
}

/* Reads FILE's lines (a missing file is empty). Returns the count or -1. */
static int read_lines(const char *path, char lines[][LINE_BYTES], int max)
{
	FILE *f = fopen(path, "re");
	int n = 0;
	if (!f)
		return errno == ENOENT ? 0 : -1;
	while (n < max && fgets(lines[n], LINE_BYTES, f))
		n++;
	fclose(f);
	return n;
}

static int write_lines(const char *path, char lines[][LINE_BYTES], int n)
{
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	FILE *f = fdopen(fd, "w");
	if (!f) {
		close(fd);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++)
		fputs(lines[i], f);
	int rc = fflush(f) == 0 && fsync(fileno(f)) == 0 ? 0 : -errno;
	if (fclose(f) != 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) != 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}

/* The id of a token line, or "" for comments and blank lines. */
static void line_id(const char *line, char *id, size_t idlen)
{
	id[0] = 0;
	const char *p = line + strspn(line, " \t");
	if (*p == '#' || *p == '\n' || !*p)
		return;
	size_t n = strcspn(p, " \t\n");
	snprintf(id, idlen, "%.*s", (int)(n < idlen ? n : idlen - 1), p);
}

static bool valid_word(const char *s, const char *extra)
{
	if (!s[0] || strlen(s) > 512)
		return false;
	for (const char *c = s; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || strchr(extra, *c)))
			return false;
	return true;
}

/* Removes the line of id from lines (n of them); prints and writes. 0 or 1. */
static int revoke_id(const char *what, const char *path, char lines[][LINE_BYTES], int n,
		     const char *rid)
{
	char id[128];
	int k = 0;
	bool found = false;
	for (int i = 0; i < n; i++) {
		line_id(lines[i], id, sizeof(id));
		if (strcmp(id, rid) == 0) {
			found = true;
			continue;
		}
		memcpy(lines[k++], lines[i], LINE_BYTES);
	}
	if (!found) {
		fprintf(stderr, "rankctl: no %s '%s' in %s\n", what, rid, path);
		return 1;
	}
	int rc = write_lines(path, lines, k);
	if (rc) {
		fprintf(stderr, "rankctl: cannot write %s: %s\n", path, strerror(-rc));
		return 1;
	}
	printf("revoked %s (rankdbd re-reads %s within a second, or on SIGHUP)\n", rid, path);
	return 0;
}

static int udp_key_usage(void)
{
	fprintf(stderr, "usage: rankctl udp-key add FILE ID [JOBS]   (JOBS: comma list of job-name "
			"patterns, default *)\n"
			"       rankctl udp-key list FILE\n"
			"       rankctl udp-key revoke FILE ID\n");
	return 2;
}

/* add: a 32-byte secret from GnuTLS, written as hex, printed once. */
static int udp_key_add(const char *path, char lines[][LINE_BYTES], int n, const char *kid,
		       const char *jobs)
{
	char id[128], secret[65];
	uint8_t key[32];
	if (!valid_word(kid, "._-") || strlen(kid) > 64 || !valid_word(jobs, "*?[]!,._-")) {
		fprintf(stderr, "rankctl: ID is 1..64 of [A-Za-z0-9._-], JOBS patterns of "
				"[A-Za-z0-9._-*?[]!]\n");
		return 2;
	}
	for (int i = 0; i < n; i++) {
		line_id(lines[i], id, sizeof(id));
		if (strcmp(id, kid) == 0) {
			fprintf(stderr, "rankctl: UDP key '%s' exists; revoke it first\n", kid);
			return 1;
		}
	}
	if (n >= MAX_LINES) {
		fprintf(stderr, "rankctl: %s has too many lines\n", path);
		return 1;
	}
	if (rdb_random_key(key, sizeof(key))) {
		fprintf(stderr, "rankctl: no random numbers from GnuTLS\n");
		return 1;
	}
	for (size_t i = 0; i < sizeof(key); i++)
		snprintf(secret + 2 * i, 3, "%02x", key[i]);
	snprintf(lines[n++], LINE_BYTES, "%s %s %s\n", kid, jobs, secret);
	int rc = write_lines(path, lines, n);
	if (rc) {
		fprintf(stderr, "rankctl: cannot write %s: %s\n", path, strerror(-rc));
		return 1;
	}
	printf("%s %s\n", kid, secret);
	fprintf(stderr,
		"UDP key '%s' added to %s; the line above is its id and secret (hex) for the "
		"senders\n",
		kid, path);
	return 0;
}

int rankctl_udp_key(int argc, char **argv)
{
	static char lines[MAX_LINES][LINE_BYTES];
	if (argc < 2)
		return udp_key_usage();
	const char *cmd = argv[0], *path = argv[1];
	int n = read_lines(path, lines, MAX_LINES);
	if (n < 0) {
		fprintf(stderr, "rankctl: cannot read %s: %s\n", path, strerror(errno));
		return 1;
	}
	if (strcmp(cmd, "list") == 0 && argc == 2) {
		char id[128], jobs[1024];
		for (int i = 0; i < n; i++) {
			line_id(lines[i], id, sizeof(id));
			if (id[0] && sscanf(lines[i], "%*s %1023s", jobs) == 1)
				printf("%s\t%s\n", id, jobs); /* never the secret */
		}
		return 0;
	}
	if (strcmp(cmd, "revoke") == 0 && argc == 3)
		return revoke_id("UDP key", path, lines, n, argv[2]);
	if (strcmp(cmd, "add") == 0 && (argc == 3 || argc == 4))
		return udp_key_add(path, lines, n, argv[2], argc == 4 ? argv[3] : "*");
	return udp_key_usage();
}

int rankctl_token(int argc, char **argv)
{
	static char lines[MAX_LINES][LINE_BYTES];
	if (argc < 2)
		return token_usage();
	const char *cmd = argv[0], *path = argv[1];
	int n = read_lines(path, lines, MAX_LINES);
	char id[128];
	if (n < 0) {
		fprintf(stderr, "rankctl: cannot read %s: %s\n", path, strerror(errno));
		return 1;
	}
	if (strcmp(cmd, "list") == 0 && argc == 2) {
		for (int i = 0; i < n; i++) {
			char sc[128], jobs[1024];
			line_id(lines[i], id, sizeof(id));
			if (id[0] && sscanf(lines[i], "%*s %127s %1023s", sc, jobs) == 2)
				printf("%s\t%s\t%s\n", id, sc, jobs);
		}
		return 0;
	}
	if (strcmp(cmd, "revoke") == 0 && argc == 3)
		return revoke_id("token", path, lines, n, argv[2]);
	if (strcmp(cmd, "add") == 0 && (argc == 4 || argc == 5)) {
		const char *tid = argv[2], *scopes = argv[3], *jobs = argc == 5 ? argv[4] : "*";
		if (!valid_word(tid, "_-") || strlen(tid) > 64 || !valid_word(scopes, ",") ||
		    !valid_word(jobs, "*?[]!,._-")) {
			fprintf(stderr,
				"rankctl: ID is 1..64 of [A-Za-z0-9_-], SCOPES a comma list, "
				"JOBS patterns of [A-Za-z0-9._-*?[]!]\n");
			return 2;
		}
		for (int i = 0; i < n; i++) {
			line_id(lines[i], id, sizeof(id));
			if (strcmp(id, tid) == 0) {
				fprintf(stderr, "rankctl: token '%s' exists; revoke it first\n",
					tid);
				return 1;
			}
		}
		if (n >= MAX_LINES) {
			fprintf(stderr, "rankctl: %s has too many lines\n", path);
			return 1;
		}
		uint8_t key[32];
		char secret[65], hash[65];
		if (rdb_random_key(key, sizeof(key))) {
			fprintf(stderr, "rankctl: no random numbers from GnuTLS\n");
			return 1;
		}
		for (size_t i = 0; i < sizeof(key); i++)
			snprintf(secret + 2 * i, 3, "%02x", key[i]);
		if (rdb_sha256_hex(secret, strlen(secret), hash)) {
			fprintf(stderr, "rankctl: SHA-256 failed\n");
			return 1;
		}
		snprintf(lines[n++], LINE_BYTES, "%s %s %s %s\n", tid, scopes, jobs, hash);
		int rc = write_lines(path, lines, n);
		if (rc) {
			fprintf(stderr, "rankctl: cannot write %s: %s\n", path, strerror(-rc));
			return 1;
		}
		printf("%s.%s\n", tid, secret);
		fprintf(stderr,
			"token '%s' added to %s; the line above is its secret, shown only "
			"this once\n",
			tid, path);
		return 0;
	}
	return token_usage();
}
