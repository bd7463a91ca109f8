/*
 * memory.c: the sandbox's one memory limit (limits.memory), counted by a
 * cgroup of its own where the kernel offers one, else by the rlimit
 * fallback.
 *
 * cgroup2, where /sys/fs/cgroup is cgroup2 and our own cgroup hands the
 * memory controller down (it is in cgroup.subtree_control, or may be put
 * there): a child cgroup with memory.max, memory.swap.max 0 (swap cannot
 * hide memory) and memory.oom.group (an OOM kill takes the whole sandbox).
 * cgroup1, where the memory controller has a v1 hierarchy: a child of our
 * own memory cgroup - never of the root - with memory.limit_in_bytes and,
 * where swap is accounted, memory.memsw.limit_in_bytes at the same value.
 *
 * Either way the directory is made before the clone and only the program
 * goes in: the supervisor writes its pid to cgroup.procs while the
 * program's own execve still waits for the supervisor's answer, so what the
 * program and its children charge from their first instruction on is
 * counted, and init (ours) stays outside, so an OOM kill can only pick the
 * program or what it started. The kernel charges a page to the cgroup of
 * the process that first faults it: anonymous memory, page tables, memfd
 * and SysV shm pages, the scratch tmpfs and the page cache of its files -
 * a memfd the program fills is counted, even one the caller passed.
 * How it ended is read from the counters before the directory goes: the
 * OOM kills (memory.oom_control or memory.events), the times the limit was
 * hit, and the peak charge. The directory is removed once the sandbox has
 * ended (whatever is still in it is killed first; removal is retried for a
 * while) and again by apf_sandbox_free. One left by a supervisor that was
 * killed (kill -9) is removed by the next sandbox in the same parent once
 * the pid in its name is gone.
 *
 * Not available - no memory controller, a read-only cgroup file system,
 * not root and nothing delegated - means the rlimit fallback (plan.c and
 * notify.c do its part); a step that fails once a cgroup looked usable is
 * an error naming the step, never a silent fallback.
 */
#include "sandbox/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#define CG_ROOT "/sys/fs/cgroup"
#define CG_PREFIX "apf-sandbox-"
/* A directory whose supervisor is gone is swept only when older than this:
 * one just made by a supervisor in another pid namespace is not ours to
 * judge by its pid. */
#define STALE_S 60
#define REMOVE_TIMEOUT_NS 2000000000ull

static atomic_uint sequence;

/* dir/name in out (PATH_MAX bytes); "" when too long, which no open
 * finds. */
static char *cg_file(char *out, const char *dir, const char *name)
{
	size_t d = strlen(dir), n = strlen(name);
	if (d + 1 + n >= PATH_MAX) {
		out[0] = 0;
		return out;
	}
	memcpy(out, dir, d);
	out[d] = '/';
	memcpy(out + d + 1, name, n + 1);
	return out;
}

/* Reads a small file whole; returns its length or -errno. */
static ssize_t read_text(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t len = 0;
	while (len + 1 < size) {
		ssize_t n = read(fd, buf + len, size - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = errno;
			close(fd);
			return -err;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = 0;
	return (ssize_t)len;
}

/* Writes s to a cgroup file; returns 0 or errno. */
static int write_text(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	size_t len = strlen(s);
	ssize_t n;
	do
		n = write(fd, s, len);
	while (n < 0 && errno == EINTR);
	int err = n == (ssize_t)len ? 0 : n < 0 ? errno : EIO;
	close(fd);
	return err;
}

/* The number after "key " at the start of a line of a flat-keyed cgroup
 * file; 0 when absent (*found says which). */
static uint64_t keyed(const char *text, const char *key, int *found)
{
	size_t k = strlen(key);
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (!strncmp(p, key, k) && p[k] == ' ') {
			if (found)
				*found = 1;
			return strtoull(p + k + 1, NULL, 10);
		}
	return 0;
}

static uint64_t file_u64(const char *dir, const char *name)
{
	char path[PATH_MAX], buf[64];
	cg_file(path, dir, name);
	return read_text(path, buf, sizeof buf) > 0 ? strtoull(buf, NULL, 10) : 0;
}

/* 1 when word is one of the separated words of list. */
static int has_word(const char *list, const char *word, const char *seps)
{
	size_t n = strlen(word);
	for (const char *p = list; *p; p += strcspn(p, seps), p += *p != 0)
		if (!strncmp(p, word, n) && (!p[n] || strchr(seps, p[n])))
			return 1;
	return 0;
}

/* mountinfo escapes blanks and backslashes as \ooo. */
static void unescape(char *s)
{
	char *o = s;
	for (char *i = s; *i; o++) {
		if (i[0] == '\\' && i[1] >= '0' && i[1] <= '3' && i[2] && i[3]) {
			*o = (char)((i[1] - '0') * 64 + (i[2] - '0') * 8 + (i[3] - '0'));
			i += 4;
		} else {
			*o = *i++;
		}
	}
	*o = 0;
}

/* The mount of the hierarchy: v2, the cgroup2 mount on /sys/fs/cgroup; v1,
 * a cgroup mount with the memory controller. Its mount point and the
 * hierarchy path it shows; 1 found, 0 not. */
static int find_mount(int v2, char *point, char *root, size_t size)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return 0;
	char *line = NULL;
	size_t cap = 0;
	int found = 0;
	while (!found && getline(&line, &cap, f) > 0) {
		/* id parent dev root point options [optional...] - type src super */
		char *field[16];
		size_t n = 0;
		for (char *s = strtok(line, " \n"); s && n < 16; s = strtok(NULL, " \n"))
			field[n++] = s;
		size_t dash = 6;
		while (dash < n && strcmp(field[dash], "-"))
			dash++;
		if (dash + 3 >= n)
			continue;
		const char *type = field[dash + 1];
		const char *super = field[dash + 3];
		unescape(field[3]);
		unescape(field[4]);
		if (v2 ? strcmp(type, "cgroup2") || strcmp(field[4], CG_ROOT)
		       : strcmp(type, "cgroup") || !has_word(super, "memory", ","))
			continue;
		if (strlen(field[3]) >= size || strlen(field[4]) >= size)
			continue;
		strcpy(root, field[3]);
		strcpy(point, field[4]);
		found = 1;
	}
	free(line);
	fclose(f);
	return found;
}

/* Our own cgroup in the hierarchy, from /proc/self/cgroup: v2, the "0::"
 * line; v1, the line whose controllers include memory. 1 found, 0 not. */
static int own_cgroup(int v2, char *out, size_t size)
{
	char buf[8192];
	if (read_text("/proc/self/cgroup", buf, sizeof buf) <= 0)
		return 0;
	for (char *p = buf; *p;) {
		char *end = p + strcspn(p, "\n");
		char *nl = *end ? end + 1 : end;
		*end = 0;
		char *c1 = strchr(p, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (c2) {
			*c1 = *c2 = 0;
			int match = v2 ? !strcmp(p, "0") && !c1[1]
				       : has_word(c1 + 1, "memory", ",");
			if (match && c2[1] == '/' && strlen(c2 + 1) < size) {
				strcpy(out, c2 + 1);
				return 1;
			}
		}
		p = nl;
	}
	return 0;
}

/* The directory of our own cgroup: the mount point plus our path below the
 * mount's root. 1 found, 0 when the hierarchy or we are not to be seen. */
static int own_dir(int v2, char *dir, size_t size)
{
	char point[PATH_MAX], root[PATH_MAX], path[PATH_MAX];
	if (!find_mount(v2, point, root, sizeof point) ||
	    !own_cgroup(v2, path, sizeof path))
		return 0;
	size_t r = strcmp(root, "/") ? strlen(root) : 0;
	if (r && (strncmp(path, root, r) || (path[r] && path[r] != '/')))
		return 0; /* our cgroup is outside what is mounted */
	int n = snprintf(dir, size, "%s%s", point, path[r] ? path + r : "");
	if (n < 0 || (size_t)n >= size)
		return 0;
	n = (int)strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		dir[--n] = 0;
	struct stat st;
	return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Removes the directories of sandboxes whose supervisor is gone. */
static void sweep_stale(const char *parent)
{
	DIR *d = opendir(parent);
	if (!d)
		return;
	time_t now = time(NULL);
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t k = strlen(CG_PREFIX);
		if (strncmp(de->d_name, CG_PREFIX, k))
			continue;
		char *end;
		long pid = strtol(de->d_name + k, &end, 10);
		if (pid <= 0 || *end != '-' || pid == (long)getpid())
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		char path[PATH_MAX];
		struct stat st;
		if (stat(cg_file(path, parent, de->d_name), &st) < 0 ||
		    now - st.st_mtime < STALE_S)
			continue;
		rmdir(path); /* fails while something still runs in it */
	}
	closedir(d);
}

/* Errors that mean "no cgroup for us here", not "a cgroup broke". */
static int unavailable(int err)
{
	return err == EACCES || err == EPERM || err == EROFS || err == ENOENT ||
	       err == EBUSY || err == EOPNOTSUPP || err == ENODEV;
}

/* The memory controller, handed down to our children: already, or by
 * enabling it (which the kernel refuses while we ourselves are in a
 * non-root cgroup: then it is not delegated to us). 0, or errno. */
static int v2_controller(const char *parent)
{
	char path[PATH_MAX], buf[512];
	cg_file(path, parent, "cgroup.controllers");
	if (read_text(path, buf, sizeof buf) < 0 ||
	    !has_word(buf, "memory", " \n"))
		return ENODEV;
	cg_file(path, parent, "cgroup.subtree_control");
	ssize_t n = read_text(path, buf, sizeof buf);
	if (n < 0)
		return (int)-n;
	if (has_word(buf, "memory", " \n"))
		return 0;
	return write_text(path, "+memory");
}

static int cg_write(const char *dir, const char *name, uint64_t v,
		    int optional)
{
	char path[PATH_MAX], num[32];
	cg_file(path, dir, name);
	if (v == UINT64_MAX)
		snprintf(num, sizeof num, "max");
	else
		snprintf(num, sizeof num, "%llu", (unsigned long long)v);
	int err = write_text(path, num);
	if (err == ENOENT && optional)
		return 0;
	if (err)
		return apf_error_errno(APF_EABORT, err, "sandbox",
				       "memory cgroup: writing %s to %s", num,
				       path);
	return 0;
}

int apf_sandbox_memory_setup(apf_sandbox *sb, uint64_t bytes)
{
	sb->mem = SB_MEM_NONE;
	sb->mem_bytes = bytes;
	if (!bytes)
		return 0;
	sb->mem = SB_MEM_RLIMIT;
	struct statfs sf;
	int v2 = statfs(CG_ROOT, &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC;
	char parent[PATH_MAX];
	if (!own_dir(v2, parent, sizeof parent))
		return 0;
	if (v2) {
		int err = v2_controller(parent);
		if (err && unavailable(err))
			return 0;
		if (err)
			return apf_error_errno(APF_EABORT, err, "sandbox",
					       "memory cgroup: enabling the "
					       "memory controller in %s",
					       parent);
	}
	sweep_stale(parent);
	char dir[PATH_MAX];
	if (snprintf(dir, sizeof dir, "%s/" CG_PREFIX "%d-%u", parent,
		     (int)getpid(), atomic_fetch_add(&sequence, 1)) >=
	    (int)sizeof dir)
		return 0;
	if (mkdir(dir, 0755) < 0) {
		if (errno == EACCES || errno == EPERM || errno == EROFS)
			return 0;
		return apf_error_errno(APF_EABORT, errno, "sandbox",
				       "memory cgroup: mkdir %s", dir);
	}
	if (!(sb->cgroup = apf_strdup(dir))) {
		rmdir(dir);
		return apf_error(APF_ENOMEM, "sandbox", "out of memory");
	}
	sb->mem = v2 ? SB_MEM_CGROUP2 : SB_MEM_CGROUP1;
	int rc;
	if (v2) {
		rc = cg_write(dir, "memory.max", bytes, 0);
		if (!rc)
			rc = cg_write(dir, "memory.swap.max", 0, 1);
		if (!rc)
			rc = cg_write(dir, "memory.oom.group", 1, 1);
	} else {
		rc = cg_write(dir, "memory.limit_in_bytes", bytes, 0);
		/* The sum of memory and swap, at the same value: nothing can
		 * go to swap beyond the limit. Without swap accounting there
		 * is no such file, and swapping is only discouraged. */
		if (!rc) {
			char path[PATH_MAX];
			struct stat st;
			cg_file(path, dir, "memory.memsw.limit_in_bytes");
			if (stat(path, &st) == 0) {
				rc = cg_write(dir, "memory.memsw.limit_in_bytes",
					      bytes, 0);
			} else if (cg_write(dir, "memory.swappiness", 0, 1) < 0) {
				apf_error_clear();
			}
		}
	}
	if (rc < 0) {
		apf_sandbox_memory_remove(sb);
		sb->mem = SB_MEM_RLIMIT;
	}
	return rc;
}

int apf_sandbox_memory_enter(apf_sandbox *sb, pid_t pid)
{
	if (!sb->cgroup)
		return 0;
	char path[PATH_MAX], num[32];
	cg_file(path, sb->cgroup, "cgroup.procs");
	snprintf(num, sizeof num, "%d", (int)pid);
	int err = write_text(path, num);
	if (err)
		return apf_error_errno(APF_EABORT, err, "sandbox",
				       "memory cgroup: moving the program into %s",
				       path);
	return 0;
}

void apf_sandbox_memory_read(apf_sandbox *sb)
{
	if (!sb->cgroup || sb->cg_read)
		return;
	sb->cg_read = 1;
	char path[PATH_MAX], buf[2048];
	if (sb->mem == SB_MEM_CGROUP2) {
		cg_file(path, sb->cgroup, "memory.events");
		if (read_text(path, buf, sizeof buf) > 0) {
			sb->cg_oom_kills = keyed(buf, "oom_kill",
						 &sb->cg_oom_counted);
			sb->cg_failcnt = keyed(buf, "max", NULL);
		}
		sb->cg_peak = file_u64(sb->cgroup, "memory.peak");
	} else {
		cg_file(path, sb->cgroup, "memory.oom_control");
		if (read_text(path, buf, sizeof buf) > 0)
			sb->cg_oom_kills = keyed(buf, "oom_kill",
						 &sb->cg_oom_counted);
		sb->cg_failcnt = file_u64(sb->cgroup, "memory.failcnt") +
				 file_u64(sb->cgroup, "memory.memsw.failcnt");
		uint64_t a = file_u64(sb->cgroup, "memory.max_usage_in_bytes");
		uint64_t b = file_u64(sb->cgroup,
				      "memory.memsw.max_usage_in_bytes");
		sb->cg_peak = a > b ? a : b;
	}
}

/* SIGKILL to whatever is still in the cgroup: it is all the sandbox's. */
static void kill_members(const apf_sandbox *sb)
{
	char path[PATH_MAX], buf[8192];
	if (sb->mem == SB_MEM_CGROUP2) {
		cg_file(path, sb->cgroup, "cgroup.kill");
		write_text(path, "1");
	}
	cg_file(path, sb->cgroup, "cgroup.procs");
	if (read_text(path, buf, sizeof buf) <= 0)
		return;
	for (char *p = buf; *p;) {
		char *end;
		long pid = strtol(p, &end, 10);
		if (end == p)
			break;
		if (pid > 0)
			kill((pid_t)pid, SIGKILL);
		p = end + strspn(end, "\n");
	}
}

void apf_sandbox_memory_remove(apf_sandbox *sb)
{
	if (!sb->cgroup)
		return;
	uint64_t deadline = apf_now_ns() + REMOVE_TIMEOUT_NS;
	for (;;) {
		if (rmdir(sb->cgroup) == 0 || errno == ENOENT) {
			free(sb->cgroup);
			sb->cgroup = NULL;
			return;
		}
		/* EBUSY: a process is still in it, or still exiting */
		if (errno != EBUSY || apf_now_ns() > deadline)
			return; /* apf_sandbox_free tries again */
		kill_members(sb);
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
}

const char *apf_sandbox_memory_mechanism(const apf_sandbox *sb)
{
	switch (sb->mem) {
	case SB_MEM_CGROUP2:
		return "cgroup2";
	case SB_MEM_CGROUP1:
		return "cgroup1";
	case SB_MEM_RLIMIT:
		return "rlimit";
	case SB_MEM_NONE:
		break;
	}
	return "none";
}

const char *apf_sandbox_memory_cgroup(const apf_sandbox *sb)
{
	return sb->cgroup;
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
