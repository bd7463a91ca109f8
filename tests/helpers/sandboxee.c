/*
 * sandboxee: the program test_sandbox runs inside the sandbox. One action
 * per run, named by argv[1], reporting what it saw on stdout as "key value"
 * lines. With "wait" first, it prints "ready" and waits for one byte on
 * stdin before acting, so the test can lock the sandbox in between.
 *
 * Built without sanitizers (see the Makefile): under RLIMIT_AS,
 * AddressSanitizer cannot reserve its shadow memory, and LeakSanitizer's
 * exit-time check reads /proc/<parent>/task from a cloned tracer and
 * ptrace()s - faults, as they should be.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

static void out(const char *key, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void out(const char *key, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	dprintf(1, "%s %s\n", key, buf);
}

static const char *open_result(const char *path, int flags)
{
	static char buf[256];
	int fd = open(path, flags, 0644);
	if (fd < 0)
		return strerror(errno);
	char data[128];
	ssize_t n = (flags & O_ACCMODE) == O_RDONLY ? read(fd, data, sizeof data - 1) : 0;
	close(fd);
	if (n > 0) {
		data[n] = 0;
		data[strcspn(data, "\n")] = 0;
		snprintf(buf, sizeof buf, "ok %s", data);
		return buf;
	}
	return "ok";
}

static void list_dir(const char *key, const char *path, int numeric_only)
{
	char line[4096] = "";
	DIR *d = opendir(path);
	if (!d) {
		out(key, "%s", strerror(errno));
		return;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (numeric_only && (de->d_name[0] < '0' || de->d_name[0] > '9'))
			continue;
		strncat(line, " ", sizeof line - strlen(line) - 1);
		strncat(line, de->d_name, sizeof line - strlen(line) - 1);
	}
	closedir(d);
	out(key, "%s", line[0] ? line + 1 : "");
}

static void status_field(const char *name)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t n = strlen(name);
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, name, n) && line[n] == ':') {
			char *v = line + n + 1;
			v += strspn(v, " \t");
			v[strcspn(v, "\n")] = 0;
			out(name, "%s", v);
		}
	if (f)
		fclose(f);
}

static void view(int argc, char **argv)
{
	char host[256] = "";
	gethostname(host, sizeof host);
	out("pid", "%d", (int)getpid());
	out("ppid", "%d", (int)getppid());
	out("uid", "%d", (int)getuid());
	out("hostname", "%s", host);
	list_dir("root", "/", 0);
	list_dir("procs", "/proc", 1);
	list_dir("fds", "/proc/self/fd", 0);
	for (int i = 2; i < argc; i++)
		out("read", "%s %s", argv[i], open_result(argv[i], O_RDONLY));
	status_field("NoNewPrivs");
	status_field("Seccomp");
	status_field("CapEff");
	status_field("CapBnd");
	struct rlimit rl;
	getrlimit(RLIMIT_AS, &rl);
	out("rlimit_as", "%llu", (unsigned long long)rl.rlim_cur);
	getrlimit(RLIMIT_NOFILE, &rl);
	out("rlimit_nofile", "%llu", (unsigned long long)rl.rlim_cur);
	getrlimit(RLIMIT_CORE, &rl);
	out("rlimit_core", "%llu", (unsigned long long)rl.rlim_cur);
	/* The interfaces of this network namespace and whether each is up:
	 * names from /proc/net/dev (if_nameindex would need a netlink
	 * socket, which the sandbox forbids), flags by ioctl on an AF_UNIX
	 * socket. */
	FILE *f = fopen("/proc/net/dev", "r");
	int s = socket(AF_UNIX, SOCK_DGRAM, 0);
	char line[512];
	while (f && fgets(line, sizeof line, f)) {
		char *colon = strchr(line, ':');
		if (!colon)
			continue;
		*colon = 0;
		char *name = line + strspn(line, " ");
		struct ifreq r;
		memset(&r, 0, sizeof r);
		snprintf(r.ifr_name, sizeof r.ifr_name, "%s", name);
		int up = ioctl(s, SIOCGIFFLAGS, &r) == 0 && (r.ifr_flags & IFF_UP);
		out("if", "%s %s", name, up ? "up" : "down");
	}
	if (f)
		fclose(f);
	close(s);
}

/* The whole of a small file, NULs as spaces, on one line. */
static void show_file(const char *key, const char *path)
{
	char buf[2048];
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		out(key, "(%s)", strerror(errno));
		return;
	}
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == 0 || buf[i] == '\n')
			buf[i] = buf[i] ? '|' : ' ';
	out(key, "%s", buf);
}

/* Who the program is: its ids, capabilities and cgroup. */
static void ids(void)
{
	out("uid", "%d", (int)getuid());
	out("euid", "%d", (int)geteuid());
	out("gid", "%d", (int)getgid());
	gid_t groups[64];
	int n = getgroups(64, groups);
	out("groups", "%d", n);
	status_field("CapEff");
	status_field("CapPrm");
	status_field("CapAmb");
	show_file("cgroup", "/proc/self/cgroup");
}

/* One metadata change, "op:target": fchmod, fchown, fsetxattr and
 * utimensat on a descriptor number, chmod, chown, setxattr, mknod and
 * utimes on a path; chattr is FS_IOC_SETFLAGS on a descriptor. */
static void meta(const char *spec)
{
	char op[32];
	const char *colon = strchr(spec, ':');
	size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
	snprintf(op, sizeof op, "%.*s", (int)(n < 31 ? n : 31), spec);
	const char *t = colon ? colon + 1 : "";
	int fd = atoi(t);
	long r = -1;
	if (!strcmp(op, "fchmod"))
		r = fchmod(fd, 04755);
	else if (!strcmp(op, "fchown"))
		r = fchown(fd, 0, 0);
	else if (!strcmp(op, "fsetxattr"))
		r = syscall(SYS_fsetxattr, fd, "user.apf", "x", 1, 0);
	else if (!strcmp(op, "utimensat"))
		r = syscall(SYS_utimensat, fd, NULL, NULL, 0);
	else if (!strcmp(op, "chmod"))
		r = chmod(t, 0600);
	else if (!strcmp(op, "chown"))
		r = chown(t, 65534, 65534);
	else if (!strcmp(op, "setxattr"))
		r = syscall(SYS_setxattr, t, "user.apf", "x", 1, 0);
	else if (!strcmp(op, "mknod"))
		r = mknod(t, S_IFCHR | 0666, makedev(1, 3));
	else if (!strcmp(op, "utimes"))
		r = syscall(SYS_utimes, t, NULL);
	else if (!strcmp(op, "chattr")) {
		int flags = 0x10; /* FS_IMMUTABLE_FL */
		r = ioctl(fd, 0x40086602, &flags); /* FS_IOC_SETFLAGS */
	}
	out("meta", "%s %ld %s", op, r, r < 0 ? strerror(errno) : "");
}

/* Control sequences, then n more bytes of plain text. */
static void emit(long n)
{
	static const char ctl[] = "\x1b]0;owned\x07\x1b[2J\r\xc2\x9b\xe2\x80\xae"
				  "tab\there\nline two\n";
	if (write(1, ctl, sizeof ctl - 1) < 0)
		return;
	char block[4096];
	memset(block, 'a', sizeof block);
	for (long left = n; left > 0;) {
		size_t k = left < (long)sizeof block ? (size_t)left : sizeof block;
		ssize_t w = write(1, block, k);
		if (w <= 0)
			break;
		left -= w;
	}
	out("emitted", "%ld", n);
}

static void *spin(void *arg)
{
	volatile unsigned long *n = arg;
	for (;;)
		(*n)++;
	return NULL;
}

static void *idle(void *arg)
{
	(void)arg;
	return NULL;
}

static void oom(int by_abort)
{
	size_t total = 0;
	for (;;) {
		char *p = malloc(4 << 20);
		if (!p) {
			out("allocated", "%zu", total);
			if (by_abort)
				abort();
			exit(3);
		}
		memset(p, 1, 4 << 20);
		total += 4 << 20;
	}
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "wait")) {
		char c;
		out("ready", "%d", (int)getpid());
		if (read(0, &c, 1) != 1)
			return 100;
		argv++;
		argc--;
	}
	const char *a = argc > 1 ? argv[1] : "";
	const char *arg = argc > 2 ? argv[2] : "";
	if (!strcmp(a, "view")) {
		view(argc, argv);
	} else if (!strcmp(a, "exit")) {
		return atoi(arg);
	} else if (!strcmp(a, "read")) {
		out("read", "%s", open_result(arg, O_RDONLY));
	} else if (!strcmp(a, "write")) {
		out("write", "%s", open_result(arg, O_WRONLY | O_CREAT | O_TRUNC));
	} else if (!strcmp(a, "inet")) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		out("socket", "%d %s", s, s < 0 ? strerror(errno) : "");
	} else if (!strcmp(a, "fork")) {
		for (int i = 0; i < 10000; i++)
			if (fork() == 0)
				for (;;)
					pause();
		out("forked", "10000");
	} else if (!strcmp(a, "thread")) {
		pthread_t t;
		int rc = pthread_create(&t, NULL, idle, NULL);
		if (rc == 0)
			pthread_join(t, NULL);
		out("thread", "%s", rc ? strerror(rc) : "ok");
	} else if (!strcmp(a, "ptrace")) {
		long r = ptrace(PTRACE_TRACEME, 0, NULL, NULL);
		out("ptrace", "%ld %s", r, r < 0 ? strerror(errno) : "");
	} else if (!strcmp(a, "mount")) {
		int r = mount("none", "/mnt", "tmpfs", 0, NULL);
		out("mount", "%d %s", r, r < 0 ? strerror(errno) : "");
	} else if (!strcmp(a, "spin")) {
		int n = atoi(arg);
		static volatile unsigned long counters[16];
		for (int i = 0; i < n && i < 16; i++) {
			pthread_t t;
			pthread_create(&t, NULL, spin, (void *)&counters[i]);
		}
		out("spinning", "%d", n);
		char c;
		if (read(0, &c, 1) != 1)
			return 100;
	} else if (!strcmp(a, "daemon")) {
		if (fork() == 0)
			for (;;)
				pause();
		out("forked", "1");
		char c;
		if (read(0, &c, 1) != 1)
			return 100;
	} else if (!strcmp(a, "nr")) {
		long r = syscall(atol(arg), 0, 0, 0, 0, 0, 0);
		out("nr", "%ld %s", r, r < 0 ? strerror(errno) : "");
	} else if (!strcmp(a, "linkwrite")) {
		int r = symlink(arg, argc > 3 ? argv[3] : "");
		out("symlink", "%s", r < 0 ? strerror(errno) : "ok");
		out("write", "%s", open_result(argv[3], O_WRONLY | O_CREAT | O_TRUNC));
	} else if (!strcmp(a, "bigfile")) {
		static char block[64 << 10];
		int fd = open(arg, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		for (int i = 0; fd >= 0 && i < 32; i++)
			if (write(fd, block, sizeof block) < 0)
				break;
		out("bigfile", "%s", fd < 0 ? strerror(errno) : "written");
	} else if (!strcmp(a, "oom")) {
		oom(1);
	} else if (!strcmp(a, "oom-exit")) {
		oom(0);
	} else if (!strcmp(a, "ids")) {
		ids();
	} else if (!strcmp(a, "meta")) {
		meta(arg);
	} else if (!strcmp(a, "emit")) {
		emit(atol(arg));
	} else if (!strcmp(a, "segv")) {
		*(volatile int *)(uintptr_t)8 = 1;
	} else {
		out("error", "unknown action %s", a);
		return 99;
	}
	return 0;
}
