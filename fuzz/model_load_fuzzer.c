/* fuzz/model_load_fuzzer.c — worker/model.c model_load(): a model
 * directory (config.json + model.safetensors) validated tensor by tensor
 * against its configuration, then one token through the forward pass.
 *
 * Input: u16 little-endian n, n bytes of config.json, the rest is
 * model.safetensors. Both files are written into a private directory on
 * tmpfs (/dev/shm, else $TMPDIR) for each input, because model_load reads
 * a directory: that is the production path, including st_open_dir's mmap.
 *
 * Checked beyond the sanitizers, on every accepted model: every bound
 * matrix's codes, scales and biases lie inside a shard's mapping with the
 * size its rows, cols, bits and group size imply, and one forward step of
 * token 0 reads only those bytes (ASan sees the rest) and gives finite or
 * infinite logits without touching memory it should not. */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz/fuzz.h"
#include "kernels/kernels.h"
#include "worker/model.h"

static char dir[256];

static void cleanup(void)
{
	char p[300];
	snprintf(p, sizeof(p), "%s/config.json", dir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/model.safetensors", dir);
	unlink(p);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	snprintf(dir, sizeof(dir), "%s/mlxr-fuzz-model-XXXXXX", base);
	if (!mkdtemp(dir))
		abort();
	atexit(cleanup);
	kpool_init(1);
	return 0;
}

static void put(const char *name, const uint8_t *p, size_t n)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		abort();
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w <= 0)
			abort();
		p += w;
		n -= (size_t)w;
	}
	close(fd);
}

static size_t kdt_size(kdtype t) { return t == KDT_F32 ? 4 : 2; }

static void inside(const model *m, const void *p, uint64_t n, const char *what)
{
	const uint8_t *b = p;
	for (int i = 0; i < m->st.nshards; i++) {
		const st_shard *s = &m->st.shards[i];
		if (b >= s->map && b <= s->map + s->size && n <= (uint64_t)(s->map + s->size - b))
			return;
	}
	FUZZ_CHECK(0, "%s: %llu bytes outside every shard", what, (unsigned long long)n);
}

static void check_matrix(const model *m, const kq_matrix *q, const char *what)
{
	if (!q->w) { /* absent in this architecture (phi3 k/v/up) */
		FUZZ_CHECK(q->rows == 0 || m->cfg.fused_qkv, "%s unbound", what);
		return;
	}
	uint64_t rc = (uint64_t)q->rows * (uint64_t)q->cols;
	FUZZ_CHECK(q->rows > 0 && q->cols > 0, "%s: %d x %d", what, q->rows, q->cols);
	if (!q->bits) {
		inside(m, q->w, rc * kdt_size(q->wdt), what);
		return;
	}
	FUZZ_CHECK(q->group_size && q->cols % q->group_size == 0, "%s: cols %d group %d", what, q->cols,
		   q->group_size);
	inside(m, q->w, rc * (uint64_t)q->bits / 8, what);
	inside(m, q->scales, rc / (uint64_t)q->group_size * kdt_size(q->sdt), what);
	inside(m, q->biases, rc / (uint64_t)q->group_size * kdt_size(q->sdt), what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t n = (size_t)data[0] | (size_t)data[1] << 8;
	if (n > size - 2)
		n = size - 2;
	put("config.json", data + 2, n);
	put("model.safetensors", data + 2 + n, size - 2 - n);
	model m;
	char err[1024] = "";
	if (model_load(&m, dir, err, sizeof(err)) != 0) {
		FUZZ_CHECK(err[0] != 0, "rejected without a message");
		return 0;
	}
	check_matrix(&m, &m.embed, "embed");
	check_matrix(&m, &m.lm_head, "lm_head");
	FUZZ_CHECK(m.embed.rows == m.cfg.vocab && m.embed.cols == m.cfg.hidden, "embed shape");
	for (int i = 0; i < m.cfg.n_layers; i++) {
		const layer_weights *L = &m.layers[i];
		check_matrix(&m, &L->q, "q");
		check_matrix(&m, &L->k, "k");
		check_matrix(&m, &L->v, "v");
		check_matrix(&m, &L->o, "o");
		check_matrix(&m, &L->gate, "gate");
		check_matrix(&m, &L->up, "up");
		check_matrix(&m, &L->down, "down");
		FUZZ_CHECK(L->attn_norm && L->ffn_norm, "layer %d norms", i);
	}
	/* One step of the forward pass when it is small (the input bounds the
	 * weights, not the activations: hidden and inter come from config). */
	if ((uint64_t)m.cfg.n_layers * (uint64_t)(m.cfg.hidden + m.cfg.inter + m.cfg.vocab) < (1u << 20)) {
		model_state s;
		if (model_state_init(&s, &m, 2, 1) == 0) {
			int tok = 0;
			FUZZ_CHECK(model_forward(&m, &s, &tok, 1, 0) == 0, "forward of token 0 failed");
			model_state_free(&s);
		}
	}
	model_free(&m);
	return 0;
}
