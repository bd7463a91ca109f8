/*
 * policy.c: what a sandbox's program may reach, and what happens the first
 * time it reaches for something else. The policy is a list of normalised
 * prefixes, each readable or writable (a directory above a prefix is
 * readable too, so that "/" and "/proc" can be listed); plan.c adds the
 * configuration's mounts, scratch and paths to it, notify.c asks it about
 * each path a notified call names, and a fault - either's - is recorded
 * once and kills the sandbox. Both call down to it; it calls neither.
 */
#include "sandbox/internal.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>

int apf_sandbox_normalize(char *out, size_t size, const char *path)
{
	if (!path || path[0] != '/')
		return -EINVAL;
	size_t len = 0;
	const char *p = path;
	while (*p) {
		while (*p == '/')
			p++;
		size_t n = strcspn(p, "/");
		if (n == 0)
			break;
		if (n == 1 && p[0] == '.') {
		} else if (n == 2 && p[0] == '.' && p[1] == '.') {
			while (len > 0 && out[len - 1] != '/')
				len--;
			if (len > 0)
				len--;
		} else {
			if (len + 1 + n >= size)
				return -ENAMETOOLONG;
			out[len++] = '/';
			memcpy(out + len, p, n);
			len += n;
		}
		p += n;
	}
	if (len == 0)
		out[len++] = '/';
	out[len] = 0;
	return 0;
}

static int policy_add_one(apf_sandbox *sb, const char *norm, int access)
{
	for (size_t i = 0; i < sb->npolicy; i++)
		if (!strcmp(sb->policy[i].prefix, norm)) {
			sb->policy[i].access |= access;
			return 0;
		}
	if (sb->npolicy == sb->cappolicy) {
		size_t cap = sb->cappolicy ? 2 * sb->cappolicy : 32;
		struct policy_entry *p = realloc(sb->policy, cap * sizeof *p);
		if (!p)
			return apf_error(APF_ENOMEM, "sandbox", "out of memory");
		sb->policy = p;
		sb->cappolicy = cap;
	}
	char *copy = apf_strdup(norm);
	if (!copy)
		return apf_error(APF_ENOMEM, "sandbox", "out of memory");
	sb->policy[sb->npolicy++] = (struct policy_entry){copy, strlen(copy),
							 access};
	return 0;
}

int apf_sandbox_policy_add(apf_sandbox *sb, const char *prefix, int access)
{
	char norm[PATH_MAX];
	if (access != APF_SANDBOX_READ && access != APF_SANDBOX_WRITE)
		return apf_error(APF_EINPUT, "sandbox", "path %s: access must be "
				 "read or write", prefix ? prefix : "(null)");
	if (apf_sandbox_normalize(norm, sizeof norm, prefix) < 0)
		return apf_error(APF_EINPUT, "sandbox",
				 "path %s: not an absolute path",
				 prefix ? prefix : "(null)");
	int rc = policy_add_one(sb, norm, access);
	/* Paths are checked where they lead. Unsealed, the program's view is
	 * ours, so a prefix that passes through a symlink (/lib64 on a
	 * merged-/usr system, /etc/localtime) is added where it leads too -
	 * except under /proc, where "self" would be the supervisor. */
	if (rc == 0 && sb->mode == APF_SANDBOX_UNSEALED &&
	    strncmp(norm, "/proc/", 6) != 0) {
		char *real = realpath(norm, NULL);
		if (real && strcmp(real, norm) != 0)
			rc = policy_add_one(sb, real, access);
		free(real);
	}
	return rc;
}

/* What ordinary programs read at start-up (the dynamic loader's cache, the
 * CPU count glibc and OpenBLAS look up, the time zone, the file systems
 * libselinux checks for) and the device files every sandbox has. Absent
 * ones are simply not there. */
static const struct apf_sandbox_path defaults[] = {
	{"/proc/self", APF_SANDBOX_READ},
	{"/proc/cpuinfo", APF_SANDBOX_READ},
	{"/proc/filesystems", APF_SANDBOX_READ},
	{"/proc/loadavg", APF_SANDBOX_READ},
	{"/proc/meminfo", APF_SANDBOX_READ},
	{"/proc/stat", APF_SANDBOX_READ},
	{"/proc/sys/vm/overcommit_memory", APF_SANDBOX_READ},
	{"/sys/devices/system/cpu", APF_SANDBOX_READ},
	{"/sys/devices/system/node", APF_SANDBOX_READ},
	{"/etc/ld.so.cache", APF_SANDBOX_READ},
	{"/etc/ld.so.preload", APF_SANDBOX_READ},
	{"/etc/localtime", APF_SANDBOX_READ},
	{"/dev/random", APF_SANDBOX_READ},
	{"/dev/urandom", APF_SANDBOX_READ},
	{"/dev/null", APF_SANDBOX_WRITE},
	{"/dev/zero", APF_SANDBOX_WRITE},
	{"/dev/full", APF_SANDBOX_WRITE},
};

/* glibc asks nscd before reading /etc/passwd for any user lookup. Sealed,
 * there is no nscd, so the attempt is harmless and not worth a fault;
 * unsealed, the host's nscd would resolve names - and so reach the network
 * - for the program. */
static const struct apf_sandbox_path sealed_defaults[] = {
	{"/run/nscd/socket", APF_SANDBOX_WRITE},
	{"/var/run/nscd/socket", APF_SANDBOX_WRITE},
};

int apf_sandbox_policy_defaults(apf_sandbox *sb)
{
	for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
		int rc = apf_sandbox_policy_add(sb, defaults[i].prefix,
						defaults[i].access);
		if (rc < 0)
			return rc;
	}
	for (size_t i = 0; sb->mode == APF_SANDBOX_SEALED &&
			   i < sizeof sealed_defaults / sizeof sealed_defaults[0];
	     i++) {
		int rc = apf_sandbox_policy_add(sb, sealed_defaults[i].prefix,
						sealed_defaults[i].access);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int apf_sandbox_allow(apf_sandbox *sb, const char *prefix, int access)
{
	return apf_sandbox_policy_add(sb, prefix, access);
}

/* The access the policy grants path; *above: path is a directory above a
 * prefix. */
int apf_sandbox_policy_access(const apf_sandbox *sb, const char *path,
			      int *above)
{
	size_t len = strlen(path);
	int access = 0;
	*above = 0;
	for (size_t i = 0; i < sb->npolicy; i++) {
		const struct policy_entry *e = &sb->policy[i];
		if (e->len == 1 || (len >= e->len && !memcmp(path, e->prefix, e->len) &&
				    (path[e->len] == 0 || path[e->len] == '/')))
			access |= e->access;
		else if (len == 1 || (e->len > len && !memcmp(path, e->prefix, len) &&
				      e->prefix[len] == '/'))
			*above = 1;
	}
	return access;
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
