/* ui_assets.h - the dashboard's files (ui/), compiled into rankdbd.
 *
 * The table is generated at build time by ui/embed.py (meson custom_target
 * "ui_assets" -> ui_assets.c) from the files under ui/. It is constant data:
 * read-only, shared by every HTTP thread without locking, never freed.
 */
#ifndef SRV_UI_ASSETS_H
#define SRV_UI_ASSETS_H

#include <stdbool.h>
#include <stddef.h>

struct srv_ui_asset {
	const char *name;	   /* path under /ui/: "index.html", "app.js", "app.<hash>.js" */
	const char *content_type;  /* with charset for text */
	const unsigned char *data; /* the file's bytes */
	size_t len;		   /* bytes of data */
	const unsigned char *gz;   /* gzip of data, or NULL when that is not smaller */
	size_t gz_len;		   /* bytes of gz (0 when gz is NULL) */
	const char *etag;	   /* strong ETag with its quotes: "\"<16 hex of sha256>\"" */
	const char *etag_gz;	   /* the gzip representation's: "\"<16 hex>-gz\"" */
	bool immutable;		   /* the name carries the content hash: cacheable forever */
};

/* Sorted by name (strcmp order), names unique. */
extern const struct srv_ui_asset srv_ui_assets[];
extern const size_t srv_ui_assets_count;

#endif
