/* worker/worker_main.c — mlxr-worker: runs models for the broker.
 *
 * Started by `mlxr` (fork + exec of this sibling binary) with one end of a
 * socketpair(AF_UNIX, SOCK_SEQPACKET) on fd 3. Before it reads a byte from
 * that socket it applies its sandbox (policy/policy.h: namespaces, identity,
 * no_new_privs, rlimits, Landlock, seccomp, in that order); then it serves
 * requests (worker/serve.c) until the broker hangs up.
 *
 *   mlxr-worker [--role worker|importer] [--device auto|cpu|cuda] [--fast-prefill] [--no-sandbox]
 *
 * --device (worker role): auto (the default) runs on CUDA device 0 when
 * this binary was built with nvcc (MLXR_CUDA) and /dev/nvidiactl exists,
 * else on the CPU exactly as a build without CUDA does. A GPU worker locks
 * down in two steps (policy.h, POLICY_GPU_WORKER): every layer but seccomp
 * before cuInit, seccomp once the first LOAD is answered (weights on the
 * device). When cuInit fails under auto it runs on the CPU with the CPU
 * worker's seccomp filter under the GPU worker's Landlock rules.
 * --fast-prefill (worker role, no value): on CUDA, the prefill GEMMs and
 * attention run on f16 operands (session_cuda_fast_prefill), set right
 * after cuInit, before
 * LOAD's upload and warm-up and so before seccomp. A worker on the CPU
 * (--device cpu, or auto without a usable device) ignores it: the CPU's
 * GEMMs have no such variant, and auto must be free to fall back.
 *   mlxr-worker --tool            (a developer verb, worker/tool.h: the CPU
 *                                  worker's sandbox, one request, then exit)
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
#include "common/trace.h"
#include "kernels/kernels.h"
#include "policy/policy.h"
#include "worker/serve.h"
#include "worker/tool.h"
#ifdef MLXR_CUDA
#include "worker/session_cuda.h"

/* The GPU worker's last step (worker_after_load). */
static int gpu_lockdown(void)
{
	policy_report rep;
	char err[256];
	if (policy_seccomp_late(POLICY_GPU_WORKER, &rep, err, sizeof(err))) {
		fprintf(stderr, "mlxr-worker: sandbox: %s\n", err);
		return -1;
	}
	return 0;
}
#endif

#define IPC_FD 3

int main(int argc, char **argv)
{
	trace_mark("worker: main");
	policy_role role = POLICY_WORKER;
	const char *device = "auto";
	int fast_prefill = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--role") && i + 1 < argc && !strcmp(argv[i + 1], "importer"))
			role = POLICY_IMPORTER;
		if (!strcmp(argv[i], "--role") && i + 1 < argc && !strcmp(argv[i + 1], "gpu-worker"))
			role = POLICY_GPU_WORKER; /* --probe / --self-test only */
		if (!strcmp(argv[i], "--device") && i + 1 < argc)
			device = argv[i + 1];
		if (!strcmp(argv[i], "--fast-prefill"))
			fast_prefill = 1;
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
	if (strcmp(device, "auto") && strcmp(device, "cpu") && strcmp(device, "cuda")) {
		fprintf(stderr, "mlxr-worker: --device %s: expected auto, cpu or cuda\n", device);
		return 2;
	}
	if (argc >= 2 && !strcmp(argv[1], "--tool")) {
		if (policy_apply(POLICY_WORKER, &po, &rep, err, sizeof(err))) {
			fprintf(stderr, "mlxr-worker: sandbox: %s\n", err);
			return 1;
		}
		return worker_tool(IPC_FD);
	}
	/* Before any sandbox layer: the AMX tile state is asked of the kernel
	 * with arch_prctl, which the seccomp filter does not allow (kernels.h). */
	if (role != POLICY_IMPORTER)
		kernels_cpu_prepare();
	if (role == POLICY_GPU_WORKER)
		role = POLICY_WORKER;
#ifdef MLXR_CUDA
	if (role == POLICY_WORKER &&
	    (!strcmp(device, "cuda") || (!strcmp(device, "auto") && access("/dev/nvidiactl", F_OK) == 0))) {
		if (policy_apply(POLICY_GPU_WORKER, &po, &rep, err, sizeof(err))) {
			fprintf(stderr, "mlxr-worker: sandbox: %s\n", err);
			return 1;
		}
		if (session_cuda_init(err, sizeof(err)) == 0) {
			if (fast_prefill)
				session_cuda_fast_prefill();
			worker_gpu = &session_cuda;
			if (!po.no_sandbox)
				worker_after_load = gpu_lockdown;
			return worker_serve(IPC_FD, 0);
		}
		if (!strcmp(device, "cuda")) {
			fprintf(stderr, "mlxr-worker: --device cuda: %s\n", err);
			return 1;
		}
		/* auto: no usable device after all; the CPU, locked down now */
		if (!po.no_sandbox && policy_seccomp_late(POLICY_WORKER, &rep, err, sizeof(err))) {
			fprintf(stderr, "mlxr-worker: sandbox: %s\n", err);
			return 1;
		}
		return worker_serve(IPC_FD, 0);
	}
#else
	(void)fast_prefill; /* no GPU in this build: the CPU ignores it */
	if (!strcmp(device, "cuda")) {
		fprintf(stderr, "mlxr-worker: --device cuda: this mlxr-worker was built without CUDA (no nvcc at build time)\n");
		return 1;
	}
#endif
	if (policy_apply(role, &po, &rep, err, sizeof(err))) {
		fprintf(stderr, "mlxr-worker: sandbox: %s\n", err);
		return 1;
	}
	trace_mark("worker: sandboxed");
	return worker_serve(IPC_FD, role == POLICY_IMPORTER);
}
