/* fuzz/tool_argv_fuzzer.c — the argv blob a `mlxr-worker --tool` request
 * carries (worker/tool.c tool_unpack): untrusted in the sense that the
 * worker must not trust the broker's framing blindly, and the one IPC
 * decoder ipc_fuzzer.c does not reach.
 *
 * Input: byte 0 gives the number of attached files (0..15), the rest is
 * the blob. Checked: no memory error, leak or UB on any input; an accepted
 * blob has 1..4096 NUL-terminated arguments without inner NULs, every
 * file's argument is one of argv[1..argc-1], and packing the result again
 * (as broker/cmd_tools.c does) gives the same bytes. */
#include <string.h>

#include "common/ipc.h"
#include "fuzz/fuzz.h"
#include "worker/tool.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int nfds = data[0] & 15;
	char **argv = NULL;
	int argc = 0;
	const char *arg_of_fd[16];
	int rc = tool_unpack(data + 1, size - 1, nfds, &argv, &argc, arg_of_fd);
	if (rc == 0) {
		FUZZ_CHECK(argv && argc >= 1 && argc <= 4096, "argc %d", argc);
		ipc_blob b;
		ipc_blob_init(&b, "fuzz");
		ipc_blob_u32(&b, (uint32_t)argc);
		for (int i = 0; i < argc; i++) {
			FUZZ_CHECK(argv[i] != NULL, "argv[%d] missing", i);
			ipc_blob_bytes(&b, argv[i], strlen(argv[i]));
		}
		ipc_blob_u32(&b, (uint32_t)nfds);
		for (int f = 0; f < nfds; f++) {
			int k = 1;
			while (k < argc && argv[k] != arg_of_fd[f])
				k++;
			FUZZ_CHECK(k < argc, "file %d names no argument after argv[0]", f);
			ipc_blob_u32(&b, (uint32_t)k);
		}
		FUZZ_CHECK(!b.bad && b.len == size - 1 && !memcmp(b.buf, data + 1, b.len), "repack differs");
		ipc_blob_free(&b);
	}
	tool_argv_free(argv, argc);
	return 0;
}
