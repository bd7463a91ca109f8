/*
 * spawn.c: the supervisor's side of a sandbox: starting it, watching it,
 * stopping and continuing it, and saying how it ended.
 *
 * The children (child.c) get a plan made here beforehand (plan.c); the
 * supervisor clone3()s the first of them, waits for the program's filter
 * listener (or the name and errno of the step that failed), and from then
 * on answers the filter's notifications (notify.c) until it reaps the
 * sandbox and classifies its end. spawn.c calls down to child.c, plan.c,
 * policy.c, memory.c and output.c; none of them calls it.
 */
#include "sandbox/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <grp.h>
#include <time.h>
#include <unistd.h>

#define SETUP_TIMEOUT_MS 30000

/* The flag that admits apf's sandbox in a container: the runtime's default
 * seccomp profile plus what the sandbox needs, shipped in the source tree's
 * containers/ and installed beside the workloads. */
#define RUN_WITH "run the container with "
#define SECCOMP_FLAG                                                         \
	"--security-opt seccomp=seccomp.json, apf's profile (containers/ in "  \
	"its source, share/apf/ where it is installed)"

/* Whether this process runs in a chroot, where the kernel refuses a user
 * namespace (its root is not its mount namespace's). mountinfo lists mount
 * points relative to the process's root and leaves out those it cannot
 * reach, so from a chroot into a plain directory no mount is at "/". (A
 * chroot into a mount point of its own is not seen: no hint, then.) */
static int chrooted(void)
{
	char *info = NULL;
	size_t n;
	if (apf_file_read(&info, &n, "/proc/self/mountinfo", 1u << 22))
		return 0;
	int root_seen = 0;
	for (char *line = info; line && *line && !root_seen;) {
		char *end = strchr(line, '\n');
		if (end)
			*end = 0;
		/* id parent major:minor root MOUNT-POINT ... */
		char *f = line;
		for (int i = 0; i < 4 && f; i++) {
			f = strchr(f, ' ');
			if (f)
				f++;
		}
		root_seen = f && f[0] == '/' && f[1] == ' ';
		line = end ? end + 1 : NULL;
	}
	free(info);
	return !root_seen;
}

/* Why the kernel may refuse the namespaces, from the knobs that usually
 * decide it. */
static const char *userns_hint(int clone_errno)
{
	char *v = NULL;
	size_t n;
	const char *hint = "";
	if (apf_file_read(&v, &n, "/proc/sys/kernel/unprivileged_userns_clone",
			  16) == 0 && v[0] == '0')
		hint = " (kernel.unprivileged_userns_clone is 0)";
	free(v);
	v = NULL;
	if (!hint[0] && apf_file_read(&v, &n,
				      "/proc/sys/user/max_user_namespaces",
				      32) == 0 && v[0] == '0')
		hint = " (user.max_user_namespaces is 0)";
	free(v);
	v = NULL;
	if (!hint[0] &&
	    apf_file_read(&v, &n,
			  "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
			  16) == 0 && v[0] == '1')
		hint = " (kernel.apparmor_restrict_unprivileged_userns is 1)";
	free(v);
	if (!hint[0] && clone_errno == EPERM && chrooted())
		hint = " (apf runs in a chroot, where the kernel refuses user "
		       "namespaces: run it in a container or on the machine)";
	if (!hint[0] && clone_errno == EPERM)
		hint = " (a container's seccomp profile may forbid it: " RUN_WITH
		       SECCOMP_FLAG ")";
	return hint;
}

/* What a container must be started with for the set-up step that failed:
 * the two refusals a container runtime's defaults make (containers/README.md
 * says why apf needs each). */
static const char *setup_hint(int step, int err)
{
	if (step == STEP_MOUNT_PROC)
		return " (in a container, a /proc with masked parts forbids a "
		       "fresh one: " RUN_WITH "--security-opt unmask=/proc/* "
		       "(podman) or --security-opt systempaths=unconfined "
		       "(docker))";
	if (step == STEP_SETHOSTNAME && err == EPERM)
		return " (a container's default seccomp profile forbids it: "
		       RUN_WITH SECCOMP_FLAG ")";
	return "";
}

static int notif_buffers(apf_sandbox *sb)
{
	struct seccomp_notif_sizes sz;
	if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz) < 0)
		return apf_error_errno(APF_EABORT, errno, "sandbox",
				       "seccomp user notification");
	sb->req_size = sz.seccomp_notif > sizeof(struct seccomp_notif)
		? sz.seccomp_notif : sizeof(struct seccomp_notif);
	sb->resp_size = sz.seccomp_notif_resp > sizeof(struct seccomp_notif_resp)
		? sz.seccomp_notif_resp : sizeof(struct seccomp_notif_resp);
	sb->req = calloc(1, sb->req_size);
	sb->resp = calloc(1, sb->resp_size);
	return sb->req && sb->resp ? 0
				   : apf_error(APF_ENOMEM, "sandbox",
					       "out of memory");
}

/* Receives one message; *fd gets a passed descriptor, *pid the sender.
 * Returns 1, 0 at end of stream (or nothing there when nonblocking), or
 * -errno. */
static int recv_msg(int chan, struct msg *m, int *fd, pid_t *pid, int flags)
{
	struct iovec iov = {m, sizeof *m};
	union {
		char buf[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	memset(m, 0, sizeof *m);
	ssize_t n;
	do
		n = recvmsg(chan, &mh, MSG_CMSG_CLOEXEC | flags);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN ? 0 : -errno;
	if (n == 0)
		return 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET)
			continue;
		if (c->cmsg_type == SCM_RIGHTS && fd) {
			memcpy(fd, CMSG_DATA(c), sizeof *fd);
		} else if (c->cmsg_type == SCM_RIGHTS) {
			int extra;
			memcpy(&extra, CMSG_DATA(c), sizeof extra);
			close(extra);
		} else if (c->cmsg_type == SCM_CREDENTIALS && pid) {
			struct ucred cr;
			memcpy(&cr, CMSG_DATA(c), sizeof cr);
			*pid = cr.pid;
		}
	}
	if (n != (ssize_t)sizeof *m)
		return -EPROTO;
	m->text[sizeof m->text - 1] = 0;
	return 1;
}

static void note_message(apf_sandbox *sb, const struct msg *m)
{
	if (m->type == MSG_ERROR && !sb->setup_error[0]) {
		snprintf(sb->setup_error, sizeof sb->setup_error, "%s: %s",
			 m->text, strerror(m->err));
		sb->setup_step = m->step;
		sb->setup_errno = m->err;
	} else if (m->type == MSG_EXIT) {
		sb->have_status = 1;
		sb->status = m->status;
		sb->ru = m->ru;
	}
}

static void drain_messages(apf_sandbox *sb)
{
	struct msg m;
	while (recv_msg(sb->chan, &m, NULL, NULL, MSG_DONTWAIT) == 1)
		note_message(sb, &m);
}

static apf_sandbox *sandbox_alloc(void)
{
	apf_sandbox *sb = apf_calloc(1, sizeof *sb);
	if (!sb)
		return NULL;
	sb->child = sb->pid = -1;
	sb->child_pidfd = sb->pidfd = sb->notify_fd = sb->chan = -1;
	sb->out_rfd = sb->out_log = -1;
	return sb;
}

/* Everything before the clone: the policy's defaults, the memory limit,
 * the plan, the notification buffers, the socketpair (sv), and for a
 * sealed sandbox with a cgroup its cgroup.procs (p->cg_fd). On failure
 * nothing is left open but sb and the plan, which the caller frees. */
static int spawn_prepare(apf_sandbox *sb, const struct apf_sandbox_config *cfg,
			 int probe, struct plan *p, int sv[2])
{
	int rc = apf_sandbox_policy_defaults(sb);
	if (rc == 0)
		rc = apf_sandbox_memory_setup(sb, cfg->limits.memory);
	if (rc == 0)
		rc = apf_sandbox_plan_build(p, cfg, sb);
	else
		memset(p, 0, sizeof *p);
	p->probe = probe;
	if (rc == 0)
		rc = notif_buffers(sb);
	if (rc == 0 && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		rc = apf_error_errno(APF_EIO, errno, "sandbox", "socketpair");
	int one = 1;
	if (rc == 0 && setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one) < 0)
		rc = apf_error_errno(APF_EIO, errno, "sandbox", "SO_PASSCRED");
	if (rc == 0 && cfg->mode == APF_SANDBOX_SEALED && sb->cgroup) {
		char *procs = NULL;
		if (asprintf(&procs, "%s/cgroup.procs", sb->cgroup) < 0)
			procs = NULL;
		p->cg_fd = procs ? open(procs, O_WRONLY | O_CLOEXEC) : -1;
		if (p->cg_fd < 0)
			rc = apf_error_errno(APF_EABORT, procs ? errno : ENOMEM,
					     "sandbox", "memory cgroup: %s",
					     procs ? procs : "out of memory");
		free(procs);
	}
	if (rc < 0 && sv[0] >= 0) {
		close(sv[0]);
		close(sv[1]);
		sv[0] = sv[1] = -1;
	}
	return rc;
}

/* After the set-up channel said something, or nothing in time (r: 1, a
 * message m; -ETIMEDOUT; another -errno): the program with its listener
 * (lfd, prog) is taken on; anything else is the sandbox's failure to set
 * up, reaped and explained. */
static int spawn_await(apf_sandbox *sb, const struct apf_sandbox_config *cfg,
		       int r, const struct msg *m, int lfd, pid_t prog,
		       int pidfd)
{
	int rc = 0;
	if (r == 1 && m->type == MSG_LISTENER && lfd >= 0 && prog > 0) {
		sb->notify_fd = lfd;
		sb->pid = prog;
		sb->pidfd = cfg->mode == APF_SANDBOX_SEALED
			? pidfd_open(prog, 0) : dup(pidfd);
		if (sb->pidfd < 0) {
			rc = apf_error_errno(APF_EABORT, errno, "sandbox",
					     "pidfd of the program");
		} else if (cfg->mode == APF_SANDBOX_SEALED) {
			char path[64];
			struct stat st;
			snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)prog);
			if (stat(path, &st) < 0)
				rc = apf_error_errno(APF_EABORT, errno, "sandbox",
						     "%s", path);
			sb->pidns_dev = st.st_dev;
			sb->pidns_ino = st.st_ino;
		}
		/* Its execve waits for our answer: nothing has run yet that
		 * the cgroup should have counted. */
		if (rc == 0)
			rc = apf_sandbox_memory_enter(sb, prog);
		return rc;
	}
	if (lfd >= 0)
		close(lfd);
	if (r == 1)
		note_message(sb, m);
	/* The sandbox failed before its filter was in place: nothing can be
	 * waiting for a notification, so a blocking reap cannot hang. */
	siginfo_t si;
	memset(&si, 0, sizeof si);
	while (waitid(P_PIDFD, (id_t)sb->child_pidfd, &si, WEXITED) < 0 &&
	       errno == EINTR)
		;
	drain_messages(sb);
	sb->ended = 1;
	if (sb->setup_error[0])
		return apf_error(APF_EABORT, "sandbox", "%s%s", sb->setup_error,
				 setup_hint(sb->setup_step, sb->setup_errno));
	if (r == -ETIMEDOUT)
		return apf_error(APF_EABORT, "sandbox",
				 "setting up took more than %d s",
				 SETUP_TIMEOUT_MS / 1000);
	if (r < 0)
		return apf_error(APF_EABORT, "sandbox", "setup channel: %s",
				 strerror(-r));
	return apf_error(APF_EABORT, "sandbox",
			 "the sandbox ended during setup (%s %d)",
			 si.si_code == CLD_EXITED ? "exit status" : "signal",
			 si.si_status);
}

static int spawn(apf_sandbox **out, const struct apf_sandbox_config *cfg,
		 int probe)
{
	*out = NULL;
	apf_sandbox *sb = sandbox_alloc();
	if (!sb)
		return apf_error(APF_ENOMEM, "sandbox", "out of memory");
	sb->mode = cfg->mode;
	struct plan p;
	int sv[2] = {-1, -1};
	int rc = spawn_prepare(sb, cfg, probe, &p, sv);
	if (rc < 0) {
		apf_sandbox_plan_free(&p);
		apf_sandbox_free(sb);
		return rc;
	}
	p.chan = sv[1];
	uint64_t flags = 0;
	if (cfg->mode == APF_SANDBOX_SEALED)
		flags = (p.userns ? CLONE_NEWUSER : 0) | CLONE_NEWNS |
			CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET;
	sb->t_start = apf_now_ns();
	int pidfd = -1;
	pid_t pid = apf_sandbox_clone(flags, &pidfd);
	if (pid == 0) {
		close(sv[0]);
		if (cfg->mode == APF_SANDBOX_SEALED)
			apf_sandbox_init_main(&p);
		apf_sandbox_program_main(&p);
	}
	int clone_errno = errno;
	close(sv[1]);
	if (p.cg_fd >= 0)
		close(p.cg_fd);
	sb->chan = sv[0];
	apf_sandbox_plan_free(&p);
	if (pid < 0) {
		apf_sandbox_free(sb);
		if (cfg->mode == APF_SANDBOX_SEALED)
			return apf_error(APF_EABORT, "sandbox",
					 "cannot create namespaces: clone3: %s%s",
					 strerror(clone_errno),
					 userns_hint(clone_errno));
		return apf_error_errno(APF_EABORT, clone_errno, "sandbox", "clone3");
	}
	sb->child = pid;
	sb->child_pidfd = pidfd;

	struct msg m;
	memset(&m, 0, sizeof m);
	int lfd = -1;
	pid_t prog = -1;
	/* Setting up takes milliseconds; a child stuck for long (a mount
	 * source on a dead network file system) is killed, not waited for. */
	struct pollfd pf = {sb->chan, POLLIN, 0};
	int r;
	do
		r = poll(&pf, 1, SETUP_TIMEOUT_MS);
	while (r < 0 && errno == EINTR);
	if (r == 0) {
		apf_sandbox_kill_now(sb);
		r = -ETIMEDOUT;
	} else {
		r = recv_msg(sb->chan, &m, &lfd, &prog, 0);
	}
	rc = spawn_await(sb, cfg, r, &m, lfd, prog, pidfd);
	if (rc == 0) {
		*out = sb;
		return 0;
	}
	apf_sandbox_free(sb);
	return rc;
}

int apf_sandbox_spawn(apf_sandbox **out, const struct apf_sandbox_config *cfg)
{
	if (!out || !cfg)
		return apf_error(APF_EINPUT, "sandbox", "no configuration");
	return spawn(out, cfg, 0);
}

int apf_sandbox_probe(enum apf_sandbox_mode mode)
{
	static const char *const argv[] = {"/probe", NULL};
	struct apf_sandbox_config cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.mode = mode;
	cfg.argv = argv;
	apf_sandbox *sb;
	int rc = spawn(&sb, &cfg, 1);
	if (rc < 0)
		return rc;
	apf_sandbox_end end;
	rc = apf_sandbox_wait(sb, 10000, &end);
	char refusal[APF_SANDBOX_TEXT_MAX];
	memcpy(refusal, sb->refusal, sizeof refusal);
	apf_sandbox_free(sb);
	if (rc == 0)
		return apf_error(APF_EABORT, "sandbox",
				 "the probe did not finish within 10 s");
	if (rc < 0)
		return rc;
	/* The probe's one notified call fails only if the supervisor could
	 * not read the program's memory: say so. */
	if (end.outcome != APF_SANDBOX_EXITED || end.exit_code != 0)
		return apf_error(APF_EABORT, "sandbox", "probe: %s%s%s%s",
				 end.reason, refusal[0] ? " (" : "", refusal,
				 refusal[0] ? ")" : "");
	return 0;
}

pid_t apf_sandbox_pid(const apf_sandbox *sb)
{
	return sb->pid;
}

int apf_sandbox_pidfd(const apf_sandbox *sb)
{
	return sb->pidfd;
}

int apf_sandbox_notify_fd(const apf_sandbox *sb)
{
	return sb->notify_fd;
}

int apf_sandbox_exit_fd(const apf_sandbox *sb)
{
	return sb->child_pidfd;
}

const char *apf_sandbox_fault(const apf_sandbox *sb)
{
	return sb->faulted ? sb->fault : NULL;
}

enum apf_sandbox_phase apf_sandbox_phase(const apf_sandbox *sb)
{
	return sb->phase;
}



int apf_sandbox_kill(apf_sandbox *sb)
{
	if (sb->ended)
		return 0;
	sb->killed = 1;
	apf_sandbox_kill_now(sb);
	return 0;
}

/* The state letter of /proc/<pid>/task/<tid>/stat, after the command name
 * (which may itself hold spaces and parentheses). */
static char task_state(pid_t pid, long tid)
{
	char path[96], buf[512];
	snprintf(path, sizeof path, "/proc/%d/task/%ld/stat", (int)pid, tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 'X';
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 'X';
	buf[n] = 0;
	char *paren = strrchr(buf, ')');
	return paren && paren[1] == ' ' ? paren[2] : '?';
}

/* 1 when every thread of pid is stopped (or gone), 0 if not yet, -errno. */
static int all_stopped(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return errno == ENOENT ? 1 : -errno;
	int stopped = 1;
	struct dirent *de;
	while (stopped && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char s = task_state(pid, strtol(de->d_name, NULL, 10));
		stopped = s == 'T' || s == 't' || s == 'X' || s == 'Z';
	}
	closedir(d);
	return stopped;
}


int apf_sandbox_stop(apf_sandbox *sb)
{
	if (sb->ended || sb->pidfd < 0)
		return apf_error(APF_EINPUT, "sandbox", "stop: it has ended");
	if (pidfd_send_signal(sb->pidfd, SIGSTOP, NULL, 0) < 0)
		return apf_error_errno(APF_EABORT, errno, "sandbox", "SIGSTOP");
	sb->stopped = 1;
	/* SIGSTOP is delivered thread by thread; the trial is frozen only when
	 * the last one has stopped. Two seconds covers a thread finishing an
	 * uninterruptible wait. */
	uint64_t deadline = apf_now_ns() + 2000000000ull;
	for (long ns = 20000;; ns = ns < 2000000 ? ns * 2 : ns) {
		int r = all_stopped(sb->pid);
		if (r < 0)
			return apf_error_errno(APF_EIO, -r, "sandbox",
					       "reading the program's threads");
		if (r == 1)
			break;
		if (apf_now_ns() > deadline)
			return apf_error(APF_EABORT, "sandbox",
					 "the program did not stop within 2 s");
		struct timespec ts = {0, ns};
		nanosleep(&ts, NULL);
	}
	apf_sandbox_snapshot_vm(sb);
	return 0;
}

int apf_sandbox_cont(apf_sandbox *sb)
{
	if (sb->ended || sb->pidfd < 0)
		return apf_error(APF_EINPUT, "sandbox", "cont: it has ended");
	if (pidfd_send_signal(sb->pidfd, SIGCONT, NULL, 0) < 0)
		return apf_error_errno(APF_EABORT, errno, "sandbox", "SIGCONT");
	sb->stopped = 0;
	return 0;
}

/* Finds a process other than init and the program that is still in the
 * sandbox: sealed, by its pid namespace; unsealed, by process group. */
static pid_t find_straggler(const apf_sandbox *sb, char *comm, size_t size)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	pid_t found = 0;
	struct dirent *de;
	while (!found && (de = readdir(d))) {
		char *end;
		long n = strtol(de->d_name, &end, 10);
		if (*end || n <= 0 || n == sb->pid || n == sb->child)
			continue;
		char path[64];
		int in = 0;
		if (sb->mode == APF_SANDBOX_SEALED) {
			struct stat st;
			snprintf(path, sizeof path, "/proc/%ld/ns/pid", n);
			in = stat(path, &st) == 0 && st.st_dev == sb->pidns_dev &&
			     st.st_ino == sb->pidns_ino;
		} else {
			char buf[512];
			snprintf(path, sizeof path, "/proc/%ld/stat", n);
			int fd = open(path, O_RDONLY | O_CLOEXEC);
			ssize_t k = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
			if (fd >= 0)
				close(fd);
			if (k > 0) {
				buf[k] = 0;
				char *p = strrchr(buf, ')');
				char state;
				int ppid, pgrp;
				in = p && sscanf(p + 1, " %c %d %d", &state, &ppid,
						 &pgrp) == 3 && pgrp == sb->pid &&
				     state != 'Z';
			}
		}
		if (!in)
			continue;
		found = (pid_t)n;
		snprintf(path, sizeof path, "/proc/%ld/comm", n);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t k = fd >= 0 ? read(fd, comm, size - 1) : -1;
		if (fd >= 0)
			close(fd);
		comm[k > 0 ? k : 0] = 0;
		comm[strcspn(comm, "\n")] = 0;
	}
	closedir(d);
	return found;
}

int apf_sandbox_set_phase(apf_sandbox *sb, enum apf_sandbox_phase phase)
{
	if (phase == sb->phase)
		return 0;
	if (phase != APF_SANDBOX_LOCKED)
		return apf_error(APF_EUSAGE, "sandbox", "the locked phase is final");
	if (sb->ended)
		return apf_error(APF_EINPUT, "sandbox", "lock: it has ended");
	sb->phase = APF_SANDBOX_LOCKED;
	/* Stopped, the program has finished any fork it was making, so the
	 * search below sees every process it will ever have had. */
	int was_stopped = sb->stopped;
	int rc = apf_sandbox_stop(sb);
	if (rc < 0)
		return rc;
	char comm[64], text[160];
	pid_t other = find_straggler(sb, comm, sizeof comm);
	if (other > 0) {
		snprintf(text, sizeof text,
			 "process %d (%s) still runs when the sandbox is locked",
			 (int)other, comm);
		apf_sandbox_record_fault(sb, text, 0);
		return apf_error(APF_EABORT, "sandbox", "%s", text);
	}
	if (other < 0)
		return apf_error_errno(APF_EIO, errno, "sandbox", "reading /proc");
	return was_stopped ? 0 : apf_sandbox_cont(sb);
}

static uint64_t tv_ns(struct timeval tv)
{
	return (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
}

static const char *signame(int sig, char *buf, size_t size)
{
	const char *abbrev = sigabbrev_np(sig);
	if (abbrev)
		snprintf(buf, size, "SIG%s", abbrev);
	else
		snprintf(buf, size, "signal %d", sig);
	return buf;
}

/* The cgroup's word on how it ended: the kernel's OOM killer struck; on a
 * kernel without the oom_kill counter (before 4.13), the limit was hit and
 * the program died of SIGKILL. (Hitting the limit alone says nothing: the
 * kernel reclaims page cache there all the time.) Only a program that did
 * not end well; init reporting nothing counts as such. */
static int cgroup_oom(const apf_sandbox *sb, const apf_sandbox_end *e)
{
	if (sb->mem != SB_MEM_CGROUP1 && sb->mem != SB_MEM_CGROUP2)
		return 0;
	int failed = !sb->have_status || e->signal || e->exit_code != 0;
	if (sb->cg_oom_counted)
		return failed && sb->cg_oom_kills > 0;
	return failed && sb->cg_failcnt > 0 &&
	       (!sb->have_status || e->signal == SIGKILL);
}

static void classify(apf_sandbox *sb, const siginfo_t *si)
{
	apf_sandbox_end *e = &sb->end;
	char sn[32];
	memset(e, 0, sizeof *e);
	e->exit_code = -1;
	e->wall_ns = apf_now_ns() - sb->t_start;
	e->memory_limit = sb->memory_limit;
	e->peak_vm = sb->peak_vm;
	apf_sandbox_memory_read(sb);
	e->memory_peak = sb->cg_peak;
	if (sb->have_status) {
		e->user_ns = tv_ns(sb->ru.ru_utime);
		e->system_ns = tv_ns(sb->ru.ru_stime);
		e->peak_rss = (uint64_t)sb->ru.ru_maxrss * 1024;
	}
	uint64_t peak = e->peak_rss > e->peak_vm ? e->peak_rss : e->peak_vm;
	int at_limit = sb->memory_limit &&
		       peak >= sb->memory_limit - sb->memory_limit / 8;
	int st = sb->status;
	if (sb->have_status && WIFEXITED(st))
		e->exit_code = WEXITSTATUS(st);
	else if (sb->have_status && WIFSIGNALED(st))
		e->signal = WTERMSIG(st);

	if (sb->faulted) {
		e->outcome = APF_SANDBOX_FAULTED;
		e->path_fault = sb->fault_path;
		snprintf(e->reason, sizeof e->reason, "sandbox fault: %s", sb->fault);
	} else if (sb->setup_error[0]) {
		e->outcome = APF_SANDBOX_SETUP_FAILED;
		snprintf(e->reason, sizeof e->reason, "sandbox setup failed: %s",
			 sb->setup_error);
	} else if (sb->killed) {
		e->outcome = APF_SANDBOX_KILLED;
		snprintf(e->reason, sizeof e->reason, "killed by the runner");
	} else if (cgroup_oom(sb, e)) {
		e->outcome = APF_SANDBOX_MEMORY_LIMIT;
		snprintf(e->reason, sizeof e->reason,
			 "memory limit exceeded: peak %llu MiB of %llu MiB (%s%s)",
			 (unsigned long long)(sb->cg_peak >> 20),
			 (unsigned long long)(sb->mem_bytes >> 20),
			 apf_sandbox_memory_mechanism(sb),
			 sb->cg_oom_kills ? ", OOM kill" : "");
	} else if (!sb->have_status) {
		/* init died without reporting: someone outside killed it */
		e->outcome = APF_SANDBOX_CRASHED;
		e->signal = si->si_code == CLD_EXITED ? 0 : si->si_status;
		snprintf(e->reason, sizeof e->reason,
			 "the sandbox's init ended unexpectedly (%s)",
			 si->si_code == CLD_EXITED
				 ? "exited"
				 : signame(si->si_status, sn, sizeof sn));
	} else if (e->signal == SIGSYS) {
		e->outcome = APF_SANDBOX_FAULTED;
		snprintf(e->reason, sizeof e->reason,
			 "sandbox fault: killed by the seccomp filter (SIGSYS): "
			 "a syscall of a foreign architecture");
	} else if (e->signal == SIGXCPU) {
		e->outcome = APF_SANDBOX_CPU_LIMIT;
		snprintf(e->reason, sizeof e->reason, "CPU time limit exceeded");
	} else if (e->signal == SIGXFSZ) {
		e->outcome = APF_SANDBOX_FILE_LIMIT;
		snprintf(e->reason, sizeof e->reason, "file size limit exceeded");
	} else if ((e->signal || e->exit_code != 0) && at_limit) {
		e->outcome = APF_SANDBOX_MEMORY_LIMIT;
		char how[48];
		if (e->signal)
			signame(e->signal, how, sizeof how);
		else
			snprintf(how, sizeof how, "exit code %d", e->exit_code);
		snprintf(e->reason, sizeof e->reason,
			 "memory limit exceeded: peak %llu MiB of %llu MiB (%s)",
			 (unsigned long long)(peak >> 20),
			 (unsigned long long)(sb->memory_limit >> 20), how);
	} else if (e->signal) {
		e->outcome = APF_SANDBOX_CRASHED;
		snprintf(e->reason, sizeof e->reason, "crashed: %s%s",
			 signame(e->signal, sn, sizeof sn),
			 WCOREDUMP(st) ? " (core dumped)" : "");
	} else {
		e->outcome = APF_SANDBOX_EXITED;
		snprintf(e->reason, sizeof e->reason, "exited with code %d",
			 e->exit_code);
	}
}

int apf_sandbox_reap(apf_sandbox *sb, apf_sandbox_end *end)
{
	if (sb->ended) {
		*end = sb->end;
		return 1;
	}
	siginfo_t si;
	struct rusage ru;
	memset(&si, 0, sizeof si);
	memset(&ru, 0, sizeof ru);
	if (waitid(P_PIDFD, (id_t)sb->child_pidfd, &si,
		   WEXITED | WNOHANG | WNOWAIT) < 0) {
		if (errno == EINTR)
			return 0;
		return apf_error_errno(APF_EINTERNAL, errno, "sandbox", "waitid");
	}
	if (si.si_pid == 0)
		return 0;
	/* Unsealed, what the program started in its setup phase goes with
	 * it, as everything goes with init when sealed. While the program is
	 * an unreaped zombie its process group cannot be anyone else's. */
	if (sb->mode == APF_SANDBOX_UNSEALED)
		kill(-sb->pid, SIGKILL);
	/* waitid(2) proper, which fills a rusage; glibc's wrapper has none */
	memset(&si, 0, sizeof si);
	while (syscall(SYS_waitid, P_PIDFD, sb->child_pidfd, &si, WEXITED,
		       &ru) < 0)
		if (errno != EINTR)
			return apf_error_errno(APF_EINTERNAL, errno, "sandbox",
					       "waitid");
	drain_messages(sb);
	apf_sandbox_output_close(sb);
	if (sb->mode == APF_SANDBOX_UNSEALED) {
		sb->have_status = 1;
		sb->status = si.si_code == CLD_EXITED
			? W_EXITCODE(si.si_status, 0)
			: si.si_status | (si.si_code == CLD_DUMPED ? 0x80 : 0);
		sb->ru = ru;
	}
	classify(sb, &si);
	sb->ended = 1;
	sb->notify_hup = 1;
	apf_sandbox_memory_remove(sb);
	*end = sb->end;
	return 1;
}

int apf_sandbox_wait(apf_sandbox *sb, int timeout_ms, apf_sandbox_end *end)
{
	uint64_t deadline = timeout_ms < 0
		? UINT64_MAX : apf_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		int r = apf_sandbox_reap(sb, end);
		if (r != 0)
			return r;
		struct pollfd pf[3] = {
			{sb->notify_hup ? -1 : sb->notify_fd, POLLIN, 0},
			{sb->child_pidfd, POLLIN, 0},
			{sb->out_rfd, POLLIN, 0},
		};
		uint64_t now = apf_now_ns();
		if (now >= deadline)
			return 0;
		int wait = deadline == UINT64_MAX
			? -1 : (int)((deadline - now + 999999) / 1000000);
		if (poll(pf, 3, wait) < 0 && errno != EINTR)
			return apf_error_errno(APF_EINTERNAL, errno, "sandbox",
					       "poll");
		if (pf[2].revents)
			apf_sandbox_output_drain(sb);
		if (pf[0].revents & POLLIN) {
			apf_sandbox_event ev;
			int rc = apf_sandbox_notify_handle(sb, &ev);
			if (rc < 0)
				return rc;
		} else if (pf[0].revents & (POLLHUP | POLLERR | POLLNVAL)) {
			sb->notify_hup = 1;
		}
	}
}

void apf_sandbox_free(apf_sandbox *sb)
{
	if (!sb)
		return;
	if (!sb->ended && sb->child_pidfd >= 0) {
		apf_sandbox_kill_now(sb);
		siginfo_t si;
		while (waitid(P_PIDFD, (id_t)sb->child_pidfd, &si, WEXITED) < 0 &&
		       errno == EINTR)
			;
	}
	apf_sandbox_output_close(sb);
	apf_sandbox_memory_remove(sb);
	free(sb->cgroup);
	int fds[] = {sb->child_pidfd, sb->pidfd, sb->notify_fd, sb->chan};
	for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	for (size_t i = 0; i < sb->npolicy; i++)
		free(sb->policy[i].prefix);
	free(sb->policy);
	free(sb->req);
	free(sb->resp);
	free(sb);
}

const char *apf_sandbox_outcome_name(enum apf_sandbox_outcome o)
{
	switch (o) {
	case APF_SANDBOX_EXITED:
		return "exited";
	case APF_SANDBOX_CRASHED:
		return "crashed";
	case APF_SANDBOX_FAULTED:
		return "sandbox_fault";
	case APF_SANDBOX_KILLED:
		return "killed";
	case APF_SANDBOX_MEMORY_LIMIT:
		return "memory_limit";
	case APF_SANDBOX_CPU_LIMIT:
		return "cpu_limit";
	case APF_SANDBOX_FILE_LIMIT:
		return "file_size_limit";
	case APF_SANDBOX_SETUP_FAILED:
		return "setup_failed";
	}
	return "unknown";
}
