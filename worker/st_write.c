/* worker/st_write.c — safetensors writer: u64 little-endian header length,
 * the JSON header padded with spaces to a multiple of 8 (as the reference
 * implementation does), then the tensors back to back in header order. */
#include "worker/import.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/json.h"

static int write_all(int fd, const void *buf, uint64_t len)
{
	const uint8_t *p = buf;
	while (len) {
		size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
		ssize_t w = write(fd, p, chunk);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		len -= (uint64_t)w;
	}
	return 0;
}

int st_write(int fd, const st_out *t, size_t n, char *err, size_t errlen)
{
	jw_buf w = { 0 };
	uint64_t off = 0;
	jw_cstr(&w, "{\"__metadata__\":{\"format\":\"mlx\"}");
	for (size_t i = 0; i < n; i++) {
		jw_cstr(&w, ",");
		jw_str(&w, t[i].name, strlen(t[i].name));
		jw_fmt(&w, ":{\"dtype\":\"%s\",\"shape\":[", t[i].dtype);
		for (uint32_t d = 0; d < t[i].n_dims; d++)
			jw_fmt(&w, "%s%llu", d ? "," : "", (unsigned long long)t[i].shape[d]);
		jw_fmt(&w, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
		       (unsigned long long)(off + t[i].nbytes));
		off += t[i].nbytes;
	}
	jw_cstr(&w, "}");
	while (w.len % 8)
		jw_cstr(&w, " ");
	if (jw_finish(&w)) {
		snprintf(err, errlen, "out of memory writing the safetensors header");
		jw_free(&w);
		return -1;
	}
	uint8_t len8[8];
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)((uint64_t)w.len >> (8 * i));
	int rc = write_all(fd, len8, 8) || write_all(fd, w.buf, w.len);
	for (size_t i = 0; i < n && !rc; i++)
		rc = write_all(fd, t[i].data, t[i].nbytes);
	jw_free(&w);
	if (rc) {
		snprintf(err, errlen, "writing model.safetensors: %s", strerror(errno));
		return -1;
	}
	return 0;
}
