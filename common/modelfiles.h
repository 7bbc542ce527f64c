/* common/modelfiles.h — the small files of a model directory besides the
 * weights and config.json: tokenizer.json, tokenizer_config.json,
 * generation_config.json, chat_template.jinja. The broker reads them
 * (bounded), seals them into the manifest it hands the worker, and
 * validates them after sealing; the worker reads them from there. */
#ifndef MLXR_MODELFILES_H
#define MLXR_MODELFILES_H

#include <stddef.h>

/* Limits (reasons): tokenizer.json <= 256 MB (the largest real ones are
 * ~35 MB); tokenizer_config.json <= 32 MB (Gemma 3's is 1.2 MB);
 * generation_config.json <= 1 MB; chat_template.jinja <= 256 KB (official
 * templates are < 20 KB). */
#define MF_TOKENIZER_MAX ((size_t)256 << 20)
#define MF_TOKCONFIG_MAX ((size_t)32 << 20)
#define MF_GENCONFIG_MAX ((size_t)1 << 20)
#define MF_TEMPLATE_MAX ((size_t)256 << 10)

/* The files, in mf_files order: name, size limit, required. The broker's
 * manifest builder (broker/wclient.c) and mf_read share this table. */
typedef struct {
	const char *name;
	size_t cap;
	int required;
} mf_spec;
#define MF_COUNT 4
extern const mf_spec mf_specs[MF_COUNT];

/* err = "NAME: larger than N MB" (or "N KB" under a megabyte). */
void mf_too_large(const mf_spec *s, char *err, size_t errlen);

typedef struct {
	const char *p; /* NULL when the file is absent */
	size_t n;
} mf_buf;

typedef struct {
	mf_buf tokenizer, tok_config, gen_config, chat_template;
	char *owned[MF_COUNT]; /* what mf_read allocated */
} mf_files;

/* Reads a whole file of at most cap bytes into a malloc'd, NUL-terminated
 * buffer. 0 read; 1 absent or unreadable; -1 larger than cap or out of
 * memory. */
int mf_read_file(const char *path, size_t cap, char **out, size_t *len);

/* Reads the files of dir. tokenizer.json is required. 0, or -1 with err. */
int mf_read(const char *dir, mf_files *f, char *err, size_t errlen);
void mf_free(mf_files *f);

/* The MLX affine quantization the engine runs: bits 2, 3, 4, 5, 6 or 8 and
 * group size 32, 64 or 128 (1 if supported). One definition for the model
 * validator, the GGUF importer and `mlxr import`'s options. */
int mlx_quant_supported(int bits, int group_size);

#endif
