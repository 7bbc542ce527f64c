/* tests/unit/test_http.c — the HTTP request parser accepts what RFC 9112
 * allows and our policy wants, rejects the rest with the right status, and
 * the Host / Content-Type / Bearer helpers decide as documented. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/http.h"

static int fails;
static http_limits lim;

static http_parse_result parse(const char *s, http_request *r)
{
	return http_parse(s, strlen(s), &lim, r);
}

static void expect_status(const char *name, const char *s, int status)
{
	http_request r;
	http_parse_result pr = parse(s, &r);
	if (pr != HTTP_PARSE_ERROR || r.status != status) {
		printf("FAIL %s: result %d status %d (%s), want error %d\n", name, pr, r.status, r.why ? r.why : "",
		       status);
		fails++;
	}
}

static void expect_more(const char *name, const char *s)
{
	http_request r;
	if (parse(s, &r) != HTTP_PARSE_MORE) {
		printf("FAIL %s: not incomplete (%d %s)\n", name, r.status, r.why ? r.why : "");
		fails++;
	}
}

#define CHECK(cond)                                                 \
	do {                                                        \
		if (!(cond)) {                                      \
			printf("FAIL %s:%d %s\n", __FILE__, __LINE__, #cond); \
			fails++;                                    \
		}                                                   \
	} while (0)

static http_str S(const char *s)
{
	return (http_str){ s, strlen(s) };
}

static void test_accepts_a_normal_post(void)
{
	const char *s = "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: 127.0.0.1:11435\r\n"
			"Content-Type: application/json\r\nContent-Length: 2\r\nAuthorization:  Bearer k \r\n\r\n{}";
	http_request r;
	CHECK(parse(s, &r) == HTTP_PARSE_OK);
	CHECK(r.method == HTTP_M_POST);
	CHECK(r.path.n == 20 && !memcmp(r.path.p, "/v1/chat/completions", 20));
	CHECK(r.target.n == 24);
	CHECK(r.has_length && r.content_length == 2);
	CHECK(r.header_len == strlen(s) - 2);
	CHECK(r.keep_alive == 1 && r.minor == 1);
	CHECK(http_str_ieq(r.authorization, "Bearer k"));
	CHECK(r.n_headers == 4);
}

static void test_incomplete_until_the_empty_line(void)
{
	expect_more("empty", "");
	expect_more("partial line", "GET /hea");
	expect_more("no blank line", "GET / HTTP/1.1\r\nHost: localhost:1\r\n");
	http_request r;
	CHECK(parse("GET / HTTP/1.1\r\nHost: localhost:1\r\n\r\n", &r) == HTTP_PARSE_OK);
	CHECK(r.method == HTTP_M_GET && !r.has_length);
}

static void test_connection_header(void)
{
	http_request r;
	CHECK(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n", &r) == HTTP_PARSE_OK);
	CHECK(r.keep_alive == 0);
	CHECK(parse("GET / HTTP/1.0\r\n\r\n", &r) == HTTP_PARSE_OK);
	CHECK(r.keep_alive == 0);
	CHECK(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &r) == HTTP_PARSE_OK);
	CHECK(r.keep_alive == 1);
}

static void test_rejects_malformed_request_lines(void)
{
	expect_status("bare LF", "GET / HTTP/1.1\nHost: a\n\n", 400);
	expect_status("two spaces", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
	expect_status("absolute form", "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400);
	expect_status("asterisk", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", 400);
	expect_status("lowercase version", "GET / http/1.1\r\nHost: a\r\n\r\n", 400);
	expect_status("HTTP/2", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505);
	expect_status("no version", "GET /\r\n\r\n", 400);
	expect_status("garbage", "\x16\x03\x01\x02\x00\r\n\r\n", 400);
	expect_status("empty line first", "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
	expect_status("control in target", "GET /a\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400);
	expect_status("fragment", "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", 400);
	http_request r;
	CHECK(parse("BREW / HTTP/1.1\r\nHost: a\r\n\r\n", &r) == HTTP_PARSE_OK && r.method == HTTP_M_OTHER);
	CHECK(parse("get / HTTP/1.1\r\nHost: a\r\n\r\n", &r) == HTTP_PARSE_OK && r.method == HTTP_M_OTHER);
}

static void test_rejects_ambiguous_headers(void)
{
	expect_status("two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
	expect_status("no host", "GET / HTTP/1.1\r\n\r\n", 400);
	expect_status("obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n", 400);
	expect_status("space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400);
	expect_status("no colon", "GET / HTTP/1.1\r\nHost a\r\n\r\n", 400);
	expect_status("bare LF in headers", "GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n", 400);
	expect_status("bare CR in value", "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400);
	expect_status("DEL in value", "GET / HTTP/1.1\r\nHost: a\r\nX: \x7f\r\n\r\n", 400);
	{
		static const char nul[] = "GET / HTTP/1.1\r\nHost: a\r\nX: \0\r\n\r\n";
		http_request r;
		CHECK(http_parse(nul, sizeof(nul) - 1, &lim, &r) == HTTP_PARSE_ERROR && r.status == 400);
		CHECK(http_parse(nul, 29, &lim, &r) == HTTP_PARSE_ERROR && r.status == 400); /* before the end */
	}
	expect_status("two lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400);
	expect_status("signed length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", 400);
	expect_status("length list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\n", 400);
	expect_status("CL and TE", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		      400);
	expect_status("TE chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 411);
	expect_status("POST without length", "POST / HTTP/1.1\r\nHost: a\r\n\r\n", 411);
	expect_status("two origins", "GET / HTTP/1.1\r\nHost: a\r\nOrigin: x\r\nOrigin: y\r\n\r\n", 400);
	expect_status("two auth", "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: a\r\nauthorization: b\r\n\r\n", 400);
}

static void test_limits(void)
{
	char *big = malloc(64 * 1024);
	/* Request line over max_line: 414 as soon as the bytes are there. */
	strcpy(big, "GET /");
	memset(big + 5, 'a', 9000);
	big[9005] = 0;
	expect_status("long request line", big, 414);
	/* Header section over max_header_bytes without an end: 431. */
	strcpy(big, "GET / HTTP/1.1\r\nHost: a\r\nX: ");
	size_t n = strlen(big);
	memset(big + n, 'b', 17000);
	big[n + 17000] = 0;
	expect_status("long header", big, 431);
	/* 101 headers: 431. */
	strcpy(big, "GET / HTTP/1.1\r\nHost: a\r\n");
	for (int i = 0; i < 100; i++)
		strcat(big, "X-A: 1\r\n");
	strcat(big, "\r\n");
	expect_status("too many headers", big, 431);
	/* Body over max_body: 413 from the Content-Length alone. */
	expect_status("big body", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 8388609\r\n\r\n", 413);
	expect_status("huge length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999999\r\n\r\n", 413);
	http_request r;
	CHECK(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 8388608\r\n\r\n", &r) == HTTP_PARSE_OK);
	free(big);
}

static void test_host_check(void)
{
	CHECK(http_host_is_loopback(S("localhost:11435"), 11435));
	CHECK(http_host_is_loopback(S("LOCALHOST:11435"), 11435));
	CHECK(http_host_is_loopback(S("127.0.0.1:11435"), 11435));
	CHECK(http_host_is_loopback(S("127.1.2.3:11435"), 11435));
	CHECK(http_host_is_loopback(S("[::1]:11435"), 11435));
	CHECK(http_host_is_loopback(S("app.localhost:11435"), 11435));
	CHECK(http_host_is_loopback(S("localhost"), 80));
	CHECK(!http_host_is_loopback(S("localhost"), 11435));
	CHECK(!http_host_is_loopback(S("localhost:11436"), 11435));
	CHECK(!http_host_is_loopback(S("evil.example:11435"), 11435));
	CHECK(!http_host_is_loopback(S("localhost.evil.example:11435"), 11435));
	CHECK(!http_host_is_loopback(S("127.0.0.1.evil.example:11435"), 11435));
	CHECK(!http_host_is_loopback(S("127.0.0.01:11435"), 11435));
	CHECK(!http_host_is_loopback(S("128.0.0.1:11435"), 11435));
	CHECK(!http_host_is_loopback(S("10.0.0.1:11435"), 11435));
	CHECK(!http_host_is_loopback(S("[::2]:11435"), 11435));
	CHECK(!http_host_is_loopback(S(":11435"), 11435));
	CHECK(!http_host_is_loopback(S(""), 80));
	CHECK(!http_host_is_loopback(S("localhost:"), 80));
	CHECK(!http_host_is_loopback(S("localhost:99999"), 99999));
	CHECK(!http_host_is_loopback(S("a b.localhost:1"), 1));
}

static void test_content_type_and_bearer(void)
{
	CHECK(http_is_json_type(S("application/json")));
	CHECK(http_is_json_type(S("Application/JSON; charset=utf-8")));
	CHECK(!http_is_json_type(S("application/jsonx")));
	CHECK(!http_is_json_type(S("text/plain")));
	CHECK(!http_is_json_type(S("application/x-www-form-urlencoded")));
	http_str t;
	CHECK(http_bearer(S("Bearer abc"), &t) == 0 && t.n == 3 && !memcmp(t.p, "abc", 3));
	CHECK(http_bearer(S("bearer  abc"), &t) == 0 && t.n == 3);
	CHECK(http_bearer(S("Basic abc"), &t) == -1);
	CHECK(http_bearer(S("Bearer"), &t) == -1);
}

int main(void)
{
	http_limits_default(&lim);
	test_accepts_a_normal_post();
	test_incomplete_until_the_empty_line();
	test_connection_header();
	test_rejects_malformed_request_lines();
	test_rejects_ambiguous_headers();
	test_limits();
	test_host_check();
	test_content_type_and_bearer();
	if (fails) {
		printf("test_http: %d failures\n", fails);
		return 1;
	}
	printf("test_http: ok\n");
	return 0;
}
