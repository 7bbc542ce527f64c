/* tests/cuda/test_gpu_sandbox.c — the GPU worker's lockdown, in the order
 * mlxr-worker applies it (worker/worker_main.c, policy.h POLICY_GPU_WORKER):
 *
 *   0. the model directory is read and mapped first (the broker hands the
 *      real worker open descriptors; nothing is opened by path later), and
 *      a CPU session computes the greedy reference;
 *   1. policy_apply(POLICY_GPU_WORKER): namespaces, uid, no_new_privs,
 *      rlimits, Landlock (no seccomp yet);
 *   2. cuInit + context (session_cuda_init), weights upload, cache, warm-up
 *      (session_init with the CUDA backend);
 *   3. policy_seccomp_late(POLICY_GPU_WORKER), TSYNC;
 *   4. proofs: greedy generation on the device equals the CPU's (the
 *      device-side selection path), a sampled generation runs (logits copied
 *      back), the bandwidth measurement allocates; opening a file of the
 *      model directory, /etc/passwd, and creating a file fail; then a socket:
 *      the process must die by SIGSYS (the harness checks exit status 159)
 *      or see it fail.
 *
 *   test_gpu_sandbox MODEL_DIR [--learn]
 * --learn: step 3 installs the learn filter (every refusal traps, is
 * recorded and performed); the list of refused calls is printed at the end
 * (how the driver's additions in policy/seccomp.c were measured). Exits 2
 * without a device.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/modelfiles.h"
#include "kernels/cuda/kcuda.h"
#include "policy/policy.h"
#include "worker/session.h"
#include "worker/session_cuda.h"

#define GEN 48

static int fails;

static int emit_cb(void *arg, const char *t, size_t n)
{
	(void)arg;
	(void)t;
	(void)n;
	return 0;
}

/* Greedy ids after the prompt, EOS not special (exec_greedy's loop). */
static int greedy(session *s, const int *ids, int n, int *out)
{
	s->st.pos = 0;
	if (session_forward(s, ids, n, 0))
		return -1;
	for (int g = 0; g < GEN; g++) {
		out[g] = sampler_argmax(s->st.logits, s->m.cfg.vocab);
		if (g + 1 < GEN && session_forward(s, &out[g], 1, 0))
			return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_gpu_sandbox MODEL_DIR [--learn]\n");
		return 2;
	}
	int learn = argc > 2 && !strcmp(argv[2], "--learn");
	/* policy_apply needs a single thread (Landlock before ABI 8 binds
	 * only the caller's future threads): no CPU thread pool before it */
	setenv("MLXR_THREADS", "1", 1);
	char err[512];
	const char *dir = argv[1];
	if (access("/dev/nvidiactl", F_OK)) {
		printf("UNAVAILABLE: no /dev/nvidiactl\n");
		return 2;
	}
	/* 0. files first; the CPU reference */
	mf_files f;
	session cpu, gpu;
	memset(&cpu, 0, sizeof(cpu));
	memset(&gpu, 0, sizeof(gpu));
	if (session_open(&cpu, dir, 256, err, sizeof(err))) {
		printf("FAIL open %s: %s\n", dir, err);
		return 1;
	}
	int ids[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, ref[GEN], got[GEN];
	for (int i = 0; i < 8; i++)
		ids[i] %= cpu.m.cfg.vocab;
	if (greedy(&cpu, ids, 8, ref)) {
		printf("FAIL cpu greedy\n");
		return 1;
	}
	if (mf_read(dir, &f, err, sizeof(err)) || model_load(&gpu.m, dir, err, sizeof(err))) {
		printf("FAIL load %s: %s\n", dir, err);
		return 1;
	}
	/* 1. */
	policy_opts po;
	policy_report rep;
	char buf[4096];
	memset(&po, 0, sizeof(po));
	if (policy_apply(POLICY_GPU_WORKER, &po, &rep, err, sizeof(err))) {
		printf("FAIL policy_apply: %s\n", err);
		return 1;
	}
	/* 2. */
	if (session_cuda_init(err, sizeof(err))) {
		printf("FAIL cuInit under Landlock: %s\n", err);
		return 1;
	}
	gpu.gpu = &session_cuda;
	if (session_init(&gpu, &f, 256, err, sizeof(err))) {
		printf("FAIL session_init (GPU): %s\n", err);
		return 1;
	}
	/* 3. */
	if (learn ? policy_seccomp_learn(POLICY_GPU_WORKER, err, sizeof(err))
		  : policy_seccomp_late(POLICY_GPU_WORKER, &rep, err, sizeof(err))) {
		printf("FAIL seccomp: %s\n", err);
		return 1;
	}
	if (!learn && policy_report_format(&rep, buf, sizeof(buf)) > 0)
		printf("%s", buf);
	printf("device: %s\n", gpu.device);
	/* 4. generation under the full lockdown */
	if (greedy(&gpu, ids, 8, got)) {
		printf("FAIL gpu greedy (copy-back path)\n");
		fails++;
	} else {
		int same = !memcmp(ref, got, sizeof(ref));
		printf("%s greedy %d tokens, GPU (locked down) %s CPU\n", same ? "ok  " : "FAIL", GEN,
		       same ? "==" : "!=");
		fails += !same;
	}
	gen_params gp;
	gen_stats st;
	memset(&gp, 0, sizeof(gp));
	gp.max_tokens = GEN;
	sampler_neutral(&gp.sp);
	gp.sp.temperature = 0; /* device-side selection, two steps in flight */
	session_reset(&gpu);
	if (session_generate(&gpu, ids, 8, &gp, emit_cb, NULL, &st, err, sizeof(err)) || st.generated < 1) {
		printf("FAIL session_generate greedy: %s\n", err);
		fails++;
	} else {
		int same = st.generated == GEN || st.stop_reason == 0;
		for (size_t i = 0; i < st.generated && i < GEN; i++)
			same &= gpu.cache_ids[8 + i] == ref[i] || i + 1 == st.generated;
		printf("%s session_generate greedy on the device: %zu tokens, cache pos %d, matches CPU\n",
		       same ? "ok  " : "FAIL", st.generated, gpu.st.pos);
		fails += !same;
	}
	sampler_defaults(&gp.sp);
	gp.sp.seed = 7;
	session_reset(&gpu);
	if (session_generate(&gpu, ids, 8, &gp, emit_cb, NULL, &st, err, sizeof(err))) {
		printf("FAIL session_generate sampled: %s\n", err);
		fails++;
	} else {
		printf("ok   session_generate sampled (temp 0.8, top-k 40, top-p 0.9, rep 1.1): %zu tokens\n",
		       st.generated);
	}
	double bw = kc_read_bandwidth((size_t)1 << 30);
	printf("%s device read bandwidth after lockdown: %.0f GB/s\n", bw > 0 ? "ok  " : "FAIL", bw / 1e9);
	fails += bw <= 0;
	/* refusals */
	char path[4200];
	snprintf(path, sizeof(path), "%s/config.json", dir);
	int fd = open(path, O_RDONLY);
	printf("%s open(model config.json) -> %d (%s)\n", fd < 0 ? "ok  " : "FAIL", fd, fd < 0 ? strerror(errno) : "opened");
	fails += fd >= 0;
	fd = open("/etc/passwd", O_RDONLY);
	printf("%s open(/etc/passwd) -> %d (%s)\n", fd < 0 ? "ok  " : "FAIL", fd, fd < 0 ? strerror(errno) : "opened");
	fails += fd >= 0;
	fd = open("/tmp/mlxr-gpu-sandbox-probe", O_WRONLY | O_CREAT, 0600);
	printf("%s create(/tmp/...) -> %d (%s)\n", fd < 0 ? "ok  " : "FAIL", fd, fd < 0 ? strerror(errno) : "created");
	fails += fd >= 0;
	if (learn) {
		int n = policy_seccomp_learn_report(buf, sizeof(buf));
		printf("== calls the GPU filter would refuse (%d bytes)\n%s", n, buf);
		return fails ? 1 : 0;
	}
	printf("%s (socket next: the process must die by SIGSYS)\n", fails ? "FAILURES" : "ALL OK");
	fflush(stdout);
	int so = socket(AF_INET, SOCK_STREAM, 0);
	printf("%s socket(AF_INET) -> %d (%s)\n", so < 0 ? "ok  " : "FAIL", so, so < 0 ? strerror(errno) : "created");
	return fails || so >= 0 ? 1 : 0;
}
