/*
 * usage.c: what the program has used of the machine's cores, read by the
 * supervisor from the kernel (sandbox.h, apf_sandbox_usage).
 *
 * CPU time is the kernel's process CPU clock of the program
 * (clock_getcpuclockid): every thread's time on a core, user and system,
 * those that have exited included, in nanoseconds. It is the whole of the
 * program's work: the program is the only process of the sandbox that runs
 * anything of the submission (init only reaps), and once the sandbox is
 * locked it can create neither a thread nor a process (notify.c), so no
 * work can be moved where this clock does not see it. What runs for it
 * elsewhere - the supervisor's answers to its notifications - trains
 * nothing.
 *
 * Run-queue wait is the sum over its live threads of the second field of
 * /proc/PID/task/TID/schedstat: the time each was runnable but not on a
 * core (the kernel's sched_info; 0 where the kernel keeps none). It says
 * whether the program got the cores it was given; a thread that exits takes
 * its count with it, so a difference of two readings is floored at 0.
 */
#include "sandbox/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t schedstat_wait(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	char buf[128];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	unsigned long long run = 0, wait = 0;
	return sscanf(buf, "%llu %llu", &run, &wait) == 2 ? wait : 0;
}

int apf_sandbox_cpu_ns(const apf_sandbox *sb, uint64_t *ns)
{
	pid_t pid = apf_sandbox_pid(sb);
	clockid_t cid;
	struct timespec ts;
	int err = pid > 0 ? clock_getcpuclockid(pid, &cid) : ESRCH;
	if (!err && clock_gettime(cid, &ts))
		err = errno;
	if (err)
		return apf_error_errno(APF_EIO, err, "sandbox",
				       "read the program's CPU clock");
	*ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	return 0;
}

int apf_sandbox_usage(const apf_sandbox *sb, struct apf_sandbox_usage *u)
{
	*u = (struct apf_sandbox_usage){0};
	int rc = apf_sandbox_cpu_ns(sb, &u->cpu_ns);
	if (rc)
		return rc;
	pid_t pid = apf_sandbox_pid(sb);
	char dir[64];
	snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return 0; /* gone, or no /proc: the wait stays unknown (0) */
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		char path[sizeof dir + sizeof e->d_name + 16];
		snprintf(path, sizeof path, "%s/%s/schedstat", dir, e->d_name);
		u->wait_ns += schedstat_wait(path);
	}
	closedir(d);
	return 0;
}
