/* tests/unit/test_json.c — the JSON parser accepts RFC 8259 and rejects
 * everything else with an offset and a reason; the writer escapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

static int fails;

static void bad(const char *in, const char *needle)
{
	json_doc d;
	char err[160] = "";
	if (json_parse(in, strlen(in), &d, err, sizeof(err)) == 0) {
		printf("FAIL accepted: %s\n", in);
		json_free(&d);
		fails++;
	} else if (!strstr(err, needle)) {
		printf("FAIL %s: error '%s' lacks '%s'\n", in, err, needle);
		fails++;
	}
}

static void good(const char *in)
{
	json_doc d;
	char err[160] = "";
	if (json_parse(in, strlen(in), &d, err, sizeof(err))) {
		printf("FAIL rejected %s: %s\n", in, err);
		fails++;
		return;
	}
	json_free(&d);
}

int main(void)
{
	json_doc d;
	char err[160];
	const char *s = "{\"a\": [1, -2.5e3, true, false, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\\u0000y\", \"i\": 9007199254740993}";
	if (json_parse(s, strlen(s), &d, err, sizeof(err))) {
		printf("FAIL parse: %s\n", err);
		return 1;
	}
	const json_value *a = json_get(d.root, "a");
	int64_t i = 0;
	const char *str = NULL;
	if (!a || a->n != 5 || json_at(a, 0)->i != 1 || !json_at(a, 0)->is_int || json_at(a, 1)->num != -2500.0 ||
	    json_at(a, 1)->is_int || json_at(a, 2)->type != JSON_TRUE || json_at(a, 4)->type != JSON_NULL ||
	    json_at(a, 5) != NULL) {
		printf("FAIL array values\n");
		fails++;
	}
	if (json_get_int(d.root, "i", &i) || i != 9007199254740993LL) {
		printf("FAIL int64 exactness\n");
		fails++;
	}
	const json_value *sv = json_get(d.root, "s");
	if (json_get_str(d.root, "s", &str) || sv->n != 10 || memcmp(str, "x\xc3\xa9\xf0\x9f\x98\x80\n\0y", 10)) {
		printf("FAIL string unescape (n=%u)\n", sv ? sv->n : 0);
		fails++;
	}
	if (json_get_int(d.root, "s", &i) != -1 || json_get_int(d.root, "nope", &i) != 1) {
		printf("FAIL typed lookup codes\n");
		fails++;
	}
	json_free(&d);
	good("0");
	good(" [ ] ");
	good("\"\"");
	good("{\"a\":{\"b\":{}}}");
	bad("", "unexpected end");
	bad("[1,]", "");
	bad("{\"a\":1,}", "expected object key");
	bad("01", "trailing");
	bad("1.", "bad fraction");
	bad("1e", "bad exponent");
	bad("+1", "bad number");
	bad("\"\\x\"", "bad escape");
	bad("\"\\ud800\"", "lone high surrogate");
	bad("\"\\udc00\"", "lone low surrogate");
	bad("\"\xc0\xaf\"", "invalid UTF-8");
	bad("\"\xed\xa0\x80\"", "invalid UTF-8");
	bad("\"a\nb\"", "control character");
	bad("{\"k\":1,\"k\":2}", "duplicate object key");
	bad("[1] [2]", "trailing");
	bad("tru", "bad literal");
	bad("\"abc", "unterminated string");
	/* Depth limit: 65 nested arrays. */
	char deep[200];
	memset(deep, '[', 65);
	memset(deep + 65, ']', 65);
	deep[130] = 0;
	bad(deep, "nesting deeper");
	memset(deep, '[', 64);
	memset(deep + 64, ']', 64);
	deep[128] = 0;
	good(deep);
	/* Writer round trip. */
	jw_buf w = { 0 };
	jw_cstr(&w, "{\"k\":");
	jw_str(&w, "q\"\\\n\x01\xc3\xa9", 7);
	jw_fmt(&w, ",\"n\":%d}", 42);
	if (jw_finish(&w) || json_parse(w.buf, w.len, &d, err, sizeof(err)) || json_get_str(d.root, "k", &str) ||
	    strcmp(str, "q\"\\\n\x01\xc3\xa9") || json_get_int(d.root, "n", &i) || i != 42) {
		printf("FAIL writer round trip: %s\n", w.buf);
		fails++;
	} else {
		json_free(&d);
	}
	jw_free(&w);
	if (fails) {
		printf("%d FAILED\n", fails);
		return 1;
	}
	printf("all json tests passed\n");
	return 0;
}
