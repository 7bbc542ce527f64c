/* fetcher/fetcher_main.c — mlxr-fetcher: the only mlxr process with network
 * access. It is started by `mlxr` (fork + exec, one end of a socketpair on
 * fd 3) and locks itself down before reading a byte from it. Its network
 * code arrives with `mlxr pull`. */
#include <stdio.h>
#include <string.h>

#include "policy/policy.h"

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "--self-test"))
		return policy_selftest(POLICY_FETCHER, argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "--probe"))
		return policy_probe(POLICY_FETCHER, argc, argv);
	(void)argv;
	if (argc >= 1) {
		fprintf(stderr, "mlxr-fetcher: started by mlxr, not by hand\n");
		return 2;
	}
	return 0;
}
