/* echo.h - input bytes quoted into an error message, printable: the one
 * writer behind the JSON parser's ijs_echo and the line protocol's
 * ilp_echo (ingest-internal). */
#ifndef ING_ECHO_H
#define ING_ECHO_H

#include <stddef.h>

/* Writes s (n bytes) into out as printable ASCII (bytes outside 0x20..0x7e
 * as \xHH): at most max_in bytes of s in at most max_out characters, then
 * "..." when not all of s was written, then a NUL. out has room for
 * max_out + 4 bytes. Returns out. Pure. */
const char *ing_echo(char *out, const char *s, size_t n, size_t max_in, size_t max_out);

#endif
