/* fuzz/chat_check.h — the chat.h mask contract, checked on a rendering:
 * one mask byte per prompt byte, each 0 or 1; the prompt NUL-terminated
 * and valid UTF-8; and every maximal run of mask-0 bytes is a substring of
 * one message's text (message bytes are copied, never interpreted, and
 * template bytes are never marked as user text). */
#ifndef MLXR_FUZZ_CHAT_CHECK_H
#define MLXR_FUZZ_CHAT_CHECK_H

#include <string.h>

#include "fuzz/fuzz.h"
#include "fuzz/tok_check.h"
#include "worker/chat.h"

static inline void fz_chat_check(const chat_msg *msgs, size_t n, const char *out, const unsigned char *mask, size_t len)
{
	FUZZ_CHECK(out && mask && out[len] == 0, "rendering not NUL-terminated");
	FUZZ_CHECK(fz_utf8_ok((const unsigned char *)out, len), "rendering is not valid UTF-8");
	for (size_t i = 0; i < len;) {
		FUZZ_CHECK(mask[i] <= 1, "mask byte %u", mask[i]);
		if (mask[i]) {
			i++;
			continue;
		}
		size_t j = i;
		while (j < len && mask[j] == 0)
			j++;
		int found = 0;
		for (size_t k = 0; k < n && !found; k++)
			found = msgs[k].len >= j - i && memmem(msgs[k].text, msgs[k].len, out + i, j - i) != NULL;
		FUZZ_CHECK(found, "mask-0 bytes [%zu, %zu) are not from any message", i, j);
		i = j;
	}
}

#endif
