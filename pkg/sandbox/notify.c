/*
 * notify.c: the supervisor's half of the filter. Each notified syscall is
 * read (number, arguments, and any path or address in the caller's memory),
 * judged, and answered: continue, fail with an errno, or - for a fault -
 * kill the sandbox, remember the first fault, and fail the call.
 *
 * Paths are resolved as the kernel will resolve them, in the program's own
 * view: relative to its cwd or the dirfd (read back through /proc/<tid>/),
 * "." and "..", symlinks (an absolute one from the sandbox's root, reached as
 * /proc/<tid>/root when sealed), /proc/self and /proc/thread-self, and the
 * magic links under /proc/<pid> (fd/N, cwd, root, exe). What does not exist
 * is taken as written. The result is checked against the policy
 * (policy.c), which also records a fault and kills the sandbox. Memory is read before the notification
 * id is checked again, so a recycled pid cannot answer for the caller.
 */
#include "sandbox/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- one line of text --------------------------------------------------- */

struct text {
	char *s;
	size_t size, len;
};

static void tput(struct text *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void tput(struct text *t, const char *fmt, ...)
{
	if (t->len + 1 >= t->size)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(t->s + t->len, t->size - t->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		t->len += (size_t)n;
	if (t->len >= t->size)
		t->len = t->size - 1;
}

/* A quoted string as C would write it, cut after 200 bytes, so that a fault
 * is always one readable line whatever the program passed. */
static void tquote(struct text *t, const char *s)
{
	tput(t, "\"");
	size_t i = 0;
	for (; s[i] && i < 200; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			tput(t, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			tput(t, "\\x%02x", c);
		else
			tput(t, "%c", c);
	}
	tput(t, s[i] ? "\"..." : "\"");
}

/* ---- the caller's memory ------------------------------------------------ */

/* process_vm_readv, or /proc/<tid>/mem where a container's seccomp profile
 * refuses that syscall (the kernel's access check is the same). */
static int read_mem(pid_t tid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = {buf, len};
	struct iovec remote = {(void *)(uintptr_t)addr, len};
	ssize_t n = process_vm_readv(tid, &local, 1, &remote, 1, 0);
	if (n < 0 && (errno == ENOSYS || errno == EPERM)) {
		char path[64];
		snprintf(path, sizeof path, "/proc/%d/mem", (int)tid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		n = pread(fd, buf, len, (off_t)addr);
		int err = errno;
		close(fd);
		errno = err;
	}
	if (n < 0)
		return errno == EIO ? -EFAULT : -errno;
	return (size_t)n == len ? 0 : -EFAULT;
}

/* A NUL-terminated string, read page by page so that a string ending just
 * before an unmapped page still reads. Returns its length or -errno. */
static int read_str(pid_t tid, uint64_t addr, char *buf, size_t size)
{
	const uint64_t page = 4096;
	size_t got = 0;
	while (got < size) {
		uint64_t at = addr + got;
		size_t chunk = (size_t)(page - at % page);
		if (chunk > size - got)
			chunk = size - got;
		int r = read_mem(tid, at, buf + got, chunk);
		if (r < 0)
			return r;
		char *nul = memchr(buf + got, 0, chunk);
		if (nul)
			return (int)(nul - buf);
		got += chunk;
	}
	return -ENAMETOOLONG;
}

/* ---- resolving paths ---------------------------------------------------- */

struct who {
	apf_sandbox *sb;
	pid_t tid;        /* in the supervisor's numbering */
	int have_ids;
	long ns_tgid, ns_tid; /* in the program's numbering */
};

static long last_number(const char *data, const char *key)
{
	const char *p = strstr(data, key);
	if (!p)
		return -1;
	p += strlen(key);
	long v = -1;
	while (*p && *p != '\n') {
		char *end;
		long n = strtol(p, &end, 10);
		if (end == p)
			break;
		v = n;
		p = end;
	}
	return v;
}

static int load_ids(struct who *w)
{
	if (w->have_ids)
		return 0;
	char path[64], *data;
	size_t len;
	snprintf(path, sizeof path, "/proc/%d/status", (int)w->tid);
	if (apf_file_read(&data, &len, path, 1 << 16) < 0) {
		apf_error_clear();
		return -ESRCH;
	}
	w->ns_tgid = last_number(data, "\nNStgid:");
	w->ns_tid = last_number(data, "\nNSpid:");
	free(data);
	if (w->ns_tgid <= 0 || w->ns_tid <= 0)
		return -ESRCH;
	w->have_ids = 1;
	return 0;
}

/* Where the supervisor finds the program's path p. */
static int view(const struct who *w, const char *p, char *out, size_t size)
{
	int n = w->sb->mode == APF_SANDBOX_SEALED
		? snprintf(out, size, "/proc/%d/root%s", (int)w->tid, p)
		: snprintf(out, size, "%s", p);
	return n >= 0 && (size_t)n < size ? 0 : -ENAMETOOLONG;
}

static void pop(char *out, size_t *len)
{
	while (*len > 0 && out[*len - 1] != '/')
		(*len)--;
	if (*len > 0)
		(*len)--;
	out[*len] = 0;
}

/* out is /proc/<digits>/...: a symlink there is one of procfs's magic
 * links, whose target may be no path at all ("pipe:[123]"). */
static int in_proc_pid(const char *out)
{
	if (strncmp(out, "/proc/", 6) != 0 || out[6] < '0' || out[6] > '9')
		return 0;
	const char *p = out + 6;
	while (*p >= '0' && *p <= '9')
		p++;
	return *p == '/';
}

static int prepend(char *rem, size_t size, size_t *pos, const char *head)
{
	char tmp[2 * PATH_MAX];
	int n = snprintf(tmp, sizeof tmp, "%s/%s", head, rem + *pos);
	if (n < 0 || (size_t)n >= sizeof tmp || (size_t)n >= size)
		return -ENAMETOOLONG;
	memcpy(rem, tmp, (size_t)n + 1);
	*pos = 0;
	return 0;
}

static int resolve(struct who *w, const char *path, int follow_last,
		   char *out, size_t size, int *anon)
{
	char rem[2 * PATH_MAX];
	size_t pos = 0, olen = 0;
	int links = 0, lexical = 0, r;
	if (strlen(path) >= sizeof rem)
		return -ENAMETOOLONG;
	strcpy(rem, path);
	*anon = 0;
	out[0] = 0;
	for (;;) {
		while (rem[pos] == '/')
			pos++;
		if (!rem[pos])
			break;
		char comp[NAME_MAX + 1];
		size_t clen = strcspn(rem + pos, "/");
		if (clen > NAME_MAX)
			return -ENAMETOOLONG;
		memcpy(comp, rem + pos, clen);
		comp[clen] = 0;
		pos += clen;
		if (!strcmp(comp, "."))
			continue;
		if (!strcmp(comp, "..")) {
			pop(out, &olen);
			continue;
		}
		if (olen == 5 && !memcmp(out, "/proc", 5) &&
		    (!strcmp(comp, "self") || !strcmp(comp, "thread-self"))) {
			if ((r = load_ids(w)) < 0)
				return r;
			if (comp[0] == 't') {
				char task[48];
				snprintf(task, sizeof task, "task/%ld", w->ns_tid);
				if ((r = prepend(rem, sizeof rem, &pos, task)) < 0)
					return r;
			}
			snprintf(comp, sizeof comp, "%ld", w->ns_tgid);
			clen = strlen(comp);
		}
		size_t q = pos;
		while (rem[q] == '/')
			q++;
		int last = rem[q] == 0, trailing = last && q > pos;
		if (olen + 1 + clen >= size)
			return -ENAMETOOLONG;
		out[olen++] = '/';
		memcpy(out + olen, comp, clen + 1);
		olen += clen;
		if (lexical || (last && !follow_last && !trailing))
			continue;
		char vp[PATH_MAX + 64];
		struct stat st;
		if ((r = view(w, out, vp, sizeof vp)) < 0)
			return r;
		if (lstat(vp, &st) < 0) {
			lexical = 1; /* not there (or not ours to see): as written */
			continue;
		}
		if (!S_ISLNK(st.st_mode))
			continue;
		char target[PATH_MAX];
		ssize_t n = readlink(vp, target, sizeof target - 1);
		if (n <= 0 || ++links > 40) {
			lexical = 1;
			continue;
		}
		target[n] = 0;
		if (in_proc_pid(out) &&
		    (target[0] != '/' || !strncmp(target, "/memfd:", 7))) {
			if (last) {
				*anon = 1;
				return 0;
			}
			lexical = 1;
			continue;
		}
		pop(out, &olen);
		if (target[0] == '/') {
			olen = 0;
			out[0] = 0;
		}
		if ((r = prepend(rem, sizeof rem, &pos, target)) < 0)
			return r;
	}
	if (olen == 0)
		strcpy(out, "/");
	/* The policy speaks of /proc/self; the program's own number is the
	 * same directory. */
	if (!strncmp(out, "/proc/", 6) && out[6] >= '0' && out[6] <= '9' &&
	    load_ids(w) == 0) {
		char *end;
		long n = strtol(out + 6, &end, 10);
		if ((n == w->ns_tgid || n == w->ns_tid) && (!*end || *end == '/')) {
			char tmp[PATH_MAX];
			int k = snprintf(tmp, sizeof tmp, "/proc/self%s", end);
			if (k > 0 && (size_t)k < size)
				memcpy(out, tmp, (size_t)k + 1);
		}
	}
	return 0;
}

struct resolved {
	char lex[PATH_MAX];   /* absolute, with "." and ".." folded */
	char canon[PATH_MAX]; /* where it leads */
	int anon;             /* an object with no path (pipe, socket) */
	int null;             /* the pointer was NULL */
};

/* The directory a relative path starts from, as the program sees it. */
static int base_dir(const struct who *w, int dirfd, char *out, size_t size)
{
	char link[64];
	if (dirfd == AT_FDCWD)
		snprintf(link, sizeof link, "/proc/%d/cwd", (int)w->tid);
	else
		snprintf(link, sizeof link, "/proc/%d/fd/%d", (int)w->tid, dirfd);
	ssize_t n = readlink(link, out, size - 1);
	if (n < 0)
		return errno == ENOENT ? -EBADF : -errno;
	out[n] = 0;
	return out[0] == '/' ? 0 : -ENOTDIR;
}

static int get_path(struct who *w, int dirfd, uint64_t addr, int empty_ok,
		    int follow, struct resolved *r)
{
	char raw[PATH_MAX], base[PATH_MAX], joined[2 * PATH_MAX + 2];
	r->null = r->anon = 0;
	r->lex[0] = r->canon[0] = 0;
	if (addr == 0) {
		r->null = 1;
		return 0;
	}
	int n = read_str(w->tid, addr, raw, sizeof raw);
	if (n < 0)
		return n;
	if (!raw[0] && !empty_ok)
		return -ENOENT;
	base[0] = 0;
	if (raw[0] != '/') {
		int b = base_dir(w, dirfd, base, sizeof base);
		if (b < 0)
			return b;
	}
	snprintf(joined, sizeof joined, "%s/%s", base, raw);
	if (apf_sandbox_normalize(r->lex, sizeof r->lex, joined) < 0)
		return -ENAMETOOLONG;
	return resolve(w, joined, follow, r->canon, sizeof r->canon, &r->anon);
}

/* NULL when the policy allows it, else why not. */
static const char *judge(const apf_sandbox *sb, const struct resolved *r,
			 int write)
{
	if (r->anon || r->null)
		return NULL;
	int above;
	int access = apf_sandbox_policy_access(sb, r->canon, &above);
	if (write)
		return access == APF_SANDBOX_WRITE ? NULL
		       : access ? "writes to a read-only path"
				: "outside the sandbox";
	return access || above ? NULL : "outside the sandbox";
}

/* ---- naming things ------------------------------------------------------ */

struct flagname {
	uint64_t bit;
	const char *name;
};

static void tflags(struct text *t, uint64_t v, const struct flagname *names,
		   size_t n, int first)
{
	for (size_t i = 0; i < n; i++)
		if ((v & names[i].bit) == names[i].bit && names[i].bit) {
			tput(t, "%s%s", first ? "" : "|", names[i].name);
			v &= ~names[i].bit;
			first = 0;
		}
	if (v)
		tput(t, "%s0x%llx", first ? "" : "|", (unsigned long long)v);
	else if (first)
		tput(t, "0");
}

static void topen_flags(struct text *t, int f)
{
	static const struct flagname names[] = {
		{O_TMPFILE, "O_TMPFILE"}, {O_SYNC, "O_SYNC"},
		{O_CREAT, "O_CREAT"},     {O_EXCL, "O_EXCL"},
		{O_NOCTTY, "O_NOCTTY"},   {O_TRUNC, "O_TRUNC"},
		{O_APPEND, "O_APPEND"},   {O_NONBLOCK, "O_NONBLOCK"},
		{O_DSYNC, "O_DSYNC"},     {O_DIRECT, "O_DIRECT"},
		{O_DIRECTORY, "O_DIRECTORY"}, {O_NOFOLLOW, "O_NOFOLLOW"},
		{O_NOATIME, "O_NOATIME"}, {O_CLOEXEC, "O_CLOEXEC"},
		{O_PATH, "O_PATH"},       {0100000, "O_LARGEFILE"},
	};
	int acc = f & O_ACCMODE;
	tput(t, "%s", acc == O_RDONLY ? "O_RDONLY"
		      : acc == O_WRONLY ? "O_WRONLY"
		      : acc == O_RDWR ? "O_RDWR" : "O_ACCMODE");
	uint64_t rest = (unsigned)f & ~(unsigned)O_ACCMODE;
	if (rest)
		tflags(t, rest, names, sizeof names / sizeof names[0], 0);
}

static void tclone_flags(struct text *t, uint64_t f, int with_signal)
{
	static const struct flagname names[] = {
		{CLONE_VM, "CLONE_VM"}, {CLONE_FS, "CLONE_FS"},
		{CLONE_FILES, "CLONE_FILES"}, {CLONE_SIGHAND, "CLONE_SIGHAND"},
		{CLONE_PIDFD, "CLONE_PIDFD"}, {CLONE_PTRACE, "CLONE_PTRACE"},
		{CLONE_VFORK, "CLONE_VFORK"}, {CLONE_PARENT, "CLONE_PARENT"},
		{CLONE_THREAD, "CLONE_THREAD"}, {CLONE_NEWNS, "CLONE_NEWNS"},
		{CLONE_SYSVSEM, "CLONE_SYSVSEM"}, {CLONE_SETTLS, "CLONE_SETTLS"},
		{CLONE_PARENT_SETTID, "CLONE_PARENT_SETTID"},
		{CLONE_CHILD_CLEARTID, "CLONE_CHILD_CLEARTID"},
		{CLONE_UNTRACED, "CLONE_UNTRACED"},
		{CLONE_CHILD_SETTID, "CLONE_CHILD_SETTID"},
		{CLONE_NEWCGROUP, "CLONE_NEWCGROUP"}, {CLONE_NEWUTS, "CLONE_NEWUTS"},
		{CLONE_NEWIPC, "CLONE_NEWIPC"}, {CLONE_NEWUSER, "CLONE_NEWUSER"},
		{CLONE_NEWPID, "CLONE_NEWPID"}, {CLONE_NEWNET, "CLONE_NEWNET"},
		{CLONE_IO, "CLONE_IO"},
	};
	int first = 1;
	if (with_signal && (f & 0xff)) {
		const char *abbrev = sigabbrev_np((int)(f & 0xff));
		if (abbrev)
			tput(t, "SIG%s", abbrev);
		else
			tput(t, "%d", (int)(f & 0xff));
		f &= ~(uint64_t)0xff;
		first = 0;
	}
	tflags(t, f, names, sizeof names / sizeof names[0], first);
}

static const char *family_name(int f)
{
	switch (f) {
	case AF_UNSPEC: return "AF_UNSPEC";
	case AF_UNIX: return "AF_UNIX";
	case AF_INET: return "AF_INET";
	case AF_INET6: return "AF_INET6";
	case AF_NETLINK: return "AF_NETLINK";
	case AF_PACKET: return "AF_PACKET";
	case AF_KEY: return "AF_KEY";
	case AF_ALG: return "AF_ALG";
	case AF_VSOCK: return "AF_VSOCK";
	case AF_XDP: return "AF_XDP";
	case AF_BLUETOOTH: return "AF_BLUETOOTH";
	case AF_CAN: return "AF_CAN";
	case AF_TIPC: return "AF_TIPC";
	case AF_RDS: return "AF_RDS";
	case AF_NFC: return "AF_NFC";
	case AF_SMC: return "AF_SMC";
	default: return NULL;
	}
}

static void tfamily(struct text *t, int f)
{
	const char *n = family_name(f);
	if (n)
		tput(t, "%s", n);
	else
		tput(t, "family %d", f);
}

static void tsocktype(struct text *t, int type)
{
	static const char *const kinds[] = {NULL, "SOCK_STREAM", "SOCK_DGRAM",
					    "SOCK_RAW", "SOCK_RDM",
					    "SOCK_SEQPACKET"};
	int k = type & 0xf;
	if (k > 0 && k < 6)
		tput(t, "%s", kinds[k]);
	else if (k == SOCK_PACKET)
		tput(t, "SOCK_PACKET");
	else
		tput(t, "%d", k);
	if (type & SOCK_NONBLOCK)
		tput(t, "|SOCK_NONBLOCK");
	if (type & SOCK_CLOEXEC)
		tput(t, "|SOCK_CLOEXEC");
}

static void tsignal(struct text *t, int sig)
{
	const char *abbrev = sig > 0 ? sigabbrev_np(sig) : NULL;
	if (abbrev)
		tput(t, "SIG%s", abbrev);
	else
		tput(t, "%d", sig);
}

static const char *ptrace_request(long r)
{
	switch (r) {
	case 0: return "PTRACE_TRACEME";
	case 1: return "PTRACE_PEEKTEXT";
	case 2: return "PTRACE_PEEKDATA";
	case 3: return "PTRACE_PEEKUSER";
	case 4: return "PTRACE_POKETEXT";
	case 5: return "PTRACE_POKEDATA";
	case 6: return "PTRACE_POKEUSER";
	case 7: return "PTRACE_CONT";
	case 8: return "PTRACE_KILL";
	case 9: return "PTRACE_SINGLESTEP";
	case 12: return "PTRACE_GETREGS";
	case 13: return "PTRACE_SETREGS";
	case 16: return "PTRACE_ATTACH";
	case 17: return "PTRACE_DETACH";
	case 24: return "PTRACE_SYSCALL";
	case 0x4200: return "PTRACE_SETOPTIONS";
	case 0x4206: return "PTRACE_SEIZE";
	case 0x4207: return "PTRACE_INTERRUPT";
	default: return NULL;
	}
}

/* name(arg, ...) from the table's argument letters. */
static void tcall(struct text *t, pid_t tid, const char *name,
		  const char *fmt, const uint64_t *a)
{
	tput(t, "%s(", name);
	for (int i = 0; fmt && fmt[i] && i < 6; i++) {
		if (i)
			tput(t, ", ");
		char s[PATH_MAX];
		const char *pr;
		switch (fmt[i]) {
		case 'd':
			tput(t, "%d", (int)a[i]);
			break;
		case 's':
			if (a[i] == 0)
				tput(t, "NULL");
			else if (read_str(tid, a[i], s, sizeof s) >= 0)
				tquote(t, s);
			else
				tput(t, "0x%llx", (unsigned long long)a[i]);
			break;
		case 'P':
			pr = ptrace_request((long)a[i]);
			if (pr)
				tput(t, "%s", pr);
			else
				tput(t, "%ld", (long)a[i]);
			break;
		case 'c':
			tclone_flags(t, a[i], 0);
			break;
		default:
			tput(t, "0x%llx", (unsigned long long)a[i]);
		}
	}
	tput(t, ")");
}

/* ---- decisions ---------------------------------------------------------- */

struct decision {
	enum apf_sandbox_verdict verdict;
	int err;        /* REFUSED, FAULT: the errno the call fails with */
	int first_exec; /* this is the program's own execve */
	int path;       /* FAULT: a path the policy refuses, or a target
			   outside the sandbox (the log's fault kind "path") */
};

static const struct decision ALLOW = {APF_SANDBOX_ALLOWED, 0, 0, 0};

static struct decision refuse(int err)
{
	return (struct decision){APF_SANDBOX_REFUSED, err, 0, 0};
}

static struct decision fault(void)
{
	return (struct decision){APF_SANDBOX_FAULT, EPERM, 0, 0};
}

static struct decision path_fault(void)
{
	return (struct decision){APF_SANDBOX_FAULT, EPERM, 0, 1};
}

static int open_writes(uint64_t f)
{
	return (f & O_ACCMODE) != O_RDONLY || (f & (O_CREAT | O_TRUNC)) ||
	       (f & O_TMPFILE) == O_TMPFILE;
}

static int open_follows(uint64_t f)
{
	return !(f & O_NOFOLLOW) && (f & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL);
}

/* Formats `name("path"[, "path2"][, FLAGS]) why` for the path at which. */
static void path_text(struct text *t, const struct sc_info *s,
		      const struct resolved *r, int npaths, int which,
		      int open_flags, int show_flags, const char *why)
{
	tput(t, "%s(", s->name);
	for (int i = 0; i < npaths; i++) {
		if (i)
			tput(t, ", ");
		tquote(t, r[i].lex);
	}
	if (show_flags) {
		tput(t, ", ");
		topen_flags(t, open_flags);
	}
	tput(t, ") %s", why);
	if (npaths > 1 || strcmp(r[which].lex, r[which].canon)) {
		tput(t, " (");
		tquote(t, r[which].canon);
		tput(t, ")");
	}
}

static struct decision handle_path(struct who *w, const struct sc_info *s,
				   const uint64_t *a, struct text *t)
{
	uint64_t flags = s->flags >= 0 ? a[(int)s->flags] : 0;
	int write = 1, follow = 1, empty_ok = 0, show_flags = 0;
	int write2 = 1, follow2 = 0;
	switch (s->kind) {
	case P_OPENAT2: {
		struct open_how how;
		if (read_mem(w->tid, flags, &how, sizeof how.flags) < 0)
			return refuse(EFAULT);
		flags = how.flags;
	}
		/* fall through */
	case P_OPEN:
		write = open_writes(flags);
		follow = open_follows(flags);
		show_flags = 1;
		break;
	case P_WRITE:
		break;
	case P_WRITE_NOFOLLOW:
		follow = 0;
		break;
	case P_WRITE_AT:
		follow = !(flags & AT_SYMLINK_NOFOLLOW);
		empty_ok = (flags & AT_EMPTY_PATH) != 0;
		break;
	case P_LINK:
		write = 0;
		follow = (flags & AT_SYMLINK_FOLLOW) != 0;
		empty_ok = (flags & AT_EMPTY_PATH) != 0;
		break;
	case P_RENAME:
		follow = 0;
		break;
	case P_EXEC:
		write = 0;
		follow = !(flags & AT_SYMLINK_NOFOLLOW);
		empty_ok = (flags & AT_EMPTY_PATH) != 0;
		break;
	}
	int dirfd = s->dirfd >= 0 ? (int)a[(int)s->dirfd] : AT_FDCWD;
	struct resolved r[2];
	int npaths = s->path2 >= 0 ? 2 : 1;
	int rc = get_path(w, dirfd, a[(int)s->path], empty_ok, follow, &r[0]);
	if (rc < 0)
		return refuse(-rc);
	/* utimensat(fd, NULL, ...) works on the descriptor, which was opened
	 * under the policy already. */
	if (r[0].null && s->kind == P_WRITE_AT)
		return ALLOW;
	if (r[0].null)
		return refuse(EFAULT);
	if (npaths == 2) {
		int dirfd2 = s->dirfd2 >= 0 ? (int)a[(int)s->dirfd2] : AT_FDCWD;
		rc = get_path(w, dirfd2, a[(int)s->path2], 0, follow2, &r[1]);
		if (rc < 0)
			return refuse(-rc);
		if (r[1].null)
			return refuse(EFAULT);
	}
	int writes[2] = {write, write2};
	for (int i = 0; i < npaths; i++) {
		const char *why = judge(w->sb, &r[i], writes[i]);
		if (why) {
			path_text(t, s, r, npaths, i, (int)flags, show_flags, why);
			return path_fault();
		}
	}
	return ALLOW;
}

static int sandbox_has(const apf_sandbox *sb, long pid)
{
	if (pid == sb->pid)
		return 1;
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%ld/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	char state;
	int ppid, pgrp;
	return p && sscanf(p + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 &&
	       pgrp == sb->pid;
}

static int fatal_signal(int sig)
{
	switch (sig) {
	case SIGABRT: case SIGSEGV: case SIGBUS: case SIGILL: case SIGFPE:
	case SIGKILL: case SIGTERM: case SIGTRAP: case SIGQUIT: case SIGSYS:
		return 1;
	default:
		return 0;
	}
}

static struct decision handle_pid(struct who *w, const struct sc_info *s,
				  const uint64_t *a, struct text *t)
{
	apf_sandbox *sb = w->sb;
	int pa = s->args[0] - '0';
	int sa = s->args[1] >= '0' && s->args[1] <= '9' ? s->args[1] - '0' : -1;
	long target = (int)a[pa];
	int sig = sa >= 0 ? (int)a[sa] : 0;
	if (sa >= 0 && fatal_signal(sig))
		apf_sandbox_snapshot_vm(sb);
	if (sb->mode == APF_SANDBOX_SEALED)
		return ALLOW; /* the pid namespace holds nothing else */
	int ok;
	if (!strcmp(s->name, "kill"))
		ok = target == 0 || (target < -1 && -target == sb->pid) ||
		     (target > 0 && sandbox_has(sb, target));
	else if (!strcmp(s->name, "setpriority") || !strcmp(s->name, "ioprio_set")) {
		int which = (int)a[0];
		int process = s->name[0] == 's' ? 0 : 1; /* PRIO_ / IOPRIO_WHO_ */
		ok = target == 0 ||
		     (which == process && sandbox_has(sb, target)) ||
		     (which == process + 1 && target == sb->pid);
	} else {
		ok = target > 0 && sandbox_has(sb, target);
	}
	if (ok)
		return ALLOW;
	tput(t, "%s(%ld", s->name, target);
	if (sa >= 0) {
		tput(t, ", ");
		tsignal(t, sig);
	}
	tput(t, ") targets a process outside the sandbox");
	return path_fault();
}

static struct decision handle_sockaddr(struct who *w, const struct sc_info *s,
				       const uint64_t *a, struct text *t)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	size_t len = (size_t)(unsigned)a[2];
	if (len > sizeof ss)
		len = sizeof ss;
	if (len < sizeof(sa_family_t))
		return ALLOW; /* the kernel says EINVAL */
	if (read_mem(w->tid, a[1], &ss, len) < 0)
		return refuse(EFAULT);
	int family = ss.ss_family;
	if (family == AF_UNSPEC)
		return ALLOW;
	if (family == AF_UNIX) {
		struct sockaddr_un *un = (struct sockaddr_un *)&ss;
		size_t plen = len - offsetof(struct sockaddr_un, sun_path);
		if (plen == 0)
			return ALLOW; /* autobind */
		if (un->sun_path[0] == 0) {
			/* Abstract names live in the network namespace: a
			 * sealed sandbox has its own, empty one. */
			if (w->sb->mode == APF_SANDBOX_SEALED)
				return ALLOW;
			char name[sizeof un->sun_path];
			memcpy(name, un->sun_path + 1, plen - 1);
			name[plen - 1] = 0;
			tput(t, "%s(@", s->name);
			tquote(t, name);
			tput(t, ") reaches an abstract socket outside the sandbox");
			return path_fault();
		}
		char path[sizeof un->sun_path + 1];
		memcpy(path, un->sun_path, plen);
		path[plen < sizeof path ? plen : sizeof path - 1] = 0;
		/* Connecting needs write permission on the socket file;
		 * binding creates it. Either way it is a write. */
		struct resolved r;
		int follow = !strcmp(s->name, "connect");
		char raw[PATH_MAX], base[PATH_MAX];
		int rc = 0;
		base[0] = 0;
		if (path[0] != '/')
			rc = base_dir(w, AT_FDCWD, base, sizeof base);
		if (rc < 0)
			return refuse(-rc);
		snprintf(raw, sizeof raw, "%s/%s", base, path);
		r.null = 0;
		if (apf_sandbox_normalize(r.lex, sizeof r.lex, raw) < 0 ||
		    resolve(w, raw, follow, r.canon, sizeof r.canon, &r.anon) < 0)
			return refuse(ENAMETOOLONG);
		const char *why = judge(w->sb, &r, 1);
		if (!why)
			return ALLOW;
		path_text(t, s, &r, 1, 0, 0, 0, why);
		return path_fault();
	}
	tput(t, "%s(", s->name);
	tfamily(t, family);
	char host[INET6_ADDRSTRLEN];
	if (family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
		tput(t, " %s:%u", host, ntohs(in->sin_port));
	} else if (family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
		tput(t, " [%s]:%u", host, ntohs(in6->sin6_port));
	}
	tput(t, ") reaches the network");
	return fault();
}

static struct decision spawned(apf_sandbox *sb, struct text *t,
			       const char *call)
{
	if (++sb->spawns > sb->spawn_limit) {
		tput(t, "%s exceeds the limit of %llu processes and threads",
		     call, (unsigned long long)sb->spawn_limit);
		return fault();
	}
	return ALLOW;
}

/* memfd_create: the runner passes every memfd the program needs before it
 * locks; one made after that is memory the rlimit fallback cannot count,
 * and a training step has no use for it whatever counts it. */
static struct decision handle_memfd(struct who *w, const uint64_t *a,
				    int locked, struct text *t)
{
	if (!locked)
		return ALLOW;
	char name[256];
	tput(t, "memfd_create(");
	if (read_str(w->tid, a[0], name, sizeof name) >= 0)
		tquote(t, name);
	else
		tput(t, "0x%llx", (unsigned long long)a[0]);
	tput(t, ", 0x%x) in the locked phase: memory the runner did not pass",
	     (unsigned)a[1]);
	return fault();
}

/* shmget: a segment holds memory with no descriptor and no mapping. Sealed,
 * it lives in the sandbox's IPC namespace and dies with it, and a cgroup
 * counts its pages; without a cgroup nothing counts them, and unsealed it
 * would outlive the sandbox on the host. */
static struct decision handle_shm(struct who *w, const uint64_t *a,
				  struct text *t)
{
	const apf_sandbox *sb = w->sb;
	int sealed = sb->mode == APF_SANDBOX_SEALED;
	if (sealed && sb->mem != SB_MEM_RLIMIT)
		return ALLOW;
	tput(t, "shmget(0x%llx, %llu, 0x%llx) creates SysV shared memory %s",
	     (unsigned long long)a[0], (unsigned long long)a[1],
	     (unsigned long long)a[2],
	     sealed ? "that the memory limit cannot count (no cgroup)"
		    : "that would outlive the sandbox");
	return fault();
}

/* A metadata change (SC_META, and chattr's ioctls) is never made: its
 * descriptor forms reach files no path check sees (a passed descriptor of
 * the host's), and nothing a sandbox runs needs one. Refused in the set-up
 * phase, where a linker setting its output's mode copes with EPERM; a
 * fault once locked, where only the submission's code runs. */
static struct decision handle_meta(int locked, const char *call,
				   struct text *t)
{
	tput(t, "%s changes a file's metadata%s", call,
	     locked ? " in the locked phase" : "");
	return locked ? fault() : refuse(EPERM);
}

/* name(fd, "path", ...) of a metadata call, as much as names it. */
static void tmeta_call(struct text *t, pid_t tid, const struct sc_info *s,
		       const uint64_t *a)
{
	tput(t, "%s(", s->name);
	if (s->dirfd >= 0) {
		int fd = (int)a[(int)s->dirfd];
		if (fd == AT_FDCWD)
			tput(t, "AT_FDCWD");
		else
			tput(t, "%d", fd);
	}
	if (s->path >= 0) {
		char path[PATH_MAX];
		if (s->dirfd >= 0)
			tput(t, ", ");
		if (a[(int)s->path] == 0)
			tput(t, "NULL");
		else if (read_str(tid, a[(int)s->path], path, sizeof path) >= 0)
			tquote(t, path);
		else
			tput(t, "0x%llx", (unsigned long long)a[(int)s->path]);
	}
	/* chmod's mode, the one argument worth showing */
	if (!strcmp(s->name, "chmod") || !strcmp(s->name, "fchmod"))
		tput(t, ", 0%llo", (unsigned long long)a[1]);
	else if (!strcmp(s->name, "fchmodat") || !strcmp(s->name, "fchmodat2"))
		tput(t, ", 0%llo", (unsigned long long)a[2]);
	tput(t, ")");
}

static struct decision decide(apf_sandbox *sb, const struct seccomp_notif *req,
			      apf_sandbox_event *ev, struct text *t)
{
	uint64_t a[6];
	for (int i = 0; i < 6; i++)
		a[i] = req->data.args[i];
	const struct sc_info *s = apf_sandbox_syscall_lookup(req->data.nr);
	struct who w = {sb, (pid_t)req->pid, 0, 0, 0};
	if (!s) {
		ev->name = "unknown";
		tput(t, "syscall %d is unknown to the sandbox", req->data.nr);
		return fault();
	}
	ev->name = s->name;
	int locked = sb->phase == APF_SANDBOX_LOCKED;
	char call[APF_SANDBOX_TEXT_MAX];
	struct text ct = {call, sizeof call, 0};
	switch (s->cls) {
	case SC_ALLOW:
		return ALLOW;
	case SC_FORBIDDEN:
		tcall(t, w.tid, s->name, s->args, a);
		tput(t, " is forbidden");
		return fault();
	case SC_SOCKET:
		if ((int)a[0] == AF_UNIX)
			return ALLOW;
		tput(t, "%s(", s->name);
		tfamily(t, (int)a[0]);
		tput(t, ", ");
		tsocktype(t, (int)a[1]);
		tput(t, ", %d) opens a socket other than AF_UNIX", (int)a[2]);
		return fault();
	case SC_IOCTL:
		if ((unsigned)a[1] == TIOCSTI || (unsigned)a[1] == TIOCLINUX) {
			tput(t, "ioctl(%d, %s) injects terminal input", (int)a[0],
			     (unsigned)a[1] == TIOCSTI ? "TIOCSTI" : "TIOCLINUX");
			return fault();
		}
		tput(&ct, "ioctl(%d, %s)", (int)a[0],
		     (unsigned)a[1] == (unsigned)FS_IOC_FSSETXATTR
			     ? "FS_IOC_FSSETXATTR"
			     : "FS_IOC_SETFLAGS");
		return handle_meta(locked, call, t);
	case SC_META:
		tmeta_call(&ct, w.tid, s, a);
		return handle_meta(locked, call, t);
	case SC_CLONE: {
		uint64_t f = a[0];
		tput(&ct, "clone(");
		tclone_flags(&ct, f, 1);
		tput(&ct, ")");
		const uint64_t ns = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS |
				    CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
				    CLONE_NEWNET;
		if (f & ns) {
			tput(t, "%s creates namespaces", call);
			return fault();
		}
		if (locked) {
			tput(t, "%s creates a %s in the locked phase", call,
			     f & CLONE_THREAD ? "thread" : "process");
			return fault();
		}
		return spawned(sb, t, call);
	}
	case SC_CLONE3:
		if (locked) {
			/* A fault whatever the flags; they only name it. */
			uint64_t f;
			if (a[1] >= sizeof f &&
			    read_mem(w.tid, a[0], &f, sizeof f) == 0) {
				tput(t, "clone3(");
				tclone_flags(t, f, 0);
				tput(t, ") creates a %s in the locked phase",
				     f & CLONE_THREAD ? "thread" : "process");
			} else {
				tput(t, "clone3() creates a process or thread in "
					"the locked phase");
			}
			return fault();
		}
		/* Its flags are in memory the caller could change after we
		 * read them; without clone3, glibc uses clone, whose flags
		 * the kernel holds in registers. */
		return refuse(ENOSYS);
	case SC_FORK:
		tput(&ct, "%s()", s->name);
		if (locked) {
			tput(t, "%s creates a process in the locked phase", call);
			return fault();
		}
		return spawned(sb, t, call);
	case SC_EXEC: {
		int first = !sb->exec_done && w.tid == sb->pid;
		struct text pt = {call, sizeof call, 0};
		if (locked && !first) {
			char path[PATH_MAX];
			uint64_t p = a[(int)s->path];
			tput(t, "%s(", s->name);
			if (read_str(w.tid, p, path, sizeof path) >= 0)
				tquote(t, path);
			tput(t, ") in the locked phase");
			return path_fault();
		}
		struct decision d = handle_path(&w, s, a, &pt);
		if (d.verdict == APF_SANDBOX_FAULT)
			tput(t, "%s", call);
		d.first_exec = first;
		return d;
	}
	case SC_PATH:
		return handle_path(&w, s, a, t);
	case SC_SOCKADDR:
		return handle_sockaddr(&w, s, a, t);
	case SC_PID:
		return handle_pid(&w, s, a, t);
	case SC_EXIT:
		apf_sandbox_snapshot_vm(sb);
		return ALLOW;
	case SC_MEMFD:
		return handle_memfd(&w, a, locked, t);
	case SC_SHM:
		return handle_shm(&w, a, t);
	}
	return ALLOW;
}

int apf_sandbox_notify_handle(apf_sandbox *sb, apf_sandbox_event *ev)
{
	memset(ev, 0, sizeof *ev);
	ev->verdict = APF_SANDBOX_NONE;
	ev->name = "";
	if (sb->notify_fd < 0 || sb->notify_hup)
		return 0;
	struct pollfd pf = {sb->notify_fd, POLLIN, 0};
	int r = poll(&pf, 1, 0);
	if (r < 0)
		return errno == EINTR ? 0
				      : apf_error_errno(APF_EINTERNAL, errno,
							"sandbox", "poll");
	if (r == 0)
		return 0;
	if (!(pf.revents & POLLIN)) {
		if (pf.revents & (POLLHUP | POLLERR | POLLNVAL))
			sb->notify_hup = 1;
		return 0;
	}
	struct seccomp_notif *req = sb->req;
	memset(req, 0, sb->req_size);
	if (ioctl(sb->notify_fd, SECCOMP_IOCTL_NOTIF_RECV, req) < 0) {
		/* The caller was killed or interrupted before we got to it. */
		if (errno == ENOENT || errno == EINTR)
			return 0;
		return apf_error_errno(APF_EINTERNAL, errno, "sandbox",
				       "receiving a notification");
	}
	ev->tid = (pid_t)req->pid;
	ev->nr = req->data.nr;
	struct text t = {ev->text, sizeof ev->text, 0};
	struct decision d = decide(sb, req, ev, &t);
	/* Anything read from the caller's memory belongs to the caller only
	 * if its notification is still alive: its pid might have been
	 * reused. A dead notification needs no answer. */
	uint64_t id = req->id;
	if (ioctl(sb->notify_fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) < 0) {
		memset(ev->text, 0, sizeof ev->text);
		ev->verdict = APF_SANDBOX_NONE;
		return 0;
	}
	ev->verdict = d.verdict;
	if (d.first_exec)
		sb->exec_done = 1;
	if (d.verdict == APF_SANDBOX_FAULT)
		apf_sandbox_record_fault(sb, ev->text, d.path);
	else if (d.verdict == APF_SANDBOX_ALLOWED)
		ev->text[0] = 0;
	else if (!ev->text[0])
		snprintf(ev->text, sizeof ev->text, "%s refused: %s", ev->name,
			 strerror(d.err));
	if (d.verdict == APF_SANDBOX_REFUSED)
		memcpy(sb->refusal, ev->text, sizeof sb->refusal);
	struct seccomp_notif_resp *resp = sb->resp;
	memset(resp, 0, sb->resp_size);
	resp->id = req->id;
	if (d.verdict == APF_SANDBOX_ALLOWED)
		resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
	else
		resp->error = -d.err;
	if (ioctl(sb->notify_fd, SECCOMP_IOCTL_NOTIF_SEND, resp) < 0 &&
	    errno != ENOENT && errno != EINTR)
		return apf_error_errno(APF_EINTERNAL, errno, "sandbox",
				       "answering a notification");
	return 0;
}
