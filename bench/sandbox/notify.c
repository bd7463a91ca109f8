/*
 * bench/sandbox/notify: what the sandbox costs a program, against the same
 * program run plainly (fork + execve) in the same run.
 *
 *   - a notified syscall (open of /dev/null, which the supervisor reads,
 *     resolves and allows) and an unnotified one (getppid, which only
 *     passes the BPF filter), in ns per call;
 *   - starting and reaping a program that exits at once, in ms.
 *
 * The program is this binary itself ("child N"), mounted read-only in the
 * sandbox. Each figure is the median of several runs; every line is also
 * printed as "RESULT sandbox <metric> <value>".
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "sandbox/sandbox.h"

#define REPS 5

static uint64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int child(long n)
{
	uint64_t t0 = now();
	for (long i = 0; i < n; i++) {
		int fd = open("/dev/null", O_RDONLY);
		if (fd < 0)
			return 1;
		close(fd);
	}
	uint64_t t1 = now();
	for (long i = 0; i < n * 10; i++)
		getppid();
	uint64_t t2 = now();
	printf("%.1f %.1f\n", n ? (double)(t1 - t0) / (double)n : 0.0,
	       n ? (double)(t2 - t1) / (double)(n * 10) : 0.0);
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp);
	return v[n / 2];
}

struct sample {
	double open_ns, getppid_ns, wall_ms;
};

static int read_result(int fd, struct sample *s)
{
	char buf[128];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return sscanf(buf, "%lf %lf", &s->open_ns, &s->getppid_ns) == 2 ? 0 : -1;
}

static int run_plain(const char *self, const char *count, struct sample *s)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	uint64_t t0 = now();
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		execl(self, self, "child", count, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	int st;
	waitpid(pid, &st, 0);
	s->wall_ms = (double)(now() - t0) / 1e6;
	int rc = read_result(p[0], s);
	close(p[0]);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? rc : -1;
}

static int run_sandboxed(enum apf_sandbox_mode mode, const char *dir,
			 const char *count, struct sample *s)
{
	char prog[PATH_MAX + 16];
	snprintf(prog, sizeof prog, "%s/notify",
		 mode == APF_SANDBOX_SEALED ? "/opt/bench" : dir);
	const char *argv[] = {prog, "child", count, NULL};
	struct apf_sandbox_mount mounts[] = {
		{"/usr", NULL, APF_SANDBOX_READ, 0, 0},
		{"/lib", NULL, APF_SANDBOX_READ, 0, 0},
		{"/lib64", NULL, APF_SANDBOX_READ, 1, 0},
		{dir, mode == APF_SANDBOX_SEALED ? "/opt/bench" : NULL,
		 APF_SANDBOX_READ, 0, 0},
	};
	int p[2];
	if (pipe(p) < 0)
		return -1;
	struct apf_sandbox_fd fds[] = {{p[1], 1}};
	struct apf_sandbox_config cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.mode = mode;
	cfg.argv = argv;
	cfg.mounts = mounts;
	cfg.nmounts = 4;
	cfg.fds = fds;
	cfg.nfds = 1;
	apf_sandbox *sb;
	uint64_t t0 = now();
	int rc = apf_sandbox_spawn(&sb, &cfg);
	close(p[1]);
	if (rc < 0) {
		fprintf(stderr, "apf: %s\n", apf_error_message());
		close(p[0]);
		return -1;
	}
	apf_sandbox_end end;
	rc = apf_sandbox_wait(sb, 60000, &end);
	s->wall_ms = (double)(now() - t0) / 1e6;
	if (rc == 1 && (end.outcome != APF_SANDBOX_EXITED || end.exit_code != 0)) {
		fprintf(stderr, "apf: bench sandbox: %s\n", end.reason);
		rc = -1;
	}
	apf_sandbox_free(sb);
	if (rc == 1)
		rc = read_result(p[0], s);
	else
		rc = -1;
	close(p[0]);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "child"))
		return child(atol(argv[2]));
	char self[PATH_MAX], dir[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return 1;
	self[n] = 0;
	snprintf(dir, sizeof dir, "%s", self);
	*strrchr(dir, '/') = 0;
	const char *count = getenv("APF_BENCH_SANDBOX_CALLS");
	if (!count)
		count = "20000";

	static const char *const names[] = {"plain", "sealed", "unsealed"};
	double open_ns[3][REPS], getppid_ns[3][REPS], spawn_ms[3][REPS];
	int ok[3] = {1, 1, 1};
	if (apf_sandbox_probe(APF_SANDBOX_SEALED) < 0) {
		printf("bench sandbox: sealed mode unavailable: %s\n",
		       apf_error_message());
		ok[1] = 0;
	}
	for (int r = 0; r < REPS; r++)
		for (int m = 0; m < 3; m++) {
			if (!ok[m])
				continue;
			struct sample s, z;
			int rc = m == 0 ? run_plain(self, count, &s)
				 : run_sandboxed(m == 1 ? APF_SANDBOX_SEALED
							: APF_SANDBOX_UNSEALED,
						 dir, count, &s);
			int rz = m == 0 ? run_plain(self, "0", &z)
				 : run_sandboxed(m == 1 ? APF_SANDBOX_SEALED
							: APF_SANDBOX_UNSEALED,
						 dir, "0", &z);
			if (rc < 0 || rz < 0) {
				fprintf(stderr, "apf: bench sandbox: %s run failed\n",
					names[m]);
				return 1;
			}
			open_ns[m][r] = s.open_ns;
			getppid_ns[m][r] = s.getppid_ns;
			spawn_ms[m][r] = z.wall_ms;
		}
	printf("bench sandbox: %s calls, median of %d runs\n", count, REPS);
	double o[3], g[3], w[3];
	for (int m = 0; m < 3; m++) {
		if (!ok[m])
			continue;
		o[m] = median(open_ns[m], REPS);
		g[m] = median(getppid_ns[m], REPS);
		w[m] = median(spawn_ms[m], REPS);
		printf("RESULT sandbox open_ns_%s %.0f\n", names[m], o[m]);
		printf("RESULT sandbox getppid_ns_%s %.1f\n", names[m], g[m]);
		printf("RESULT sandbox spawn_ms_%s %.2f\n", names[m], w[m]);
	}
	for (int m = 1; m < 3; m++) {
		if (!ok[m])
			continue;
		printf("RESULT sandbox open_ratio_%s_vs_plain %.1f\n", names[m],
		       o[m] / o[0]);
		printf("RESULT sandbox getppid_ratio_%s_vs_plain %.2f\n",
		       names[m], g[m] / g[0]);
		printf("RESULT sandbox spawn_ratio_%s_vs_plain %.1f\n", names[m],
		       w[m] / w[0]);
	}
	return 0;
}
