/* echo.c - input bytes quoted into an error message (echo.h). Pure. */
#include "ingest/echo.h"

#include <stdbool.h>
#include <string.h>

const char *ing_echo(char *out, const char *s, size_t n, size_t max_in, size_t max_out)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0, i = 0;
	for (; i < n && i < max_in; i++) {
		unsigned char c = (unsigned char)s[i];
		bool plain = c >= 0x20 && c < 0x7f;
		if (o + (plain ? 1 : 4) > max_out)
			break;
		if (plain) {
			out[o++] = (char)c;
			continue;
		}
		out[o++] = '\\';
		out[o++] = 'x';
		out[o++] = hex[c >> 4];
		out[o++] = hex[c & 15];
	}
	if (i < n) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = 0;
	return out;
}
