/*
 * child.c: the sandbox's children, which only make system calls.
 *
 * Sealed: the supervisor (spawn.c) clone3()s a child into new mount, pid,
 * ipc, uts and network namespaces, and a new user namespace unless the
 * supervisor is root. That child is pid 1 of the new pid namespace, our
 * init: in its own user namespace it maps APF_SANDBOX_UID to the invoking
 * user; it builds the new root (see build_root), hides its command line
 * (the supervisor's, which names the run's host paths) and makes itself
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
 * Everything the children need is prepared before the clone (struct plan,
 * plan.c), so that they only make system calls: the supervisor may have
 * other threads, and after a fork only async-signal-safe calls are sound.
 * Each failing step sends its name and errno over the socketpair, so the
 * caller reads "sandbox: mount /usr on /usr: Permission denied", not a
 * bare status. Nothing here calls another file of the package.
 */
#include "sandbox/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

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
pid_t apf_sandbox_clone(uint64_t flags, int *pidfd)
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

_Noreturn void apf_sandbox_program_main(struct plan *p)
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

_Noreturn void apf_sandbox_init_main(struct plan *p)
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
	pid_t prog = apf_sandbox_clone(0, NULL);
	if (prog < 0)
		child_fail(chan, "fork", "the program", errno);
	if (prog == 0)
		apf_sandbox_program_main(p);
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

