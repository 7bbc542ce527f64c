/* broker/cmd_serve.c — `mlxr serve MODEL [flags]`: the OpenAI-compatible
 * HTTP API on loopback (broker/serve.h). Every limit has a flag; the
 * defaults are in serve_opts_default() and http_limits_default(). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "broker/cmds.h"
#include "broker/serve.h"
#include "broker/fclient.h"
#include "broker/store.h"
#include "broker/wclient.h"

static const char usage[] =
	"usage: mlxr serve MODEL [flags]\n"
	"  --port N              TCP port (11435; 0: any free port)\n"
	"  --host ADDR           one loopback address to bind (default 127.0.0.1 and ::1)\n"
	"  --lan                 bind a non-loopback address (0.0.0.0 and ::, or --host); needs an API key\n"
	"                        (one is generated and printed when none is given)\n"
	"  --api-key KEY         require Authorization: Bearer KEY (or $MLXR_API_KEY)\n"
	"  --allow-origin ORIGIN allow this browser Origin, exactly (repeatable; none by default)\n"
	"  --allow-host NAME     with --lan: accept this Host name too (repeatable)\n"
	"  --name ID             model id in the API (default: the MODEL name)\n"
	"  --ctx N               context tokens (4096, capped by the model)\n"
	"  --max-body BYTES      request body (8388608)\n"
	"  --max-header-bytes B  request line + headers (16384)\n"
	"  --max-headers N       header fields (100)\n"
	"  --max-line BYTES      request line (8192)\n"
	"  --max-connections N   open connections (64)\n"
	"  --max-queue N         model requests waiting (16); more: 429\n"
	"  --read-timeout S      a request's headers and body must arrive within S seconds (10)\n"
	"  --idle-timeout S      close idle keep-alive connections and stalled readers after S (60)\n"
	"  --deadline S          a request's total time, queue included (600)\n"
	"  --log-prompts         include request bodies in the request log (off: never)\n"
	"  --device D            auto (default), cpu or cuda (or $MLXR_DEVICE)\n"
	"  --fast-prefill        CUDA: prefill GEMMs and attention on f16 operands (or $MLXR_FAST_PREFILL=1)\n";

static int num(const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		return -1;
	*out = v;
	return 0;
}

int cmd_serve(int argc, char **argv)
{
	serve_opts o;
	serve_opts_default(&o);
	const char *model = NULL, *name = NULL;
	char genkey[80];
	int want_pull = pull_strip_flag(&argc, argv); /* --pull: fetch a missing org/repo without asking */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		double d;
		int takes = 1;
#define NUMFLAG(flag, lo, hi, dst)                                                             \
	else if (!strcmp(a, flag)) {                                                           \
		if (!v || num(v, lo, hi, &d)) {                                                \
			fprintf(stderr, "mlxr serve: %s needs a number in [%g, %g]\n", flag, \
				(double)(lo), (double)(hi));                                   \
			return 2;                                                              \
		}                                                                              \
		dst = d;                                                                       \
	}
		if (!strcmp(a, "--lan")) {
			o.lan = 1;
			takes = 0;
		} else if (!strcmp(a, "--log-prompts")) {
			o.log_prompts = 1;
			takes = 0;
		} else if (!strcmp(a, "--fast-prefill")) {
			wclient_set_fast_prefill();
			takes = 0;
		} else if (!strcmp(a, "--device") && v) {
			if (wclient_set_device(v)) {
				fprintf(stderr, "mlxr serve: --device %s: expected auto, cpu or cuda\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(usage, stdout);
			return 0;
		}
		NUMFLAG("--port", 0, 65535, o.port)
		NUMFLAG("--ctx", 16, 1 << 20, o.ctx)
		NUMFLAG("--max-body", 0, 1 << 30, o.lim.max_body)
		NUMFLAG("--max-header-bytes", 256, 1 << 20, o.lim.max_header_bytes)
		NUMFLAG("--max-headers", 4, HTTP_MAX_HEADERS, o.lim.max_headers)
		NUMFLAG("--max-line", 64, 1 << 20, o.lim.max_line)
		NUMFLAG("--max-connections", 1, 65536, o.max_conns)
		NUMFLAG("--max-queue", 0, 65536, o.max_queue)
		NUMFLAG("--read-timeout", 0.1, 86400, o.read_timeout)
		NUMFLAG("--idle-timeout", 0.1, 86400, o.idle_timeout)
		NUMFLAG("--deadline", 0.1, 864000, o.deadline)
		else if (!strcmp(a, "--host") && v) o.host = v;
		else if (!strcmp(a, "--api-key") && v) o.api_key = v;
		else if (!strcmp(a, "--name") && v) name = v;
		else if (!strcmp(a, "--allow-origin") && v) {
			if (o.n_origins == SERVE_MAX_LIST || !strcmp(v, "null") || strchr(v, '*') || !strstr(v, "://")) {
				fprintf(stderr, "mlxr serve: --allow-origin takes an exact origin such as "
						"http://localhost:3000 (no '*', no 'null'; at most %d)\n", SERVE_MAX_LIST);
				return 2;
			}
			o.origins[o.n_origins++] = v;
		} else if (!strcmp(a, "--allow-host") && v) {
			if (o.n_allow_hosts == SERVE_MAX_LIST) {
				fprintf(stderr, "mlxr serve: at most %d --allow-host\n", SERVE_MAX_LIST);
				return 2;
			}
			o.allow_hosts[o.n_allow_hosts++] = v;
		} else if (a[0] != '-' && !model) {
			model = a;
			takes = 0;
		} else {
			fprintf(stderr, "mlxr serve: unknown or incomplete flag '%s'\n%s", a, usage);
			return 2;
		}
#undef NUMFLAG
		i += takes;
	}
	if (!model) {
		fputs(usage, stderr);
		return 2;
	}
	if (!o.api_key) {
		const char *env = getenv("MLXR_API_KEY");
		if (env && *env)
			o.api_key = env;
	}
	if (o.api_key && !*o.api_key) {
		fprintf(stderr, "mlxr serve: the API key is empty\n");
		return 2;
	}
	if (o.lan && !o.api_key) {
		unsigned char r[24];
		if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
			fprintf(stderr, "mlxr serve: --lan needs an API key and none could be generated\n");
			return 1;
		}
		strcpy(genkey, "mlxr-");
		for (size_t k = 0; k < sizeof(r); k++)
			sprintf(genkey + 5 + 2 * k, "%02x", r[k]);
		o.api_key = genkey;
		fprintf(stderr, "mlxr serve: --lan without --api-key: generated API key %s\n", genkey);
	}
	char dir[PATH_MAX], err[1024];
	if (store_resolve(model, dir, sizeof(dir), err, sizeof(err)) &&
	    pull_offer(model, want_pull, dir, sizeof(dir), err, sizeof(err))) {
		fprintf(stderr, "mlxr serve: %s\n", err);
		return 1;
	}
	if (!name) {
		/* A path is named by its last component (the API need not
		 * learn where the model lives). */
		int is_path = model[0] == '/' || model[0] == '.';
		const char *slash = strrchr(model, '/');
		if (is_path) {
			size_t n = strlen(model);
			while (n > 1 && model[n - 1] == '/')
				n--;
			const char *b = model + n;
			while (b > model && b[-1] != '/')
				b--;
			static char base[256];
			snprintf(base, sizeof(base), "%.*s", (int)(model + n - b), b);
			name = base;
		} else {
			name = model;
		}
		(void)slash;
	}
	o.model_dir = dir;
	o.model_id = name;
	if (serve_run(&o, err, sizeof(err))) {
		fprintf(stderr, "mlxr serve: %s\n", err);
		return 1;
	}
	return 0;
}
