/* worker/worker_main.c — mlxr-worker: runs models for the broker. It is
 * started by `mlxr` (fork + exec, one end of a socketpair on fd 3), locks
 * itself down before reading a byte from it, then serves requests. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	(void)argv;
	if (argc >= 1) {
		fprintf(stderr, "mlxr-worker: started by mlxr, not by hand\n");
		return 2;
	}
	return 0;
}
