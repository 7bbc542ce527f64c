/* common/trace.c — see trace.h. */
#include "common/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void trace_mark(const char *step)
{
	static int on = -1; /* read once; the worker reads it before its sandbox */
	if (on < 0) {
		const char *e = getenv("MLXR_TRACE");
		on = e && !strcmp(e, "1");
	}
	if (!on)
		return;
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	fprintf(stderr, "mlxr-trace %.3f %s\n", (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6, step);
}
