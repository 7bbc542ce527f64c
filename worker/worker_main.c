/* worker/worker_main.c — mlxr-worker: runs models for the broker.
 *
 * Started by `mlxr` (fork + exec of this sibling binary) with one end of a
 * socketpair(AF_UNIX, SOCK_SEQPACKET) on fd 3. Before it reads a byte from
 * that socket it applies its sandbox (policy/policy.h: namespaces, identity,
 * no_new_privs, rlimits, Landlock, seccomp, in that order); then it serves
 * requests (worker/serve.c) until the broker hangs up.
 *
 *   mlxr-worker [--role worker|importer] [--no-sandbox]
 *   mlxr-worker --self-test ...   (policy proofs, tests/py/test_sandbox.py)
 *   mlxr-worker --probe           (what `mlxr doctor` reports)
 *   mlxr-worker --ipc-fault-after N  (test only: a malformed answer to request N+1)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/ipc.h"
#include "policy/policy.h"
#include "worker/serve.h"

#define IPC_FD 3

int main(int argc, char **argv)
{
	policy_role role = POLICY_WORKER;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--role") && i + 1 < argc && !strcmp(argv[i + 1], "importer"))
			role = POLICY_IMPORTER;
		if (!strcmp(argv[i], "--ipc-fault-after") && i + 1 < argc)
			worker_fault_after = atoi(argv[i + 1]);
	}
	if (argc >= 2 && !strcmp(argv[1], "--self-test"))
		return policy_selftest(role, argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "--probe"))
		return policy_probe(role, argc, argv);
	int type = 0;
	socklen_t tl = sizeof(type);
	if (getsockopt(IPC_FD, SOL_SOCKET, SO_TYPE, &type, &tl) || type != SOCK_SEQPACKET) {
		fprintf(stderr, "mlxr-worker: started by mlxr, not by hand (fd 3 is not its socket)\n");
		return 2;
	}
	policy_opts po;
	policy_report rep;
	char err[256];
	memset(&po, 0, sizeof(po));
	policy_opts_from_args(&po, argc, argv);
	if (policy_apply(role, &po, &rep, err, sizeof(err))) {
		fprintf(stderr, "mlxr-worker: sandbox: %s\n", err);
		return 1;
	}
	return worker_serve(IPC_FD, role == POLICY_IMPORTER);
}
