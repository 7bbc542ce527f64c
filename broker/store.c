/* broker/store.c — mlxr's home, the model store, and name resolution.
 * See store.h for the lookup order. */
#include "broker/store.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int store_home(char *buf, size_t len)
{
	const char *h = getenv("MLXR_HOME");
	int n;
	if (h && *h) {
		n = snprintf(buf, len, "%s", h);
	} else if ((h = getenv("XDG_DATA_HOME")) && *h) {
		n = snprintf(buf, len, "%s/mlxr", h);
	} else {
		const char *home = getenv("HOME");
		n = snprintf(buf, len, "%s/.local/share/mlxr", home && *home ? home : "/");
	}
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int store_models_dir(char *buf, size_t len)
{
	char home[3072];
	if (store_home(home, sizeof(home)))
		return -1;
	int n = snprintf(buf, len, "%s/models", home);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

static int component_ok(const char *s, size_t n)
{
	/* Hugging Face repo names: letters, digits, '-', '_', '.'; at most 96
	 * characters; we also refuse a leading '.' so "..", "." and hidden
	 * names can never escape or hide in the store. */
	if (n == 0 || n > 96 || s[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return 0;
	}
	return 1;
}

int store_check_name(const char *name, char *err, size_t errlen)
{
	const char *slash = strchr(name, '/');
	if (!slash || strchr(slash + 1, '/') ||
	    !component_ok(name, (size_t)(slash - name)) || !component_ok(slash + 1, strlen(slash + 1))) {
		snprintf(err, errlen, "'%s' is not a model name of the form org/repo "
			 "(letters, digits, '-', '_', '.'; not starting with '.')", name);
		return -1;
	}
	return 0;
}

static int hf_cache_dir(char *buf, size_t len)
{
	const char *c = getenv("HF_HUB_CACHE");
	int n;
	if (c && *c)
		n = snprintf(buf, len, "%s", c);
	else if ((c = getenv("HF_HOME")) && *c)
		n = snprintf(buf, len, "%s/hub", c);
	else {
		const char *home = getenv("HOME");
		n = snprintf(buf, len, "%s/.cache/huggingface/hub", home && *home ? home : "/");
	}
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* models--org--repo/snapshots/<rev>: the rev refs/main names, else the only
 * snapshot present. */
static int hf_resolve(const char *name, char *dir, size_t dirlen)
{
	char cache[2048], base[3072], rev[256] = "";
	if (hf_cache_dir(cache, sizeof(cache)))
		return -1;
	const char *slash = strchr(name, '/');
	int n = snprintf(base, sizeof(base), "%s/models--%.*s--%s", cache, (int)(slash - name), name, slash + 1);
	if (n < 0 || (size_t)n >= sizeof(base))
		return -1;
	char refp[3200];
	snprintf(refp, sizeof(refp), "%s/refs/main", base);
	FILE *f = fopen(refp, "r");
	if (f) {
		if (fgets(rev, sizeof(rev), f))
			rev[strcspn(rev, "\r\n")] = 0;
		fclose(f);
		if (!component_ok(rev, strlen(rev)))
			rev[0] = 0;
	}
	if (!rev[0]) {
		char snaps[3200];
		snprintf(snaps, sizeof(snaps), "%s/snapshots", base);
		DIR *d = opendir(snaps);
		if (!d)
			return -1;
		struct dirent *e;
		int count = 0;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.' || !component_ok(e->d_name, strlen(e->d_name)))
				continue;
			count++;
			snprintf(rev, sizeof(rev), "%s", e->d_name);
		}
		closedir(d);
		if (count != 1)
			return -1;
	}
	n = snprintf(dir, dirlen, "%s/snapshots/%s", base, rev);
	if (n < 0 || (size_t)n >= dirlen || !is_dir(dir))
		return -1;
	return 0;
}

int store_resolve(const char *name, char *dir, size_t dirlen, char *err, size_t errlen)
{
	char tmp[4096];
	int n;
	/* 1. An explicit path. */
	if (name[0] == '/' || name[0] == '.' || is_dir(name)) {
		if (!is_dir(name)) {
			snprintf(err, errlen, "model directory '%s' does not exist", name);
			return -1;
		}
		n = snprintf(dir, dirlen, "%s", name);
		return n < 0 || (size_t)n >= dirlen ? -1 : 0;
	}
	if (store_check_name(name, err, errlen))
		return -1;
	/* 2. mlxr's store. */
	char models[3072];
	if (store_models_dir(models, sizeof(models)) == 0) {
		n = snprintf(tmp, sizeof(tmp), "%s/%s", models, name);
		if (n > 0 && (size_t)n < sizeof(tmp) && is_dir(tmp)) {
			n = snprintf(dir, dirlen, "%s", tmp);
			return n < 0 || (size_t)n >= dirlen ? -1 : 0;
		}
	}
	/* 3. The Hugging Face cache. */
	if (hf_resolve(name, dir, dirlen) == 0)
		return 0;
	char cache[2048] = "?";
	hf_cache_dir(cache, sizeof(cache));
	snprintf(err, errlen, "unknown model '%s': not in the store (%s) nor in the Hugging Face cache (%s); "
		 "`mlxr import FILE.gguf %s` adds one", name, models, cache, name);
	return -1;
}
