/* fetcher/fetcher_main.c — mlxr-fetcher: the only mlxr process with network
 * access. It is started by `mlxr` (fork + exec, one end of a socketpair on
 * fd 3) and locks itself down before reading a byte from it. Its network
 * code arrives with `mlxr pull`. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	(void)argv;
	if (argc >= 1) {
		fprintf(stderr, "mlxr-fetcher: started by mlxr, not by hand\n");
		return 2;
	}
	return 0;
}
