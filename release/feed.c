/* release/feed.c — the release feed: one GitHub release object, as
 * GET {MLXR_RELEASES_URL}/latest returns it. Untrusted: it only says where
 * to download; what is installed is decided by the signed SHA256SUMS. */
#include <stdio.h>
#include <string.h>

#include "common/json.h"
#include "release/release.h"

static void seterr(char *err, size_t errlen, const char *msg)
{
	if (errlen)
		snprintf(err, errlen, "release feed: %s", msg);
}

static int wanted(const char *name)
{
	if (!strcmp(name, RS_SUMS_NAME) || !strcmp(name, RS_SIG_NAME))
		return 1;
	for (int i = 0; i < RS_NFILES; i++)
		if (!strcmp(name, rs_files[i]))
			return 1;
	return 0;
}

/* Printable ASCII without space (a URL as it is sent on a request line). */
static int url_ok(const char *s, size_t n)
{
	if (n < 9 || n > RS_URL_MAX || strncmp(s, "https://", 8))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] >= 0x7f)
			return 0;
	return 1;
}

int rs_feed_parse(const char *buf, size_t len, rs_feed *f, char *err, size_t errlen)
{
	json_doc doc = { 0 };
	char jerr[128], msg[200];
	int rc = -1;
	memset(f, 0, sizeof *f);
	if (!buf || len > RS_FEED_MAX) {
		seterr(err, errlen, "document too long");
		return -1;
	}
	if (json_parse(buf, len, &doc, jerr, sizeof jerr) < 0) {
		snprintf(msg, sizeof msg, "not JSON (%s)", jerr);
		seterr(err, errlen, msg);
		return -1;
	}
	const json_value *root = doc.root;
	if (!root || root->type != JSON_OBJECT) {
		seterr(err, errlen, "not a JSON object");
		goto fail;
	}
	const json_value *tag = json_get(root, "tag_name");
	if (!tag || tag->type != JSON_STRING || tag->n == 0 || tag->n >= sizeof f->tag) {
		seterr(err, errlen, "no \"tag_name\" string (or longer than 63 bytes)");
		goto fail;
	}
	for (uint32_t i = 0; i < tag->n; i++)
		if (tag->str[i] <= ' ' || tag->str[i] >= 0x7f) {
			seterr(err, errlen, "\"tag_name\" is not printable ASCII");
			goto fail;
		}
	memcpy(f->tag, tag->str, tag->n);
	{
		const char *v = f->tag;
		size_t vn = tag->n;
		if (v[0] == 'v') {
			v++;
			vn--;
		}
		f->have_version = rs_version_parse(v, vn, &f->version) == 0;
	}
	const json_value *assets = json_get(root, "assets");
	if (!assets || assets->type != JSON_ARRAY) {
		seterr(err, errlen, "no \"assets\" array");
		goto fail;
	}
	for (uint32_t i = 0; i < assets->n; i++) {
		const json_value *a = json_at(assets, i);
		const json_value *name, *url;
		int64_t size;
		if (a->type != JSON_OBJECT) {
			seterr(err, errlen, "an asset is not an object");
			goto fail;
		}
		name = json_get(a, "name");
		if (!name || name->type != JSON_STRING) {
			seterr(err, errlen, "an asset without a \"name\" string");
			goto fail;
		}
		if (name->n > RS_NAME_MAX || strlen(name->str) != name->n || !wanted(name->str))
			continue; /* not one of ours: ignored */
		if (rs_feed_asset(f, name->str)) {
			snprintf(msg, sizeof msg, "asset '%s' listed twice", name->str);
			seterr(err, errlen, msg);
			goto fail;
		}
		url = json_get(a, "browser_download_url");
		if (!url || url->type != JSON_STRING || !url_ok(url->str, url->n) || strlen(url->str) != url->n) {
			snprintf(msg, sizeof msg, "asset '%s': \"browser_download_url\" is not an https URL", name->str);
			seterr(err, errlen, msg);
			goto fail;
		}
		if (json_get_int(a, "size", &size) != 0 || size < 0 || (uint64_t)size > RS_BINARY_MAX) {
			snprintf(msg, sizeof msg, "asset '%s': \"size\" missing or out of range", name->str);
			seterr(err, errlen, msg);
			goto fail;
		}
		rs_asset *o = &f->assets[f->nassets++]; /* <= RS_FEED_ASSETS: each wanted name once */
		memcpy(o->name, name->str, name->n + 1);
		memcpy(o->url, url->str, url->n + 1);
		o->size = (uint64_t)size;
	}
	rc = 0;
fail:
	json_free(&doc);
	return rc;
}

const rs_asset *rs_feed_asset(const rs_feed *f, const char *name)
{
	for (size_t i = 0; i < f->nassets; i++)
		if (!strcmp(f->assets[i].name, name))
			return &f->assets[i];
	return NULL;
}
