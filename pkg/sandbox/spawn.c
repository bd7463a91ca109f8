/*
 * spawn.c: starting a sandbox, watching it, and saying how it ended.
 *
 * Sealed: the supervisor clone3()s a child into new mount, pid, ipc, uts
 * and network namespaces, and a new user namespace unless the supervisor
 * is root. That child is pid 1 of the new pid namespace, our init: in its
 * own user namespace it maps APF_SANDBOX_UID to the invoking user; it
 * builds the new root (see build_root), hides its command line (the
 * supervisor's, which names the run's host paths) and makes itself
 * non-dumpable so the program cannot reach into it, forks the program
 * (pid 2), and then only reaps: when the program ends it sends the
 * program's wait status and rusage to the supervisor and exits, which
 * kills whatever is left in the namespace.
 * The program never runs as root, inside or out: a root supervisor's
 * program switches to APF_SANDBOX_UID on the host (no user namespace: the
 * mount namespace stays the host root's, which the program cannot touch),
 * an unprivileged supervisor's is APF_SANDBOX_UID inside its namespace,
 * mapped to the supervisor's user. Either way a call the filter misses
 * meets the kernel's permission checks as a user that owns nothing the
 * sandbox shows: the root and every bind mount are read-only, the /dev
 * nodes too (their writes still work; a mode or owner change does not),
 * and only the scratch is its own. It also enters a cgroup namespace of
 * its own once it is in its cgroup, so /proc/self/cgroup reads "/".
 * Unsealed: the supervisor clone3()s the program directly, in a process
 * group of its own.
 * Either way the program, before execve: resets signal dispositions, keeps
 * only the caller's descriptors, drops the capability bounding set, sets its
 * rlimits and no_new_privs, installs the filter with a listener, and sends
 * the listener over the socketpair (SCM_RIGHTS; SO_PASSCRED tells the
 * supervisor the program's pid in its own numbering).
 *
 * Everything the children need is prepared before the clone (struct plan),
 * so that the children only make system calls: the supervisor may have other
 * threads, and after a fork only async-signal-safe calls are sound. Each
 * failing step sends its name and errno over the socketpair, so the caller
 * reads "sandbox: mount /usr on /usr: Permission denied", not a bare status.
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

#define DEFAULT_HOSTNAME "apf-sandbox"
#define DEFAULT_SCRATCH_BYTES (64ull << 20)
#define MAX_FDS 64
#define SETUP_TIMEOUT_MS 30000
/* Where the intermediate root is mounted while the new one is built; any
 * directory every system has will do, since its content is never used. */
#define STAGE "/tmp"

enum { MSG_LISTENER = 'L', MSG_ERROR = 'E', MSG_EXIT = 'X' };

/* Which set-up step failed, for the steps the supervisor's message says
 * more about: the message's text is for people, never parsed. */
enum { STEP_OTHER, STEP_MOUNT_PROC, STEP_SETHOSTNAME };

struct msg {
	int type;
	int err;
	int step;           /* MSG_ERROR: STEP_* */
	int status;
	struct rusage ru;
	char text[256];
};

struct plan_mount {
	char *src;  /* "/oldroot" + canonical host path */
	char *dst;  /* "/newroot" + target */
	int write;
	int is_dir;
	int is_dev; /* a character device: keeps device access */
	int copy;   /* copied into the root, not bound */
};

struct plan {
	enum apf_sandbox_mode mode;
	int probe;
	char **argv, **envp;
	char *cwd;
	struct plan_mount *mnts;
	size_t nmnts;
	char *scratch;      /* "/newroot" + scratch target, or NULL */
	char scratch_opts[64];
	char root_opts[64];
	struct apf_sandbox_fd fds[MAX_FDS];
	size_t nfds;
	struct rlimit rl_as, rl_nofile, rl_nproc, rl_fsize, rl_cpu;
	char hostname[65];
	char uid_map[64], gid_map[64];
	struct sock_fprog prog;
	int chan;           /* the children's end of the socketpair */
	pid_t supervisor;
	int userns;         /* sealed in a user namespace of its own */
	int out_wfd;        /* the output pipe's write end (fds 1, 2), or -1 */
	int cg_fd;          /* the sandbox cgroup's cgroup.procs, or -1 */
};

/* ---- the children: system calls only ------------------------------------ */

static size_t put(char *dst, size_t size, size_t at, const char *s)
{
	while (s && *s && at + 1 < size)
		dst[at++] = *s++;
	dst[at] = 0;
	return at;
}

static void send_msg(int chan, const struct msg *m)
{
	while (send(chan, m, sizeof *m, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

static _Noreturn void child_fail_step(int chan, int kind, const char *step,
				      const char *arg, int err)
{
	struct msg m;
	memset(&m, 0, sizeof m);
	m.type = MSG_ERROR;
	m.err = err;
	m.step = kind;
	size_t at = put(m.text, sizeof m.text, 0, step);
	if (arg) {
		at = put(m.text, sizeof m.text, at, " ");
		put(m.text, sizeof m.text, at, arg);
	}
	send_msg(chan, &m);
	_exit(127);
}

static _Noreturn void child_fail(int chan, const char *step, const char *arg,
				 int err)
{
	child_fail_step(chan, STEP_OTHER, step, arg, err);
}

static int write_file(const char *path, const char *data)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	size_t len = strlen(data);
	ssize_t n = write(fd, data, len);
	int err = n == (ssize_t)len ? 0 : n < 0 ? errno : EIO;
	close(fd);
	return err;
}

static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);
	if (len >= sizeof buf)
		return ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (size_t i = 1; i <= len; i++) {
		if (buf[i] != '/' && buf[i] != 0)
			continue;
		char c = buf[i];
		buf[i] = 0;
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return errno;
		buf[i] = c;
	}
	return 0;
}

/* A mount point for a file. One that exists already (the file itself, where
 * a directory bound before it holds it: apf installed in /usr/local/bin
 * under the bound /usr) is left alone: opening it for writing would fail
 * while it runs (ETXTBSY), and on a read-only bind. */
static int make_file(const char *path)
{
	struct stat st;
	if (lstat(path, &st) == 0)
		return S_ISREG(st.st_mode) ? 0 : EEXIST;
	char dir[PATH_MAX];
	size_t len = strlen(path);
	const char *slash = strrchr(path, '/');
	if (len >= sizeof dir || !slash)
		return ENAMETOOLONG;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = 0;
	int err = dir[0] ? mkdir_p(dir) : 0;
	if (err)
		return err;
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return errno;
	close(fd);
	return 0;
}

/* The supervisor's handlers and ignored signals must not survive into the
 * sandbox: SIG_IGN is inherited across execve. Raw syscalls, because a
 * sanitizer's sigaction interceptor may refuse some signals. */
static void reset_signals(void)
{
	struct {
		void *handler;
		unsigned long flags;
		void *restorer;
		uint64_t mask;
	} dfl;
	memset(&dfl, 0, sizeof dfl); /* SIG_DFL is 0 */
	for (int sig = 1; sig < 65; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			syscall(SYS_rt_sigaction, sig, &dfl, NULL, 8);
	uint64_t none = 0;
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, 8);
}

/* fork() with namespaces and a pidfd. clone3 first; where it is refused
 * with ENOSYS (container runtimes' default seccomp profiles do that), clone,
 * which takes the same flags and returns the pidfd through its parent_tid
 * argument - the third on every architecture. */
static pid_t clone_child(uint64_t flags, int *pidfd)
{
	struct clone_args a;
	memset(&a, 0, sizeof a);
	a.flags = flags;
	if (pidfd) {
		a.flags |= CLONE_PIDFD;
		a.pidfd = (uint64_t)(uintptr_t)pidfd;
	}
	a.exit_signal = SIGCHLD;
	long pid = syscall(SYS_clone3, &a, sizeof a);
	if (pid < 0 && errno == ENOSYS)
		pid = syscall(SYS_clone, (unsigned long)(a.flags | SIGCHLD), NULL,
			      pidfd, NULL, NULL);
	return (pid_t)pid;
}

static int set_attr(const char *path, uint64_t set, int recursive)
{
	struct mount_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.attr_set = set;
	if (mount_setattr(AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &attr,
			  sizeof attr) < 0)
		return errno;
	return 0;
}

static void bind_one(int chan, const struct plan_mount *m)
{
	int err = m->is_dir ? mkdir_p(m->dst) : make_file(m->dst);
	if (err)
		child_fail(chan, "mount point", m->dst + 8, err);
	if (mount(m->src, m->dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		child_fail(chan, "bind mount", m->src + 8, errno);
	uint64_t attr = MOUNT_ATTR_NOSUID;
	if (!m->write)
		attr |= MOUNT_ATTR_RDONLY;
	if (!m->is_dev)
		attr |= MOUNT_ATTR_NODEV;
	if ((err = set_attr(m->dst, attr, 1)))
		child_fail(chan, "mount_setattr", m->dst + 8, err);
}

static const char *const dev_nodes[] = {"null", "zero", "full", "random",
					"urandom"};

static void build_dev(int chan)
{
	char src[64], dst[64];
	int err = mkdir_p("/newroot/dev");
	if (err)
		child_fail(chan, "mkdir", "/dev", err);
	for (size_t i = 0; i < sizeof dev_nodes / sizeof dev_nodes[0]; i++) {
		put(src, sizeof src, put(src, sizeof src, 0, "/oldroot/dev/"),
		    dev_nodes[i]);
		put(dst, sizeof dst, put(dst, sizeof dst, 0, "/newroot/dev/"),
		    dev_nodes[i]);
		/* Read-only: writing to a device node does not need a writable
		 * mount, changing its mode, owner or times does. */
		struct plan_mount m = {src, dst, 0, 0, 1, 0};
		bind_one(chan, &m);
		if ((err = set_attr(dst, MOUNT_ATTR_NOEXEC, 0)))
			child_fail(chan, "mount_setattr", dst + 8, err);
	}
	static const char *const links[][2] = {
		{"/proc/self/fd", "/newroot/dev/fd"},
		{"/proc/self/fd/0", "/newroot/dev/stdin"},
		{"/proc/self/fd/1", "/newroot/dev/stdout"},
		{"/proc/self/fd/2", "/newroot/dev/stderr"},
	};
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
		if (symlink(links[i][0], links[i][1]) < 0)
			child_fail(chan, "symlink", links[i][1] + 8, errno);
}

/* The parts of /proc that act on the whole machine. Their permission checks
 * compare the writer's uid with root's and nothing else, so a program whose
 * uid 0 maps to the host's root (a supervisor running as root) could write
 * them without any capability: kernel.*, vm.* and the others under sys, and
 * sysrq-trigger, which can reboot the host. Read-only bind mounts over
 * them, as container runtimes do. */
static void protect_proc(int chan)
{
	static const char *const parts[] = {
		"/newroot/proc/sys", "/newroot/proc/sysrq-trigger",
		"/newroot/proc/irq", "/newroot/proc/bus", "/newroot/proc/fs",
		"/newroot/proc/acpi",
	};
	for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
		struct stat st;
		if (lstat(parts[i], &st) < 0)
			continue; /* not in this kernel's /proc */
		if (mount(parts[i], parts[i], NULL, MS_BIND | MS_REC, NULL) < 0)
			child_fail(chan, "bind mount", parts[i] + 8, errno);
		int err = set_attr(parts[i],
				   MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
					   MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
				   1);
		if (err)
			child_fail(chan, "mount_setattr", parts[i] + 8, err);
	}
}

/* Copies a regular file's bytes, readable by all (0644, or 0755 when any
 * execute bit is set: no set-id), so that the program, which owns nothing
 * in the root, can read the copy whoever owns the original. */
static int copy_file(const char *src, const char *dst)
{
	int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0)
		return errno;
	struct stat st;
	if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(in);
		return EINVAL;
	}
	int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
		       st.st_mode & 0111 ? 0755 : 0644);
	if (out < 0) {
		int e = errno;
		close(in);
		return e;
	}
	char buf[16384];
	int err = 0;
	for (;;) {
		ssize_t n = read(in, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			err = n < 0 ? errno : 0;
			break;
		}
		for (ssize_t o = 0; o < n;) {
			ssize_t w = write(out, buf + o, (size_t)(n - o));
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				err = errno;
				break;
			}
			o += w;
		}
		if (err)
			break;
	}
	close(in);
	if (close(out) < 0 && !err)
		err = errno;
	return err;
}

/* Copies a tree of directories and regular files. Runs in the child, where
 * the parent's other threads may hold malloc's lock: directories are read
 * with getdents64 into a buffer on the stack, paths built on the stack. */
static int copy_tree(const char *src, const char *dst, int depth)
{
	struct stat st;
	if (lstat(src, &st) < 0)
		return errno;
	if (S_ISREG(st.st_mode))
		return copy_file(src, dst);
	if (!S_ISDIR(st.st_mode) || depth > 16)
		return EINVAL;
	if (mkdir(dst, 0755) < 0 && errno != EEXIST)
		return errno;
	int fd = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno;
	char buf[4096] __attribute__((aligned(8)));
	int err = 0;
	for (;;) {
		long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
		if (n <= 0) {
			err = n < 0 ? errno : 0;
			break;
		}
		for (long off = 0; off < n && !err;) {
			struct linux_dirent64 {
				uint64_t d_ino;
				int64_t d_off;
				unsigned short d_reclen;
				unsigned char d_type;
				char d_name[];
			} *d = (void *)(buf + off);
			off += d->d_reclen;
			if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
				continue;
			char s2[PATH_MAX], d2[PATH_MAX];
			if (put(s2, sizeof s2, put(s2, sizeof s2, put(s2, sizeof s2, 0, src), "/"), d->d_name) + 1 >= sizeof s2 ||
			    put(d2, sizeof d2, put(d2, sizeof d2, put(d2, sizeof d2, 0, dst), "/"), d->d_name) + 1 >= sizeof d2)
				err = ENAMETOOLONG;
			else
				err = copy_tree(s2, d2, depth + 1);
		}
		if (err)
			break;
	}
	close(fd);
	return err;
}

static char *join2(const char *a, const char *b);

/* Bytes of regular files in a tree (for the root's size), or -1 when it
 * holds anything else or is too deep: the caller refuses such a copy. */
static long long tree_bytes(const char *path, int depth)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return -1;
	if (S_ISREG(st.st_mode))
		return (long long)st.st_size;
	if (!S_ISDIR(st.st_mode) || depth > 16)
		return -1;
	DIR *d = opendir(path);
	if (!d)
		return -1;
	long long total = 4096;
	struct dirent *e;
	while (total >= 0 && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char *sub = join2(path, "/");
		char *full = sub ? join2(sub, e->d_name) : NULL;
		long long b = full ? tree_bytes(full, depth + 1) : -1;
		total = b < 0 ? -1 : total + b + 4096;
		free(sub);
		free(full);
	}
	closedir(d);
	return total;
}

/* The new root: a read-only tmpfs holding the caller's bind mounts, the
 * scratch, /proc and /dev. Built under /newroot while the host's root is
 * still reachable as /oldroot, then pivoted into, and the old root detached:
 * after that no path leads back to the host. */
static void build_root(const struct plan *p)
{
	int chan = p->chan, err;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		child_fail(chan, "make the mounts private", NULL, errno);
	if (mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV,
		  "size=1m,mode=0755") < 0)
		child_fail(chan, "mount tmpfs on", STAGE, errno);
	if (mkdir(STAGE "/newroot", 0755) < 0 ||
	    mkdir(STAGE "/oldroot", 0755) < 0)
		child_fail(chan, "mkdir", STAGE, errno);
	if (syscall(SYS_pivot_root, STAGE, STAGE "/oldroot") < 0)
		child_fail(chan, "pivot_root", STAGE, errno);
	if (chdir("/") < 0)
		child_fail(chan, "chdir", "/", errno);
	if (mount("tmpfs", "/newroot", "tmpfs", MS_NOSUID | MS_NODEV,
		  p->root_opts) < 0)
		child_fail(chan, "mount tmpfs on", "/", errno);
	for (size_t i = 0; i < p->nmnts; i++) {
		const struct plan_mount *m = &p->mnts[i];
		if (!m->copy) {
			bind_one(chan, m);
			continue;
		}
		/* The target's parent, then the copy itself. */
		char parent[PATH_MAX];
		put(parent, sizeof parent, 0, m->dst);
		char *slash = strrchr(parent, '/');
		if (slash)
			*slash = 0;
		if ((err = mkdir_p(parent)) || (err = copy_tree(m->src, m->dst, 0)))
			child_fail(chan, "copy", m->src + 8, err);
	}
	if (p->scratch) {
		if ((err = mkdir_p(p->scratch)))
			child_fail(chan, "mkdir", p->scratch + 8, err);
		if (mount("tmpfs", p->scratch, "tmpfs", MS_NOSUID | MS_NODEV,
			  p->scratch_opts) < 0)
			child_fail(chan, "mount the scratch on", p->scratch + 8,
				   errno);
	}
	if ((err = mkdir_p("/newroot/proc")))
		child_fail(chan, "mkdir", "/proc", err);
	/* hidepid=2: a process sees only its own user's processes under
	 * /proc, so a program whose init is root does not see init at all. */
	if (mount("proc", "/newroot/proc", "proc",
		  MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") < 0)
		child_fail_step(chan, STEP_MOUNT_PROC, "mount", "/proc", errno);
	/* No nested user namespaces: the limit is per namespace, ours is the
	 * only one that can set it, and the program has no capability left
	 * to change it back. Without a user namespace of ours (a root
	 * supervisor) the file is the host's: the filter refuses new user
	 * namespaces then, and the program is an unprivileged user. */
	if (p->userns &&
	    (err = write_file("/newroot/proc/sys/user/max_user_namespaces",
			      "0")))
		child_fail(chan, "disable nested user namespaces", NULL, err);
	protect_proc(chan);
	build_dev(chan);
	if (chdir("/newroot") < 0)
		child_fail(chan, "chdir", "/newroot", errno);
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		child_fail(chan, "pivot_root", "/newroot", errno);
	if (umount2(".", MNT_DETACH) < 0)
		child_fail(chan, "detach the old root", NULL, errno);
	if (chdir("/") < 0)
		child_fail(chan, "chdir", "/", errno);
	if ((err = set_attr("/", MOUNT_ATTR_RDONLY, 0)))
		child_fail(chan, "make the root read-only", NULL, err);
}

/* Moves the caller's descriptors to their numbers, fills 0-2 with
 * /dev/null when not given, and closes everything else; returns the new
 * number of the channel, which is kept (close-on-exec) until the listener
 * has been sent. */
static int arrange_fds(const struct plan *p)
{
	int chan = p->chan;
	int high = 3;
	for (size_t i = 0; i < p->nfds; i++) {
		if (p->fds[i].target >= high)
			high = p->fds[i].target + 1;
		if (p->fds[i].fd >= high)
			high = p->fds[i].fd + 1;
	}
	if (chan >= high)
		high = chan + 1;
	int tmp[MAX_FDS];
	int nchan = fcntl(chan, F_DUPFD_CLOEXEC, high);
	if (nchan < 0)
		child_fail(chan, "dup", "channel", errno);
	chan = nchan;
	for (size_t i = 0; i < p->nfds; i++) {
		tmp[i] = fcntl(p->fds[i].fd, F_DUPFD_CLOEXEC, high);
		if (tmp[i] < 0)
			child_fail(chan, "dup", "a passed descriptor", errno);
	}
	for (size_t i = 0; i < p->nfds; i++)
		if (dup2(tmp[i], p->fds[i].target) < 0)
			child_fail(chan, "dup2", "a passed descriptor", errno);
	for (int fd = 0; fd < high; fd++) {
		int keep = 0;
		for (size_t i = 0; i < p->nfds; i++)
			keep |= p->fds[i].target == fd;
		if (keep)
			continue;
		close(fd);
		if (fd <= 2) {
			int n = open("/dev/null", O_RDWR);
			if (n < 0)
				child_fail(chan, "open", "/dev/null", errno);
			if (n != fd) {
				if (dup2(n, fd) < 0)
					child_fail(chan, "dup2", "/dev/null", errno);
				close(n);
			}
		}
	}
	if ((chan > high && close_range((unsigned)high, (unsigned)chan - 1, 0) < 0) ||
	    close_range((unsigned)chan + 1, ~0u, 0) < 0)
		child_fail(chan, "close_range", NULL, errno);
	return chan;
}

static void drop_capabilities(int chan, int must)
{
	for (int cap = 0; cap <= 63; cap++) {
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
			continue;
		if (errno == EINVAL)
			break; /* past the last capability this kernel has */
		if (errno == EPERM && !must)
			break; /* unsealed, unprivileged: there is none to drop */
		child_fail(chan, "drop capabilities", NULL, errno);
	}
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}

static void set_limit(int chan, int res, const struct rlimit *rl,
		      const char *name)
{
	if (setrlimit(res, rl) < 0)
		child_fail(chan, "setrlimit", name, errno);
}

/* Sealed: into the sandbox's cgroup first (through the descriptor the
 * supervisor opened: "0" is the writer itself), then a cgroup namespace
 * rooted there, so that /proc/self/cgroup reads "/" and names neither the
 * host's cgroup tree nor the supervisor (the cgroup's name holds its pid).
 * Where there is no cgroup the namespace is rooted where the supervisor
 * is, and shows that as "/" too. */
static void enter_cgroup_ns(const struct plan *p)
{
	if (p->cg_fd >= 0) {
		ssize_t n = write(p->cg_fd, "0", 1);
		if (n != 1)
			child_fail(p->chan, "enter the memory cgroup", NULL,
				   n < 0 ? errno : EIO);
		close(p->cg_fd);
	}
	if (unshare(CLONE_NEWCGROUP) < 0)
		child_fail(p->chan, "unshare", "the cgroup namespace", errno);
}

/* The program's user: APF_SANDBOX_UID/GID, on the host (a root supervisor,
 * no user namespace: the supplementary groups go too) or inside the user
 * namespace (an unprivileged one, where the map has no other user and
 * setgroups is denied). No capability survives, in any set. */
static void become_unprivileged(const struct plan *p, int chan)
{
	if (!p->userns && setgroups(0, NULL) < 0)
		child_fail(chan, "setgroups", NULL, errno);
	if (setresgid(APF_SANDBOX_GID, APF_SANDBOX_GID, APF_SANDBOX_GID) < 0)
		child_fail(chan, "setresgid", NULL, errno);
	if (setresuid(APF_SANDBOX_UID, APF_SANDBOX_UID, APF_SANDBOX_UID) < 0)
		child_fail(chan, "setresuid", NULL, errno);
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof d);
	if (syscall(SYS_capset, &h, d) < 0)
		child_fail(chan, "capset", "drop every capability", errno);
	if (syscall(SYS_capget, &h, d) < 0 || d[0].effective || d[0].permitted ||
	    d[0].inheritable || d[1].effective || d[1].permitted ||
	    d[1].inheritable || getuid() != APF_SANDBOX_UID ||
	    geteuid() != APF_SANDBOX_UID)
		child_fail(chan, "become the sandbox's user", NULL, EPERM);
}

static _Noreturn void program_main(struct plan *p)
{
	/* Unsealed, the program is the supervisor's child: out of its process
	 * group before the supervisor's handlers go, or a ^C (`timeout -s
	 * INT`, a scheduler's SIGTERM to the group) that came between the
	 * two would kill it with the default action, and the supervisor
	 * would log the submission's crash. Until then, a signal only runs
	 * the inherited handler, which sets a flag in this copy of memory. */
	if (p->mode == APF_SANDBOX_UNSEALED)
		setpgid(0, 0);
	reset_signals();
	if (p->mode == APF_SANDBOX_SEALED)
		enter_cgroup_ns(p);
	if (p->mode == APF_SANDBOX_UNSEALED) {
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 ||
		    getppid() != p->supervisor)
			child_fail(p->chan, "the supervisor went away", NULL,
				   ESRCH);
	} else {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
	}
	int chan = arrange_fds(p);
	p->chan = chan;
	if (chdir(p->cwd) < 0)
		child_fail(chan, "chdir", p->cwd, errno);
	umask(022);
	drop_capabilities(chan, p->mode == APF_SANDBOX_SEALED);
	if (p->mode == APF_SANDBOX_SEALED)
		become_unprivileged(p, chan);
	set_limit(chan, RLIMIT_CORE, &(struct rlimit){0, 0}, "RLIMIT_CORE");
	set_limit(chan, RLIMIT_NOFILE, &p->rl_nofile, "RLIMIT_NOFILE");
	set_limit(chan, RLIMIT_FSIZE, &p->rl_fsize, "RLIMIT_FSIZE");
	set_limit(chan, RLIMIT_CPU, &p->rl_cpu, "RLIMIT_CPU");
	/* Unsealed, RLIMIT_NPROC would count every process the user has on
	 * the host; the supervisor's own spawn limit stands in for it. */
	if (p->mode == APF_SANDBOX_SEALED)
		set_limit(chan, RLIMIT_NPROC, &p->rl_nproc, "RLIMIT_NPROC");
	set_limit(chan, RLIMIT_AS, &p->rl_as, "RLIMIT_AS");
	/* init made itself non-dumpable, and we inherited that; the
	 * supervisor must read our memory when it checks the execve. */
	if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail(chan, "prctl", "no_new_privs", errno);
	int lfd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
			       SECCOMP_FILTER_FLAG_NEW_LISTENER, &p->prog);
	if (lfd < 0)
		child_fail(chan, "seccomp", "user notification filter", errno);

	struct msg m;
	memset(&m, 0, sizeof m);
	m.type = MSG_LISTENER;
	struct iovec iov = {&m, sizeof m};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = u.buf,
			    .msg_controllen = sizeof u.buf};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &lfd, sizeof lfd);
	if (sendmsg(chan, &mh, MSG_NOSIGNAL) < 0)
		_exit(127); /* nobody to tell */
	close(lfd);

	if (p->probe) {
		/* One notified call that makes the supervisor read our
		 * memory, as every path check will. */
		long fd = syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDONLY);
		_exit(fd >= 0 ? 0 : 2);
	}
	execve(p->argv[0], p->argv, p->envp);
	child_fail(chan, "execve", p->argv[0], errno);
}

/* init is a fork of the supervisor, so /proc/1/cmdline, which anyone may
 * read, would show the supervisor's command line (the entry, the run
 * directory). The argument area of /proc/self/stat (fields 48 and 49) is
 * overwritten in init's own copy of the memory. */
static void hide_command_line(int chan)
{
	char buf[1024];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		child_fail(chan, "read", "/proc/self/stat", n < 0 ? errno : EIO);
	buf[n] = 0;
	/* After the command name, whose ")" is the last one: field 3 on. */
	char *q = NULL;
	for (char *c = buf; *c; c++)
		if (*c == ')')
			q = c;
	unsigned long v[2] = {0, 0};
	int field = 2;
	for (char *c = q ? q + 1 : buf + n; *c && field < 49;) {
		while (*c == ' ')
			c++;
		field++;
		unsigned long x = 0;
		while (*c >= '0' && *c <= '9')
			x = x * 10 + (unsigned long)(*c++ - '0');
		while (*c && *c != ' ')
			c++;
		if (field >= 48)
			v[field - 48] = x;
	}
	if (field != 49 || !v[0] || v[1] <= v[0] || v[1] - v[0] > (1ul << 24))
		child_fail(chan, "hide init's command line", NULL, EINVAL);
	volatile char *a = (volatile char *)v[0];
	static const char name[] = "apf-sandbox-init";
	for (unsigned long i = 0; i < v[1] - v[0]; i++)
		a[i] = i < sizeof name ? name[i] : 0;
}

static _Noreturn void init_main(struct plan *p)
{
	int chan = p->chan, err;
	/* A session of its own: a terminal's ^C (or `timeout -s INT`, which
	 * signals its whole process group) reaches the supervisor, which
	 * stops the trial itself, and never the trial directly (a trial
	 * killed by SIGINT would be a crash of the submission's). First,
	 * while the supervisor's handlers are still ours: a signal to the
	 * group before it only sets a flag in this copy of memory. */
	if (setsid() < 0)
		child_fail(chan, "setsid", NULL, errno);
	reset_signals();
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	hide_command_line(chan);
	if (p->userns) {
		if ((err = write_file("/proc/self/setgroups", "deny")) ||
		    (err = write_file("/proc/self/uid_map", p->uid_map)))
			child_fail(chan, "write", "uid_map", err);
		if ((err = write_file("/proc/self/gid_map", p->gid_map)))
			child_fail(chan, "write", "gid_map", err);
	}
	if (sethostname(p->hostname, strlen(p->hostname)) < 0)
		child_fail_step(chan, STEP_SETHOSTNAME, "sethostname", NULL,
				errno);
	build_root(p);
	/* Non-dumpable keeps the program out of our memory and descriptors
	 * (/proc/1/mem, /proc/1/fd) where it runs as our user (an
	 * unprivileged supervisor's namespace). */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	pid_t prog = clone_child(0, NULL);
	if (prog < 0)
		child_fail(chan, "fork", "the program", errno);
	if (prog == 0)
		program_main(p);
	if ((chan > 0 && close_range(0, (unsigned)chan - 1, 0) < 0) ||
	    close_range((unsigned)chan + 1, ~0u, 0) < 0)
		child_fail(chan, "close_range", NULL, errno);
	for (;;) {
		int st;
		struct rusage ru;
		pid_t w = wait4(-1, &st, 0, &ru);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			_exit(126);
		if (w != prog)
			continue; /* an orphan: reaped, nothing to report */
		struct msg m;
		memset(&m, 0, sizeof m);
		m.type = MSG_EXIT;
		m.status = st;
		m.ru = ru;
		send_msg(chan, &m);
		kill(-1, SIGKILL);
		_exit(0);
	}
}

/* ---- the supervisor ----------------------------------------------------- */

static void plan_free(struct plan *p)
{
	if (p->out_wfd > 0)
		close(p->out_wfd);
	p->out_wfd = -1;
	for (char **a = p->argv; a && *a; a++)
		free(*a);
	free(p->argv);
	for (char **e = p->envp; e && *e; e++)
		free(*e);
	free(p->envp);
	for (size_t i = 0; i < p->nmnts; i++) {
		free(p->mnts[i].src);
		free(p->mnts[i].dst);
	}
	free(p->mnts);
	free(p->scratch);
	free(p->cwd);
	free(p->prog.filter);
}

static char **copy_strv(const char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	char **out = calloc(n + 1, sizeof *out);
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (!(out[i] = apf_strdup(v[i]))) {
			for (size_t j = 0; j < i; j++)
				free(out[j]);
			free(out);
			return NULL;
		}
	return out;
}

static char *join2(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *s = malloc(la + lb + 1);
	if (s) {
		memcpy(s, a, la);
		memcpy(s + la, b, lb + 1);
	}
	return s;
}

/* An absolute, normalised path inside the sandbox that the caller may put
 * something on: not "/", not under the /proc and /dev we build ourselves. */
static int check_target(const char *what, const char *t, char *norm,
			size_t size)
{
	if (!t || t[0] != '/')
		return apf_error(APF_EINPUT, "sandbox", "%s %s: not an absolute path",
				 what, t ? t : "(null)");
	if (apf_sandbox_normalize(norm, size, t) < 0)
		return apf_error(APF_EINPUT, "sandbox", "%s %s: path too long",
				 what, t);
	if (strcmp(norm, t) != 0)
		return apf_error(APF_EINPUT, "sandbox",
				 "%s %s: not in normal form (%s)", what, t, norm);
	if (!strcmp(norm, "/"))
		return apf_error(APF_EINPUT, "sandbox", "%s: cannot be /", what);
	static const char *const ours[] = {"/proc", "/dev"};
	for (size_t i = 0; i < 2; i++) {
		size_t l = strlen(ours[i]);
		if (!strncmp(norm, ours[i], l) && (!norm[l] || norm[l] == '/'))
			return apf_error(APF_EINPUT, "sandbox",
					 "%s %s: %s is the sandbox's own", what,
					 t, ours[i]);
	}
	return 0;
}

static rlim_t lim(uint64_t v, uint64_t dflt)
{
	if (!v)
		v = dflt;
	return v ? (rlim_t)v : RLIM_INFINITY;
}

/* Root with what building the sandbox without a user namespace takes:
 * mounts, and switching the program's user. */
static int host_privileged(void)
{
	if (geteuid() != 0)
		return 0;
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof d);
	if (syscall(SYS_capget, &h, d) < 0)
		return 0;
	static const int need[] = {CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID,
				   CAP_SETPCAP};
	for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
		if (!(d[need[i] / 32].effective & (1u << (need[i] % 32))))
			return 0;
	return 1;
}

static int plan_build(struct plan *p, const struct apf_sandbox_config *cfg,
		      apf_sandbox *sb)
{
	char norm[PATH_MAX];
	int rc;
	memset(p, 0, sizeof *p);
	p->mode = cfg->mode;
	p->chan = -1;
	p->supervisor = getpid();
	if (cfg->mode != APF_SANDBOX_SEALED && cfg->mode != APF_SANDBOX_UNSEALED)
		return apf_error(APF_EINPUT, "sandbox", "unknown mode %d",
				 (int)cfg->mode);
	if (!cfg->argv || !cfg->argv[0] || cfg->argv[0][0] != '/')
		return apf_error(APF_EINPUT, "sandbox",
				 "argv[0] must be the program's absolute path");
	static const char *const empty[] = {NULL};
	if (!(p->argv = copy_strv(cfg->argv)) ||
	    !(p->envp = copy_strv(cfg->envp ? cfg->envp : empty)))
		return apf_error(APF_ENOMEM, "sandbox", "out of memory");
	if (cfg->nfds > MAX_FDS)
		return apf_error(APF_EINPUT, "sandbox", "more than %d descriptors",
				 MAX_FDS);
	uint64_t nofile = cfg->limits.open_files ? cfg->limits.open_files : 256;
	if (cfg->nfds + (cfg->output ? 2 : 0) > MAX_FDS)
		return apf_error(APF_EINPUT, "sandbox", "more than %d descriptors",
				 MAX_FDS);
	for (size_t i = 0; i < cfg->nfds; i++) {
		const struct apf_sandbox_fd *f = &cfg->fds[i];
		struct stat st;
		if (fcntl(f->fd, F_GETFD) < 0 || fstat(f->fd, &st) < 0)
			return apf_error(APF_EINPUT, "sandbox",
					 "descriptor %d is not open", f->fd);
		/* A memfd answers F_GET_SEALS; a file on a disk or a tmpfs,
		 * or a device, does not. */
		if (!S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode) &&
		    fcntl(f->fd, F_GET_SEALS) < 0)
			return apf_error(APF_EINPUT, "sandbox",
					 "descriptor %d is a file or device of "
					 "the host's: pass a pipe, a socket or a "
					 "memfd (the program's output: "
					 "config.output)",
					 f->fd);
		if (cfg->output && f->target <= 2 && f->target >= 1)
			return apf_error(APF_EINPUT, "sandbox",
					 "descriptor number %d given twice (the "
					 "output is 1 and 2)",
					 f->target);
		if (f->target < 0 || (uint64_t)f->target >= nofile)
			return apf_error(APF_EINPUT, "sandbox",
					 "descriptor number %d is outside 0..%llu",
					 f->target, (unsigned long long)nofile - 1);
		for (size_t j = 0; j < i; j++)
			if (cfg->fds[j].target == f->target)
				return apf_error(APF_EINPUT, "sandbox",
						 "descriptor number %d given twice",
						 f->target);
		p->fds[i] = *f;
	}
	p->nfds = cfg->nfds;
	p->out_wfd = -1;
	if (cfg->output) {
		int rc2 = apf_sandbox_output_open(sb, cfg->output,
						  cfg->output_max, &p->out_wfd);
		if (rc2)
			return rc2;
		p->fds[p->nfds++] = (struct apf_sandbox_fd){p->out_wfd, 1};
		p->fds[p->nfds++] = (struct apf_sandbox_fd){p->out_wfd, 2};
	}

	int sealed = cfg->mode == APF_SANDBOX_SEALED;
	uint64_t scratch_bytes = cfg->scratch_bytes ? cfg->scratch_bytes
						    : DEFAULT_SCRATCH_BYTES;
	uint64_t as = cfg->limits.address_space;
	if (sb->mem == SB_MEM_RLIMIT) {
		/* Nothing counts the scratch's pages: they come out of the
		 * memory limit at the scratch's full size, which is at most
		 * half of it, and RLIMIT_AS gets the rest. */
		uint64_t m = cfg->limits.memory;
		if (sealed && cfg->scratch && scratch_bytes > m / 2)
			scratch_bytes = m / 2;
		uint64_t room = m - (sealed && cfg->scratch ? scratch_bytes : 0);
		if (as && as > room)
			as = room;
	}
	p->rl_as.rlim_cur = p->rl_as.rlim_max = lim(as, 0);
	p->rl_nofile.rlim_cur = p->rl_nofile.rlim_max = (rlim_t)nofile;
	p->rl_nproc.rlim_cur = p->rl_nproc.rlim_max =
		lim(cfg->limits.processes, 1024);
	p->rl_fsize.rlim_cur = p->rl_fsize.rlim_max = lim(cfg->limits.file_size, 0);
	p->rl_cpu.rlim_cur = p->rl_cpu.rlim_max = lim(cfg->limits.cpu_seconds, 0);
	sb->memory_limit = as;
	sb->spawn_limit = cfg->limits.spawns ? cfg->limits.spawns : 1024;

	const char *host = cfg->hostname ? cfg->hostname : DEFAULT_HOSTNAME;
	if (strlen(host) >= sizeof p->hostname || !host[0])
		return apf_error(APF_EINPUT, "sandbox", "bad hostname");
	strcpy(p->hostname, host);
	/* A root supervisor with the capabilities to build the sandbox
	 * needs no user namespace for the mounts, and its program is not
	 * root inside one either: it becomes APF_SANDBOX_UID on the host.
	 * Any other (an unprivileged user; root in a container, which lacks
	 * CAP_SYS_ADMIN) maps APF_SANDBOX_UID, its only mappable user, to
	 * itself. */
	p->userns = sealed && !host_privileged();
	p->cg_fd = -1;
	snprintf(p->uid_map, sizeof p->uid_map, "%u %u 1\n", APF_SANDBOX_UID,
		 (unsigned)geteuid());
	snprintf(p->gid_map, sizeof p->gid_map, "%u %u 1\n", APF_SANDBOX_GID,
		 (unsigned)getegid());

	if (cfg->nmounts && !(p->mnts = calloc(cfg->nmounts, sizeof *p->mnts)))
		return apf_error(APF_ENOMEM, "sandbox", "out of memory");
	uint64_t copied = 0;
	for (size_t i = 0; i < cfg->nmounts; i++) {
		const struct apf_sandbox_mount *m = &cfg->mounts[i];
		if (m->access != APF_SANDBOX_READ && m->access != APF_SANDBOX_WRITE)
			return apf_error(APF_EINPUT, "sandbox",
					 "mount %s: access must be read or write",
					 m->source ? m->source : "(null)");
		if (!m->source)
			return apf_error(APF_EINPUT, "sandbox",
					 "mount without a source");
		char *real = realpath(m->source, NULL);
		if (!real) {
			if (m->optional && errno == ENOENT)
				continue;
			return apf_error_errno(APF_EINPUT, errno, "sandbox",
					       "mount source %s", m->source);
		}
		struct stat st;
		if (stat(real, &st) < 0) {
			free(real);
			return apf_error_errno(APF_EINPUT, errno, "sandbox",
					       "mount source %s", m->source);
		}
		if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode) &&
		    !S_ISCHR(st.st_mode)) {
			free(real);
			return apf_error(APF_EINPUT, "sandbox",
					 "mount source %s: not a directory, "
					 "regular file or character device",
					 m->source);
		}
		const char *target = m->target ? m->target : m->source;
		/* Unsealed, nothing is mounted: the program sees the source
		 * where it is, so that is what the policy must name. */
		const char *seen = sealed ? target : real;
		if (sealed && (rc = check_target("mount target", target, norm,
						 sizeof norm)) < 0) {
			free(real);
			return rc;
		}
		if ((rc = apf_sandbox_policy_add(sb, seen, m->access)) < 0) {
			free(real);
			return rc;
		}
		struct plan_mount *pm = &p->mnts[p->nmnts++];
		pm->src = join2("/oldroot", real);
		pm->dst = join2("/newroot", target);
		free(real);
		if (!pm->src || !pm->dst)
			return apf_error(APF_ENOMEM, "sandbox", "out of memory");
		pm->write = m->access == APF_SANDBOX_WRITE;
		pm->is_dir = S_ISDIR(st.st_mode);
		pm->is_dev = S_ISCHR(st.st_mode);
		pm->copy = sealed && m->copy;
		/* A copy cannot go inside a read-only bind made before it
		 * (the headers of an apf installed under the bound /usr):
		 * there it is bound too, which shows its source as a bind
		 * does. */
		for (size_t j = 0; pm->copy && j + 1 < p->nmnts; j++) {
			const struct plan_mount *o = &p->mnts[j];
			size_t l = strlen(o->dst);
			if (!o->copy && o->is_dir && !strncmp(pm->dst, o->dst, l) &&
			    pm->dst[l] == '/')
				pm->copy = 0;
		}
		if (pm->copy) {
			long long b = m->access == APF_SANDBOX_READ
					      ? tree_bytes(pm->src + 8, 0)
					      : -1;
			if (b < 0 || (uint64_t)(copied += (uint64_t)b) >
					     APF_SANDBOX_COPY_MAX)
				return apf_error(APF_EINPUT, "sandbox",
						 "mount source %s: a copy is of "
						 "directories and regular files, "
						 "read-only, at most %llu MiB",
						 m->source,
						 APF_SANDBOX_COPY_MAX >> 20);
		}
	}
	snprintf(p->root_opts, sizeof p->root_opts, "size=%llu,mode=0755",
		 (unsigned long long)((4ull << 20) + copied));
	if (cfg->scratch) {
		if (sealed) {
			if ((rc = check_target("scratch", cfg->scratch, norm,
					       sizeof norm)) < 0)
				return rc;
			if (!(p->scratch = join2("/newroot", cfg->scratch)))
				return apf_error(APF_ENOMEM, "sandbox",
						 "out of memory");
			/* The program's own, the one place it may write. */
			snprintf(p->scratch_opts, sizeof p->scratch_opts,
				 "size=%llu,mode=0755,uid=%u,gid=%u",
				 (unsigned long long)scratch_bytes,
				 APF_SANDBOX_UID, APF_SANDBOX_GID);
		} else {
			struct stat st;
			if (stat(cfg->scratch, &st) < 0 || !S_ISDIR(st.st_mode))
				return apf_error(APF_EINPUT, "sandbox",
						 "scratch %s: not a directory "
						 "(unsealed, it must exist)",
						 cfg->scratch);
		}
		if ((rc = apf_sandbox_policy_add(sb, cfg->scratch,
						 APF_SANDBOX_WRITE)) < 0)
			return rc;
	}
	for (size_t i = 0; i < cfg->npaths; i++)
		if ((rc = apf_sandbox_policy_add(sb, cfg->paths[i].prefix,
						 cfg->paths[i].access)) < 0)
			return rc;
	const char *cwd = cfg->cwd ? cfg->cwd : cfg->scratch ? cfg->scratch : "/";
	if (cwd[0] != '/')
		return apf_error(APF_EINPUT, "sandbox", "cwd %s: not absolute", cwd);
	if (!(p->cwd = apf_strdup(cwd)))
		return apf_error(APF_ENOMEM, "sandbox", "out of memory");

	struct sock_filter *prog;
	size_t len;
	if ((rc = apf_sandbox_filter_build(&prog, &len)) < 0)
		return rc;
	p->prog.filter = prog;
	p->prog.len = (unsigned short)len;
	return 0;
}

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

static int spawn(apf_sandbox **out, const struct apf_sandbox_config *cfg,
		 int probe)
{
	*out = NULL;
	apf_sandbox *sb = sandbox_alloc();
	if (!sb)
		return apf_error(APF_ENOMEM, "sandbox", "out of memory");
	sb->mode = cfg->mode;
	struct plan p;
	int rc = apf_sandbox_policy_defaults(sb);
	if (rc == 0)
		rc = apf_sandbox_memory_setup(sb, cfg->limits.memory);
	if (rc == 0)
		rc = plan_build(&p, cfg, sb);
	else
		memset(&p, 0, sizeof p);
	p.probe = probe;
	if (rc == 0)
		rc = notif_buffers(sb);
	int sv[2] = {-1, -1};
	if (rc == 0 && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		rc = apf_error_errno(APF_EIO, errno, "sandbox", "socketpair");
	int one = 1;
	if (rc == 0 && setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one) < 0)
		rc = apf_error_errno(APF_EIO, errno, "sandbox", "SO_PASSCRED");
	if (rc < 0) {
		if (sv[0] >= 0) {
			close(sv[0]);
			close(sv[1]);
		}
		plan_free(&p);
		apf_sandbox_free(sb);
		return rc;
	}
	p.chan = sv[1];
	uint64_t flags = 0;
	if (cfg->mode == APF_SANDBOX_SEALED)
		flags = (p.userns ? CLONE_NEWUSER : 0) | CLONE_NEWNS |
			CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET;
	if (cfg->mode == APF_SANDBOX_SEALED && sb->cgroup) {
		char *procs = join2(sb->cgroup, "/cgroup.procs");
		p.cg_fd = procs ? open(procs, O_WRONLY | O_CLOEXEC) : -1;
		if (p.cg_fd < 0) {
			int e = procs ? errno : ENOMEM;
			rc = apf_error_errno(APF_EABORT, e, "sandbox",
					     "memory cgroup: %s",
					     procs ? procs : "out of memory");
			free(procs);
			close(sv[0]);
			close(sv[1]);
			plan_free(&p);
			apf_sandbox_free(sb);
			return rc;
		}
		free(procs);
	}
	sb->t_start = apf_now_ns();
	int pidfd = -1;
	pid_t pid = clone_child(flags, &pidfd);
	if (pid == 0) {
		close(sv[0]);
		if (cfg->mode == APF_SANDBOX_SEALED)
			init_main(&p);
		program_main(&p);
	}
	int clone_errno = errno;
	close(sv[1]);
	if (p.cg_fd >= 0)
		close(p.cg_fd);
	sb->chan = sv[0];
	plan_free(&p);
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
	if (r == 1 && m.type == MSG_LISTENER && lfd >= 0 && prog > 0) {
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
		if (rc == 0) {
			*out = sb;
			return 0;
		}
		apf_sandbox_free(sb);
		return rc;
	}
	if (lfd >= 0)
		close(lfd);
	if (r == 1)
		note_message(sb, &m);
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
		rc = apf_error(APF_EABORT, "sandbox", "%s%s", sb->setup_error,
			       setup_hint(sb->setup_step, sb->setup_errno));
	else if (r == -ETIMEDOUT)
		rc = apf_error(APF_EABORT, "sandbox",
			       "setting up took more than %d s",
			       SETUP_TIMEOUT_MS / 1000);
	else if (r < 0)
		rc = apf_error(APF_EABORT, "sandbox", "setup channel: %s",
			       strerror(-r));
	else
		rc = apf_error(APF_EABORT, "sandbox",
			       "the sandbox ended during setup (%s %d)",
			       si.si_code == CLD_EXITED ? "exit status" : "signal",
			       si.si_status);
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

void apf_sandbox_kill_now(apf_sandbox *sb)
{
	if (sb->ended)
		return;
	if (sb->mode == APF_SANDBOX_SEALED) {
		/* init's death takes the whole pid namespace with it */
		if (sb->child_pidfd >= 0)
			pidfd_send_signal(sb->child_pidfd, SIGKILL, NULL, 0);
	} else if (sb->pid > 0) {
		kill(-sb->pid, SIGKILL);
	}
	if (sb->pidfd >= 0)
		pidfd_send_signal(sb->pidfd, SIGKILL, NULL, 0);
}

void apf_sandbox_record_fault(apf_sandbox *sb, const char *text, int path)
{
	if (!sb->faulted) {
		sb->faulted = 1;
		sb->fault_path = path;
		snprintf(sb->fault, sizeof sb->fault, "%s", text);
	}
	apf_sandbox_kill_now(sb);
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

void apf_sandbox_snapshot_vm(apf_sandbox *sb)
{
	char path[64], *data = NULL;
	size_t len;
	snprintf(path, sizeof path, "/proc/%d/status", (int)sb->pid);
	if (apf_file_read(&data, &len, path, 1 << 16) < 0) {
		apf_error_clear();
		return;
	}
	const char *v = strstr(data, "\nVmPeak:");
	if (v) {
		uint64_t kb = strtoull(v + 8, NULL, 10);
		if (kb * 1024 > sb->peak_vm)
			sb->peak_vm = kb * 1024;
	}
	free(data);
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
