/* broker/main.c — the mlxr CLI: dispatches a verb to its cmd_* function. */
#include <stdio.h>
#include <string.h>

#include "broker/cmds.h"
#include "common/version.h"

struct verb {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
};

static const struct verb verbs[] = {
	{ "run", cmd_run, "run MODEL [PROMPT] [flags]   answer PROMPT, or chat when no prompt is given" },
	{ "list", cmd_list, "list                         models in the store and the Hugging Face cache" },
	{ "show", cmd_show, "show MODEL                   architecture, size, quantization (validates the files)" },
	{ "rm", cmd_rm, "rm MODEL [--yes]             delete a model from the store" },
	{ "bench", cmd_bench, "bench MODEL [--json]         prefill/decode speed against the memory-bandwidth bound" },
	{ "serve", cmd_serve, "serve MODEL [flags]          OpenAI-compatible HTTP API on loopback (mlxr serve --help)" },
	{ "pull", cmd_pull, "pull ORG/REPO [--revision REV]  download an MLX model from the Hugging Face Hub" },
	{ "search", cmd_search, "search [QUERY] [--sort downloads|likes|trending|recent] [--limit N]   MLX models on the Hub" },
	{ "import", cmd_import, "import FILE.gguf [NAME]   convert a GGUF file into an MLX model in the store" },
	{ "eval", cmd_eval, "eval MODEL --ids \"1 2 3\" [--logits F] [--decode] [--generate N]   (developer) raw ids through the engine" },
	{ "tokenize", cmd_tokenize, "tokenize MODEL TEXT [--ids] [--special] [--file F] [--decode \"1 2\"]   (developer) run the tokenizer" },
	{ "chat-render", cmd_chat_render, "chat-render TOKENIZER_CONFIG.json MESSAGES.json [--continue] [--no-think] [--mask]   (developer) print a rendered chat prompt" },
	{ "upgrade", cmd_upgrade, "upgrade [--check]            install the latest signed release (mlxr upgrade --help)" },
	{ "doctor", cmd_doctor, "doctor                       which sandbox layers this kernel gives each role" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: mlxr VERB [ARGS]\n\nverbs:\n");
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		fprintf(f, "  %s\n", verbs[i].help);
	fprintf(f, "\n  mlxr --version\n");
}

int main(int argc, char **argv)
{
	upgrade_recover_at_start(argv); /* finishes an interrupted upgrade (release/install.c) */
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
		printf("mlxr %s\n", mlxr_version);
		return 0;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (!strcmp(argv[1], verbs[i].name))
			return verbs[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "mlxr: unknown verb '%s' (mlxr --help lists them)\n", argv[1]);
	return 2;
}
