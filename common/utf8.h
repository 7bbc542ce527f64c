/* common/utf8.h — the project's one UTF-8 decoder (RFC 3629), and the
 * cleaner that makes untrusted text safe to show on a terminal.
 *
 * Contract:
 *  - utf8_decode() reads one code point from (p, n) (n >= 1) and returns
 *    its byte length, or 0 when the bytes there are not well-formed UTF-8
 *    (RFC 3629 §4: no overlongs, no surrogates, nothing above U+10FFFF, no
 *    truncated sequence). It never reads past p + n.
 *  - utf8_valid() is 1 when all of p[0..n) is well-formed UTF-8 (n = 0:
 *    yes).
 *  - utf8_partial() is 1 when p[0..n) (1 <= n <= 3) is a proper prefix of
 *    a well-formed sequence: a character that the next bytes may complete.
 *  - utf8_clean() copies s[0..n) to out keeping well-formed characters and
 *    replacing, by one replacement each, every control character (C0
 *    U+0000..U+001F, DEL U+007F, C1 U+0080..U+009F: ECMA-48 reads C1 CSI
 *    U+009B like ESC '['), every bidirectional embedding, override and
 *    isolate (U+202A..U+202E, U+2066..U+2069: on a terminal that reorders
 *    text they show it in another order than it is, CVE-2021-42574), and
 *    every byte that does not start a well-formed character (invalid
 *    UTF-8: one replacement per byte). Flags:
 *      UTF8_KEEP_NL_TAB   keep '\n' and '\t';
 *      UTF8_KEEP_CONTROLS keep every control and bidi character
 *                         (validation only: the HTTP API's JSON writer
 *                         escapes the controls, and the text is the
 *                         model's);
 *      UTF8_REPL_FFFD     the replacement is U+FFFD (3 bytes), else '?'.
 *    With h == NULL the text is whole: an incomplete sequence at its end is
 *    invalid. With h, the text is one piece of a stream: an incomplete
 *    sequence at the end waits in *h (zeroed by the caller before the
 *    first piece) for the next piece, and h's bytes come first; the last
 *    call passes final = 1 to replace what is still held. out must hold
 *    UTF8_CLEAN_MAX(n) bytes ('?': (held + n) bytes at most, no NUL written).
 *    Returns the bytes written.
 */
#ifndef MLXR_UTF8_H
#define MLXR_UTF8_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
	unsigned char b[3];
	size_t n;
} utf8_hold;

enum { UTF8_KEEP_NL_TAB = 1, UTF8_KEEP_CONTROLS = 2, UTF8_REPL_FFFD = 4 };

/* Output bound of utf8_clean for n new bytes (3 held + n, each replaced
 * by U+FFFD at worst). */
#define UTF8_CLEAN_MAX(n) (3 * ((size_t)(n) + 3))

size_t utf8_decode(const unsigned char *p, size_t n, uint32_t *cp);
int utf8_valid(const void *p, size_t n);
int utf8_partial(const unsigned char *p, size_t n);
size_t utf8_clean(utf8_hold *h, const void *s, size_t n, int final, int flags, char *out);

#endif
